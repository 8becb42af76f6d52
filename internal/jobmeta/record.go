package jobmeta

import (
	"strconv"
	"time"

	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/terminal"
)

// Record is one job as the tools and the CLI show it.
type Record struct {
	ProcessID     string     `json:"process_id"`
	Name          string     `json:"name,omitempty"`
	Owner         string     `json:"owner,omitempty"`
	State         State      `json:"state"`
	Terminal      bool       `json:"terminal"`
	Unit          string     `json:"unit,omitempty"`
	FailureDomain string     `json:"failure_domain,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	StartedAt     *time.Time `json:"started_at"`
	CompletedAt   *time.Time `json:"completed_at"`
	ReconciledAt  *time.Time `json:"reconciled_at"`
	StopRequestAt *time.Time `json:"stop_requested_at,omitempty"`
	ExitCode      *int       `json:"exit_code"`
	Signal        string     `json:"signal,omitempty"`
	// TimeoutS is the job's time limit in seconds, omitted when it has none.
	TimeoutS int `json:"timeout_s,omitempty"`
	// Stdin is set for a job that takes input on a pipe (process.input);
	// PTY is the terminal size a pty job was started with.
	Stdin bool           `json:"stdin,omitempty"`
	PTY   *terminal.Size `json:"pty,omitempty"`
	// StoppedBy names who stopped the job: "request" (process.stop),
	// "timeout" (its time limit) or "service_manager" (its unit stopped by
	// systemd, unasked).
	StoppedBy string `json:"stopped_by,omitempty"`
	Error     string `json:"error,omitempty"`
	Read      bool   `json:"read"`
	// Warnings name conditions a live job runs under, e.g.
	// WarnUserManagerGone: its supervisor lives on without a manager.
	Warnings []string `json:"warnings,omitempty"`
	// Survivors are processes of a terminal fallback job's process group
	// that still run, with verified identities; the owner reconciles them
	// with `commandcore jobs reconcile`.
	Survivors []procid.Identity `json:"survivors,omitempty"`
	Capture   *Capture          `json:"capture,omitempty"`
	Claim     *ClaimView        `json:"identity,omitempty"`
	// Schema is the metadata schema the job was written with.
	Schema int `json:"schema"`
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

// Text is a record's text content for a model: how the job stands, in a
// line; the structured record carries the rest.
func (r *Record) Text() string {
	s := "job " + r.ProcessID + " " + string(r.State)
	switch {
	case r.ExitCode != nil:
		s += " " + strconv.Itoa(*r.ExitCode)
	case r.Signal != "":
		s += " by " + r.Signal
	}
	if r.StoppedBy != "" {
		s += ", stopped by " + r.StoppedBy
	}
	if r.Error != "" {
		s += " (" + r.Error + ")"
	}
	return s + "\n"
}
