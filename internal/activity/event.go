// Package activity is the agent's activity journal (README): a local SQLite
// database (modernc.org/sqlite, WAL) of what the agent did — time, kind, tool,
// job ID, outcome, duration, error code, and for a few kinds a phase, a job
// state or a link-end reason.
//
// The journal is content-free by construction. Every stored text field is a
// word from a closed allowlist defined in this package; a value outside its
// allowlist is replaced by [Other] before it reaches the database, and a job
// ID that is not a canonical lowercase UUID is dropped. No command, argument,
// path, environment value, output byte or raw error text can be written,
// because the schema has no column that could hold one.
//
// The journal is bounded to limits.JournalMaxEntries entries and
// limits.JournalMaxAge, and it can never fail an operation: [Journal.Record]
// returns nothing, does no disk I/O on the caller's goroutine and never
// blocks; write failures and overflow are only counted ([Journal.Stats]).
package activity

import (
	"errors"
	"slices"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
)

// Other replaces any field value that is not in its allowlist.
const Other = "other"

// Kind says what an event records.
type Kind string

// The closed set of kinds.
const (
	// KindAgentStart: the agent started serving (outcome ok).
	KindAgentStart Kind = "agent_start"
	// KindAgentStop: the agent stopped serving (outcome ok, or failed when it
	// stopped because of an error).
	KindAgentStop Kind = "agent_stop"
	// KindToolCall: one tool call finished. Tool, outcome, duration, error code
	// on failure, and the job ID when the call names one.
	KindToolCall Kind = "tool_call"
	// KindLaunchPhase: one phase of a managed-job launch finished. Phase,
	// duration, outcome, job ID once admitted, and the launch reason on failure.
	KindLaunchPhase Kind = "launch_phase"
	// KindJobEnd: the agent observed a managed job reach a terminal state.
	// Job ID, state, outcome (ok for exited, stopped_by_request and timed_out, failed
	// otherwise; see [JobEndEvent]).
	KindJobEnd Kind = "job_end"
	// KindReconcile: the agent reconciled a job's record from evidence rather
	// than from its supervisor (after an agent restart, a lost supervisor, a
	// reboot). Job ID and the state it settled on. A recovery entry: it is
	// kept by the errors-only view.
	KindReconcile Kind = "reconcile"
	// KindLinkUp: the link to the server was established.
	KindLinkUp Kind = "link_up"
	// KindLinkEnd: the link to the server ended; the one bounded diagnostic of
	// the README. Reason names the kind of end, duration is how long the link
	// was up, outcome is ok only for a local shutdown (see [LinkEndEvent]).
	KindLinkEnd Kind = "link_end"
	// KindUserManager: the agent abandoned its connection to the systemd
	// user manager (the manager was replaced, its bus closed or was taken
	// over) and reconnected to the current one. Reason says which; outcome
	// is failed when no manager answered then (see [UserManagerEvent]). A
	// recovery entry: it is kept by the errors-only view.
	KindUserManager Kind = "user_manager"
	// KindUpdate: a step of an update of the agent's own binary. Reason
	// says which (see the Reason constants of updates); outcome is failed
	// for a refusal, a failure or a rollback. Versions are not journaled:
	// `commandcore status` shows them.
	KindUpdate Kind = "update"
)

// Tool is an MCP tool name (docs/tools.md).
type Tool string

// The closed set of tools.
const (
	ToolProcessStart  Tool = "process.start"
	ToolProcessStatus Tool = "process.status"
	ToolProcessOutput Tool = "process.output"
	ToolProcessStop   Tool = "process.stop"
	ToolProcessWait   Tool = "process.wait"
	ToolProcessInput  Tool = "process.input"
	ToolProcessResize Tool = "process.resize"
	ToolProcessScreen Tool = "process.screen"
	ToolProcessJobs   Tool = "process.jobs"
	ToolProcessForget Tool = "process.forget"
	ToolProcessRun    Tool = "process.run"
	ToolProcessList   Tool = "process.list"
	ToolSystemMetrics Tool = "system.metrics"
	ToolFilesSearch   Tool = "files.search"
	ToolFilesRead     Tool = "files.read"
	ToolFilesWrite    Tool = "files.write"
	ToolFilesEdit     Tool = "files.edit"
	ToolFilesList     Tool = "files.list"
	ToolDevicesList   Tool = "devices.list"
)

// Phase is a named phase of a managed-job launch.
type Phase string

// The closed set of launch phases, in launch order.
const (
	// PhaseValidate: the request's arguments were checked.
	PhaseValidate Phase = "validate"
	// PhasePolicy: the owner's resource policy was loaded.
	PhasePolicy Phase = "policy"
	// PhaseDomain: the failure domain (systemd user manager or fallback) was chosen.
	PhaseDomain Phase = "domain"
	// PhaseAdmission: the job was admitted (live-job and retention bounds, pruning).
	PhaseAdmission Phase = "admission"
	// PhasePipe: the private envelope pipe was created.
	PhasePipe Phase = "pipe"
	// PhaseUnitStart: the transient unit (or fallback process) was started.
	PhaseUnitStart Phase = "unit_start"
	// PhaseSpareHandOver: the job was handed to a spare supervisor, up in
	// its unit before the job was asked for, in place of a unit start.
	PhaseSpareHandOver Phase = "spare_handover"
	// PhaseIdentityClaim: the supervisor's identity claim was awaited.
	PhaseIdentityClaim Phase = "identity_claim"
	// PhaseEnvelopeWrite: the envelope was delivered to the supervisor.
	PhaseEnvelopeWrite Phase = "envelope_write"
	// PhaseRollback: a failed launch released what it had acquired.
	PhaseRollback Phase = "rollback"
)

// Outcome is the result of what an event records.
type Outcome string

// The closed set of outcomes.
const (
	OutcomeOK     Outcome = "ok"
	OutcomeFailed Outcome = "failed"
)

// Reason names the kind of a link end (README).
type Reason string

// The closed set of link-end reasons.
const (
	ReasonRemoteClose    Reason = "remote_close"
	ReasonSendTimeout    Reason = "send_timeout"
	ReasonSilenceTimeout Reason = "silence_timeout"
	ReasonProtocolError  Reason = "protocol_error"
	ReasonAuthFailure    Reason = "authentication_failure"
	ReasonLocalShutdown  Reason = "local_shutdown"
	// ReasonNetworkError: the connection failed underneath the WebSocket
	// (reset, unreachable) without a close frame.
	ReasonNetworkError Reason = "network_error"
	// ReasonDeviceBusy: the server refused the link because another link
	// with this device's credentials still answers (device_busy).
	ReasonDeviceBusy Reason = "device_busy"
)

// The closed set of reasons the agent abandoned its user manager (the
// launcher's words, launcher.LossReason).
const (
	// ReasonUserManagerGone: the recorded manager (PID and start ticks) is gone.
	ReasonUserManagerGone Reason = "user_manager_gone"
	// ReasonBusClosed: the connection to the user bus closed.
	ReasonBusClosed Reason = "bus_closed"
	// ReasonBusReplaced: another bus took over the user bus socket.
	ReasonBusReplaced Reason = "bus_replaced"
)

// The closed set of an update's steps.
const (
	// ReasonUpdateStarted: the new binary is verified and in place; the
	// watchdog restarts the service.
	ReasonUpdateStarted Reason = "update_started"
	// ReasonUpdateLinked: the new agent linked in time.
	ReasonUpdateLinked Reason = "update_linked"
	// ReasonUpdateRolledBack: it did not; the previous binary is back.
	ReasonUpdateRolledBack Reason = "update_rolled_back"
	// ReasonUpdateRefused: the update was refused before anything was
	// fetched (a downgrade, not a service, a directory not the user's).
	ReasonUpdateRefused Reason = "update_refused"
	// ReasonUpdateFailed: the download, its verification or the swap
	// failed; the installed binary is the one before.
	ReasonUpdateFailed Reason = "update_failed"
)

// Event is one journal entry. Its JSON form is what `commandcore activity
// --json` prints, one object per line; every key is always present.
//
// ErrorCode takes an errcode.Code or a launch reason (jobmeta.LaunchErr*);
// State takes a jobmeta.State. Every text field is checked against its
// allowlist when the event is recorded and again when it is read.
type Event struct {
	// ID is assigned by the journal; it only grows, so a follower can resume
	// after the last ID it saw.
	ID int64 `json:"id"`
	// Time is in UTC. Record stamps the current time when it is zero.
	Time       time.Time `json:"time"`
	Kind       Kind      `json:"kind"`
	Tool       Tool      `json:"tool"`
	JobID      string    `json:"job_id"`
	Phase      Phase     `json:"phase"`
	Outcome    Outcome   `json:"outcome"`
	DurationMS int64     `json:"duration_ms"`
	ErrorCode  string    `json:"error_code"`
	State      string    `json:"state"`
	Reason     Reason    `json:"reason"`
}

// Allowlists. An empty value is allowed for every field but Kind. Slices of
// constants, not maps: the linker lays them out, so no role of the binary
// builds them at start-up, and a scan of a few words costs no more than a
// lookup.
var (
	kinds = []Kind{KindAgentStart, KindAgentStop, KindToolCall, KindLaunchPhase,
		KindJobEnd, KindReconcile, KindLinkUp, KindLinkEnd, KindUserManager, KindUpdate}
	tools = []Tool{ToolProcessStart, ToolProcessStatus, ToolProcessOutput, ToolProcessStop,
		ToolProcessWait, ToolProcessInput, ToolProcessResize, ToolProcessScreen, ToolProcessJobs, ToolProcessForget, ToolProcessRun, ToolProcessList,
		ToolSystemMetrics, ToolFilesSearch, ToolDevicesList,
		ToolFilesRead, ToolFilesWrite, ToolFilesEdit, ToolFilesList}
	phases = []Phase{PhaseValidate, PhasePolicy, PhaseDomain, PhaseAdmission, PhasePipe,
		PhaseUnitStart, PhaseSpareHandOver, PhaseIdentityClaim, PhaseEnvelopeWrite, PhaseRollback}
	outcomes   = []Outcome{OutcomeOK, OutcomeFailed}
	errorCodes = []string{
		string(errcode.NotFound), string(errcode.InvalidArgument), string(errcode.JobTableFull),
		string(errcode.RetentionFull), string(errcode.PolicyInvalid), string(errcode.SystemdUnavailable),
		string(errcode.PermissionDenied), string(errcode.GrantInvalid), string(errcode.IdentityMismatch),
		string(errcode.Internal), string(errcode.DeviceOffline), string(errcode.ResultTooLarge),
		string(errcode.AlreadyExists), string(errcode.Conflict), string(errcode.EditMismatch),
		jobmeta.LaunchErrInternal, jobmeta.LaunchErrPipe, jobmeta.LaunchErrUnit,
		jobmeta.LaunchErrClaimTimeout, jobmeta.LaunchErrSupervisor,
	}
	states = []string{
		string(jobmeta.Starting), string(jobmeta.Running), string(jobmeta.Stopping),
		string(jobmeta.Exited), string(jobmeta.StoppedByRequest), string(jobmeta.TimedOut), string(jobmeta.WorkloadOOM),
		string(jobmeta.WorkerLost), string(jobmeta.HostRebooted), string(jobmeta.UserManagerLost),
		string(jobmeta.LaunchFailed), string(jobmeta.Corrupt),
	}
	reasons = []Reason{ReasonRemoteClose, ReasonSendTimeout, ReasonSilenceTimeout, ReasonProtocolError,
		ReasonAuthFailure, ReasonLocalShutdown, ReasonNetworkError, ReasonDeviceBusy,
		ReasonUserManagerGone, ReasonBusClosed, ReasonBusReplaced,
		ReasonUpdateStarted, ReasonUpdateLinked, ReasonUpdateRolledBack, ReasonUpdateRefused, ReasonUpdateFailed}
)

// allow returns v when it is empty or allowed, else Other.
func allow[T ~string](list []T, v T) T {
	if v == "" || slices.Contains(list, v) {
		return v
	}
	return Other
}

// sanitize returns e with every field reduced to its allowlist: every text
// field of the result is empty, a word of its allowlist, Other, or (JobID) a
// canonical UUID. It does no I/O.
func sanitize(e Event) Event {
	out := Event{
		ID:         e.ID,
		Time:       e.Time.UTC(),
		Kind:       allow(kinds, e.Kind),
		Tool:       allow(tools, e.Tool),
		JobID:      canonicalJobID(e.JobID),
		Phase:      allow(phases, e.Phase),
		Outcome:    allow(outcomes, e.Outcome),
		DurationMS: max(e.DurationMS, 0),
		ErrorCode:  allow(errorCodes, e.ErrorCode),
		State:      allow(states, e.State),
		Reason:     allow(reasons, e.Reason),
	}
	if out.Kind == "" {
		out.Kind = Other
	}
	return out
}

// canonicalJobID returns id when it is a canonical lowercase UUID
// (8-4-4-4-12 hex digits), else "".
func canonicalJobID(id string) string {
	if len(id) != 36 {
		return ""
	}
	var b [36]byte
	for i := 0; i < 36; i++ {
		c := id[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return ""
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return ""
			}
		}
		b[i] = c
	}
	return string(b[:])
}

// isFailureOrRecovery reports whether an event belongs to the errors-only
// view: a failed outcome or a recovery (reconcile, user_manager) entry. It
// matches errorsOnlySQL.
func isFailureOrRecovery(e Event) bool {
	return e.Outcome == OutcomeFailed || e.Kind == KindReconcile || e.Kind == KindUserManager
}

const errorsOnlySQL = `(outcome = 'failed' OR kind IN ('reconcile', 'user_manager'))`

// ToolCallEvent describes a finished tool call. err, when not nil, sets the
// outcome to failed and the error code to its errcode.Code (never its text).
func ToolCallEvent(tool Tool, jobID string, d time.Duration, err error) Event {
	e := Event{Kind: KindToolCall, Tool: tool, JobID: jobID, Outcome: OutcomeOK, DurationMS: d.Milliseconds()}
	if err != nil {
		e.Outcome = OutcomeFailed
		e.ErrorCode = string(errcode.From(err).Code)
	}
	return e
}

// LaunchPhaseEvent describes one finished launch phase. A non-empty code (an
// errcode.Code or a jobmeta.LaunchErr* reason) marks the phase failed.
func LaunchPhaseEvent(phase Phase, jobID string, d time.Duration, code string) Event {
	e := Event{Kind: KindLaunchPhase, Phase: phase, JobID: jobID, Outcome: OutcomeOK, DurationMS: d.Milliseconds()}
	if code != "" {
		e.Outcome = OutcomeFailed
		e.ErrorCode = code
	}
	return e
}

// JobEndEvent describes a job observed in a terminal state. The outcome is
// ok for exited, stopped_by_request and timed_out (a limit its starter
// asked for), failed for every other end (the job ended for a reason
// nobody asked for).
func JobEndEvent(jobID string, state jobmeta.State) Event {
	e := Event{Kind: KindJobEnd, JobID: jobID, State: string(state), Outcome: OutcomeFailed}
	if state == jobmeta.Exited || state == jobmeta.StoppedByRequest || state == jobmeta.TimedOut {
		e.Outcome = OutcomeOK
	}
	return e
}

// ReconcileEvent describes a job whose record the agent settled from
// evidence, and the state it settled on.
func ReconcileEvent(jobID string, state jobmeta.State) Event {
	return Event{Kind: KindReconcile, JobID: jobID, State: string(state), Outcome: OutcomeOK}
}

// LinkEndEvent is the one bounded diagnostic of a link end: its kind and how
// long the link was up. Only a local shutdown is an ok outcome.
func LinkEndEvent(reason Reason, up time.Duration) Event {
	e := Event{Kind: KindLinkEnd, Reason: reason, Outcome: OutcomeFailed, DurationMS: up.Milliseconds()}
	if reason == ReasonLocalShutdown {
		e.Outcome = OutcomeOK
	}
	return e
}

// UserManagerEvent describes the agent abandoning its connection to a user
// manager for reason, and whether a manager answered when it reconnected.
func UserManagerEvent(reason Reason, reachable bool) Event {
	e := Event{Kind: KindUserManager, Reason: reason, Outcome: OutcomeOK}
	if !reachable {
		e.Outcome = OutcomeFailed
	}
	return e
}

// errClosed is returned by readers used after Close.
var errClosed = errors.New("activity: journal closed")
