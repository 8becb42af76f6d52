package jobmeta

import (
	"time"

	"github.com/commandcore/commandcore/internal/capture"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/terminal"
)

// SchemaVersion is the metadata schema this build writes. Readers accept
// every version up to it; a job keeps the supervision path its schema names.
const SchemaVersion = 1

// File names inside a job directory. Each file has exactly one writer, so
// no two processes ever race on the same file:
//   - JobFile: the launcher (agent or `commandcore mcp`), at launch: a
//     copy of the launch record for the supervisor, which tells by it a
//     spare's directory from a job's. The agent believes only the
//     protected launch record (package jobstore), out of the job's reach.
//   - ClaimFile, ResultFile: the job's supervisor (LegacyClaimFile is
//     the claim's name in job directories of earlier builds, read only).
//   - StopFile, ReadFile, ReconciledFile: whoever manages the job later.
//   - SpareLockFile: an earlier build's lock of a spare, read only.
const (
	JobFile   = "job.json"
	ClaimFile = "claim.json"
	// LegacyClaimFile is read when ClaimFile is missing, never written.
	LegacyClaimFile = "identity.json"
	ResultFile      = "result.json"
	StopFile        = "stop.json"
	ReadMarkFile    = "read.json"
	ReconciledFile  = "reconciled.json"
	StdoutFile      = "stdout.cap"
	StderrFile      = "stderr.cap"
	// ScreenFile is a pty job's screen, written by its supervisor when
	// asked and when the job ends.
	ScreenFile = "screen.json"
	// SpareLockFile is where an earlier build locked a spare's
	// directory; this one keeps the lock out of the job's reach.
	SpareLockFile = "spare.lock"
)

// Job is what the launcher records at launch. It holds no command,
// environment, working directory or output.
type Job struct {
	Schema   int    `json:"schema"`
	ID       string `json:"id"`
	DeviceID string `json:"device_id"`
	Name     string `json:"name,omitempty"`
	// Owner is the principal that started the job (package principal);
	// empty on jobs from before jobs had owners.
	Owner         string    `json:"owner,omitempty"`
	Unit          string    `json:"unit,omitempty"`
	FailureDomain string    `json:"failure_domain"`
	CreatedAt     time.Time `json:"created_at"`
	// TimeoutS is the time limit asked for, in seconds; 0 means none.
	TimeoutS int `json:"timeout_s,omitempty"`
	// Stdin and PTY say how the job takes input (never what it was given).
	Stdin bool           `json:"stdin,omitempty"`
	PTY   *terminal.Size `json:"pty,omitempty"`
	// LaunchFailed is set when the launch was abandoned; LaunchError is a
	// stable code saying why.
	LaunchFailed bool       `json:"launch_failed,omitempty"`
	LaunchError  string     `json:"launch_error,omitempty"`
	FailedAt     *time.Time `json:"failed_at,omitempty"`
	// Idempotency is set for a job started with an idempotency key.
	Idempotency *Idempotency `json:"idempotency,omitempty"`

	// The fields below are the agent's alone, kept in the protected
	// launch record (package jobstore), never in the job directory.

	// BootID is the boot the job was admitted in: a job of another boot
	// has ended, whatever its files say.
	BootID string `json:"boot_id,omitempty"`
	// Supervisor is the supervisor's identity as the agent saw it: the
	// process it forked for a fallback job, or the claim an earlier
	// build's job had when it was adopted.
	Supervisor *procid.Identity `json:"supervisor,omitempty"`
	// Adopted marks a record taken over from the job.json an earlier
	// build wrote, the first time this build saw the job.
	Adopted bool `json:"adopted,omitempty"`
}

// Idempotency is what a job keeps of the idempotency key it was started
// with: digests only, so neither the key nor the request can be read back.
type Idempotency struct {
	// Key is the SHA-256 of the key, in hex.
	Key string `json:"key"`
	// Request is the SHA-256, in hex, of the job's ID and the request's
	// launch fields; a repeat with other fields is a conflict.
	Request string `json:"request"`
}

// Reasons a launch was abandoned (Job.LaunchError).
const (
	LaunchErrInternal     = "internal"
	LaunchErrPipe         = "pipe_failed"
	LaunchErrUnit         = "unit_start_failed"
	LaunchErrClaimTimeout = "identity_claim_timeout"
	LaunchErrSupervisor   = "supervisor_failed"
)

// Claim is the supervisor's claim: the process identities of the
// supervisor, its manager and its shell, written to ClaimFile before the
// shell starts and again once the shell runs (with Child set).
type Claim struct {
	Schema       int              `json:"schema"`
	Supervisor   procid.Identity  `json:"supervisor"`
	BootID       string           `json:"boot_id"`
	InvocationID string           `json:"invocation_id,omitempty"`
	Manager      *procid.Identity `json:"manager,omitempty"`
	ClaimedAt    time.Time        `json:"claimed_at"`
	Child        *procid.Identity `json:"child,omitempty"`
	StartedAt    *time.Time       `json:"started_at,omitempty"`
}

// StreamCapture is the capture metadata of one stream. Pointers
// are null when the writer of the metadata did not know the value.
type StreamCapture struct {
	ObservedBytes *int64     `json:"observed_bytes" jsonschema:"bytes the job wrote to the stream (null: unknown)"`
	RetainedBytes *int64     `json:"retained_bytes" jsonschema:"bytes kept on disk: the head and the tail"`
	DroppedBytes  *int64     `json:"dropped_bytes" jsonschema:"bytes discarded between head and tail"`
	Truncated     *bool      `json:"truncated" jsonschema:"true when bytes were discarded"`
	Complete      bool       `json:"complete" jsonschema:"true when the capture reached the stream's end and was sealed"`
	LastOutputAt  *time.Time `json:"last_output_at" jsonschema:"when the job last wrote to the stream"`
}

// Capture is the capture metadata of both streams.
type Capture struct {
	Stdout StreamCapture `json:"stdout"`
	Stderr StreamCapture `json:"stderr"`
}

// Result is the supervisor's terminal record, published after the capture
// is sealed.
type Result struct {
	Schema        int       `json:"schema"`
	ExitCode      *int      `json:"exit_code"`
	Signal        string    `json:"signal,omitempty"`
	CompletedAt   time.Time `json:"completed_at"`
	StopRequested bool      `json:"stop_requested,omitempty"`
	// StoppedByManager says the job was ended by a stop nobody asked
	// CommandCore for: its service manager stopping the unit (a shutdown,
	// the user manager exiting, someone's systemctl stop).
	StoppedByManager bool `json:"stopped_by_manager,omitempty"`
	// TimedOut says the supervisor stopped the job when its time limit
	// was reached.
	TimedOut bool `json:"timed_out,omitempty"`
	// StartError is a stable word when the shell could not be started.
	StartError string  `json:"start_error,omitempty"`
	Capture    Capture `json:"capture"`
}

// StopRequest records that a stop was asked for.
type StopRequest struct {
	Schema      int       `json:"schema"`
	RequestedAt time.Time `json:"requested_at"`
}

// ReadMark records that the final output page was read.
type ReadMark struct {
	Schema int       `json:"schema"`
	ReadAt time.Time `json:"read_at"`
}

// Reconciled records a terminal state concluded from evidence when the
// supervisor could not publish one.
type Reconciled struct {
	Schema       int       `json:"schema"`
	State        State     `json:"state"`
	ReconciledAt time.Time `json:"reconciled_at"`
	Evidence     string    `json:"evidence"`
}

// StreamCaptureOf converts a capture file's metadata into its record form.
func StreamCaptureOf(m capture.Meta) StreamCapture {
	sc := StreamCapture{
		ObservedBytes: &m.ObservedBytes,
		RetainedBytes: &m.RetainedBytes,
		DroppedBytes:  &m.DroppedBytes,
		Truncated:     &m.Truncated,
		Complete:      m.Complete,
	}
	if !m.LastOutputAt.IsZero() {
		t := m.LastOutputAt.UTC()
		sc.LastOutputAt = &t
	}
	return sc
}

// Screen is a pty job's terminal screen as an emulator renders it from the
// job's output: its content, so it is kept like output, owner-only.
type Screen struct {
	Schema int `json:"schema"`
	// Lines are the visible rows, top first, each without trailing blanks.
	Lines []string `json:"lines"`
	Cols  int      `json:"cols"`
	Rows  int      `json:"rows"`
	// Cursor is 0-based; Col may equal Cols (a full row just written).
	Cursor          Cursor `json:"cursor"`
	AlternateScreen bool   `json:"alternate_screen"`
	Title           string `json:"title,omitempty"`
	// Offset is how much of stdout the screen shows the effect of.
	Offset int64 `json:"offset"`
	// Truncated says that lines past limits.ScreenTextMaxBytes of text
	// were left empty.
	Truncated bool `json:"truncated,omitempty"`
}

// Cursor is a position on a screen.
type Cursor struct {
	Row int `json:"row"`
	Col int `json:"col"`
}
