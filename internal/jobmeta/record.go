package jobmeta

import (
	"time"

	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/terminal"
)

// Record is one job as the tools and the CLI show it.
type Record struct {
	ProcessID     string     `json:"process_id" jsonschema:"the job's ID"`
	Name          string     `json:"name,omitempty" jsonschema:"the label given at start"`
	Owner         string     `json:"owner,omitempty" jsonschema:"the principal whose job it is"`
	State         State      `json:"state" jsonschema:"the job's state (docs/states.md)"`
	Terminal      bool       `json:"terminal" jsonschema:"true once the job has ended"`
	Unit          string     `json:"unit,omitempty" jsonschema:"the job's transient systemd unit, when it has one"`
	FailureDomain string     `json:"failure_domain,omitempty" jsonschema:"systemd_unit, or shared_parent_cgroup without a user manager"`
	CreatedAt     time.Time  `json:"created_at" jsonschema:"when the job was admitted"`
	StartedAt     *time.Time `json:"started_at" jsonschema:"when the shell started"`
	CompletedAt   *time.Time `json:"completed_at" jsonschema:"when the job ended"`
	ReconciledAt  *time.Time `json:"reconciled_at" jsonschema:"when the agent classified an end the supervisor could not record"`
	StopRequestAt *time.Time `json:"stop_requested_at,omitempty" jsonschema:"when a stop was requested"`
	ExitCode      *int       `json:"exit_code" jsonschema:"the shell's exit code, when it exited"`
	Signal        string     `json:"signal,omitempty" jsonschema:"the signal that ended the shell"`
	// TimeoutS is the job's time limit in seconds, omitted when it has none.
	TimeoutS int `json:"timeout_s,omitempty" jsonschema:"the time limit in seconds"`
	// Stdin is set for a job that takes input on a pipe (process.input);
	// PTY is the terminal size a pty job was started with.
	Stdin bool           `json:"stdin,omitempty" jsonschema:"true: the job's stdin is a pipe fed by process.input"`
	PTY   *terminal.Size `json:"pty,omitempty" jsonschema:"the terminal size a pty job was started with"`
	// StoppedBy names who stopped the job: "request" (process.stop),
	// "timeout" (its time limit) or "service_manager" (its unit stopped by
	// systemd, unasked).
	StoppedBy string `json:"stopped_by,omitempty" jsonschema:"request, timeout or service_manager, for a stopped job"`
	Error     string `json:"error,omitempty" jsonschema:"a stable word for why the job failed to launch or start"`
	Read      bool   `json:"read" jsonschema:"true once the final page of a terminal job was read"`
	// Warnings name conditions a live job runs under, e.g.
	// WarnUserManagerGone: its supervisor lives on without a manager.
	Warnings []string `json:"warnings,omitempty" jsonschema:"conditions a live job runs under, e.g. user_manager_gone"`
	// Survivors are processes of a terminal fallback job's process group
	// that still run, with verified identities; the owner reconciles them
	// with `commandcore jobs reconcile`.
	Survivors []procid.Identity `json:"survivors,omitempty" jsonschema:"processes of a terminal fallback job's group that still run"`
	Capture   *Capture          `json:"capture,omitempty" jsonschema:"each stream's capture counters"`
	Claim     *ClaimView        `json:"identity,omitempty" jsonschema:"the supervisor's recorded identity"`
	// Schema is the metadata schema the job was written with.
	Schema int `json:"schema" jsonschema:"the metadata schema the job was written with"`
	// Idempotency is the start's key digests, for finding the job again;
	// no result shows it.
	Idempotency *Idempotency `json:"-"`
}

// WarnUserManagerGone says that the user manager recorded at launch is gone
// while the job's supervisor still runs: the job continues, but nothing
// will clean up its unit if the supervisor dies.
const WarnUserManagerGone = "user_manager_gone"

// ClaimView is the supervisor's claim as a record shows it (in the
// record's "identity" field).
type ClaimView struct {
	Supervisor   procid.Identity  `json:"supervisor"`
	Child        *procid.Identity `json:"child,omitempty"`
	BootID       string           `json:"boot_id"`
	InvocationID string           `json:"invocation_id,omitempty"`
	Manager      *procid.Identity `json:"manager,omitempty"`
}

// Summary is the short form process.jobs lists.
type Summary struct {
	ProcessID   string     `json:"process_id"`
	Name        string     `json:"name,omitempty"`
	Owner       string     `json:"owner,omitempty"`
	State       State      `json:"state"`
	Terminal    bool       `json:"terminal"`
	CreatedAt   time.Time  `json:"created_at"`
	CompletedAt *time.Time `json:"completed_at"`
	ExitCode    *int       `json:"exit_code"`
	Read        bool       `json:"read"`
}

// Summary returns the short form of r.
func (r *Record) Summary() Summary {
	return Summary{
		ProcessID: r.ProcessID, Name: r.Name, Owner: r.Owner, State: r.State, Terminal: r.Terminal,
		CreatedAt: r.CreatedAt, CompletedAt: r.CompletedAt, ExitCode: r.ExitCode, Read: r.Read,
	}
}
