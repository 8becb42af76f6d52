// Package status is the types of the agent's runtime record and of the
// `commandcore status` report: the agent writes the record, statusreport
// verifies it and builds the report, and they share these types.
package status

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/ownerfile"
	"github.com/commandcore/commandcore/internal/strictjson"
)

// SchemaVersion is the version of the --json report. Its fields only grow.
const SchemaVersion = 1

// RuntimeSchema is the version of the runtime record.
const RuntimeSchema = 1

// RuntimeFile is the agent's runtime record in its state directory.
const RuntimeFile = "agent.json"

// Connection states.
const (
	ConnUnknown      = "unknown" // no agent runs to observe it
	ConnNotEnrolled  = "not_enrolled"
	ConnConnecting   = "connecting"
	ConnConnected    = "connected"
	ConnDisconnected = "disconnected"
)

// Runtime is what a running agent records about itself.
type Runtime struct {
	Schema     int       `json:"schema"`
	PID        int       `json:"pid"`
	StartTicks uint64    `json:"start_ticks"`
	BootID     string    `json:"boot_id"`
	Version    string    `json:"version"`
	StartedAt  time.Time `json:"started_at"`
	// Service is the systemd unit the agent runs as (from its own cgroup);
	// empty when it is not a service (`make run`, a shell).
	Service    string     `json:"service"`
	Connection Connection `json:"connection"`
	// AgentDirsHidden says that this agent's job units get its config and
	// state directories made inaccessible (its start-up probe succeeded).
	AgentDirsHidden bool `json:"agent_dirs_hidden"`
	// RunDirsHidden says that this agent's process.run commands (and the
	// jobs of its no-systemd fallback) get them hidden too, in a mount
	// namespace of their own (its start-up probe of the hide-exec role
	// succeeded).
	RunDirsHidden bool `json:"run_dirs_hidden"`
	// Systemd is the agent's own last view of its user manager; nil in the
	// record of an agent too old to write it.
	Systemd *RuntimeSystemd `json:"systemd,omitempty"`
	// StoppedAt is set by an agent that stopped cleanly, as its last write.
	StoppedAt *time.Time `json:"stopped_at,omitempty"`
	// Exe is the binary the agent runs (and an update replaces).
	Exe string `json:"exe,omitempty"`
	// Offer is the update the agent's relay offers on the current link;
	// nil when it offers none (the agent is current, or updates are off).
	Offer *RuntimeOffer `json:"update_offer,omitempty"`
	// AgentBinary is what the agent found of its binary's directory; nil
	// in the record of an agent too old to write it.
	AgentBinary *AgentBinary `json:"agent_binary,omitempty"`
}

// AgentBinary is the directory of the agent's binary as the agent's jobs
// meet it. The user manager runs that binary at the agent's next start,
// so a job that put another file in its place would run as the agent.
type AgentBinary struct {
	// Dir is the directory, symbolic links resolved; empty when the agent
	// could not find it.
	Dir string `json:"dir"`
	// Writable: the agent's user may write it (or the binary), so a job
	// could replace the binary unless it sees the directory read-only.
	Writable bool `json:"writable"`
	// Shared: a directory jobs need to write (the home directory or one
	// above it, a sticky one such as /tmp, a system directory of commands
	// such as /usr/bin), left writable.
	Shared bool `json:"shared"`
	// ReadOnlyInJobUnits and ReadOnlyInRun: job units, and process.run
	// commands and the jobs of the no-systemd fallback, see it read-only
	// (the agent's start-up probes succeeded); false where it is not to be
	// (not Writable, or Shared). A job cut off from the user manager sees
	// it read-only wherever it runs at all (CanCutJobs, CanCutRun).
	ReadOnlyInJobUnits bool `json:"read_only_in_job_units"`
	ReadOnlyInRun      bool `json:"read_only_in_run"`
}

// RuntimeOffer is an update a relay offered: the version, its binary's
// SHA-256 and its name under the relay's /download/.
type RuntimeOffer struct {
	Version    string    `json:"version"`
	SHA256     string    `json:"sha256"`
	Name       string    `json:"name"`
	ReceivedAt time.Time `json:"received_at"`
}

// RuntimeSystemd is what the agent last saw of its user manager.
type RuntimeSystemd struct {
	// UserManager is ManagerReachable or ManagerUnreachable.
	UserManager string `json:"user_manager"`
	// FailureDomain is the domain the agent's next job gets, or
	// DomainRefused.
	FailureDomain string `json:"failure_domain"`
	// CanCutJobs and CanCutRun: the agent's next job, in FailureDomain,
	// and its next process.run command could start cut off from the user
	// manager; where not, a cut refuses them.
	CanCutJobs bool      `json:"can_cut_jobs"`
	CanCutRun  bool      `json:"can_cut_run"`
	ObservedAt time.Time `json:"observed_at"`
}

// Connection is the agent's last local observation of its link.
type Connection struct {
	State string `json:"state"`
	// Server is the server's URL without credentials; empty when not enrolled.
	Server     string    `json:"server"`
	ObservedAt time.Time `json:"observed_at"`
	// Since is when the link entered State.
	Since time.Time `json:"since"`
}

// ErrBadRuntime reports a runtime record that cannot be trusted.
var ErrBadRuntime = errors.New("unreadable runtime record")

// maxRuntimeBytes bounds the runtime record read from disk.
const maxRuntimeBytes = 64 << 10

// DecodeRuntime parses a runtime record strictly enough that status never
// trusts a torn, foreign or nonsensical file.
func DecodeRuntime(data []byte) (*Runtime, error) {
	var rt Runtime
	// Unknown fields are tolerated: a newer agent may add some.
	if err := strictjson.Decode(data, &rt, maxRuntimeBytes, strictjson.AllowUnknownFields); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRuntime, err)
	}
	if rt.Schema != RuntimeSchema || rt.PID <= 0 || rt.StartTicks == 0 || rt.BootID == "" {
		return nil, fmt.Errorf("%w: incomplete", ErrBadRuntime)
	}
	return &rt, nil
}

// ReadRuntime reads and decodes the runtime record in stateDir.
func ReadRuntime(stateDir string) (*Runtime, error) {
	data, err := ownerfile.Read(filepath.Join(stateDir, RuntimeFile), limits.MaxMetadataBytes, ownerfile.SharedWrite)
	if err != nil {
		return nil, err
	}
	return DecodeRuntime(data)
}

// Report is `commandcore status --json`.
type Report struct {
	SchemaVersion int            `json:"schema_version"`
	Agent         Agent          `json:"agent"`
	Connection    ConnectionView `json:"connection"`
	Jobs          Jobs           `json:"jobs"`
	Systemd       Systemd        `json:"systemd"`
	Policy        Policy         `json:"policy"`
	Permissions   Permissions    `json:"permissions"`
	// Update is what status knows of agent updates: the one on offer and
	// the last one made; absent when there is neither.
	Update *Update `json:"update,omitempty"`
	// StateDir and ConfigDir are the directories this report read.
	StateDir  string `json:"state_dir"`
	ConfigDir string `json:"config_dir"`
}

// Update is the update on offer and the last update.
type Update struct {
	// Offered is the version the relay offers; empty when none.
	Offered string `json:"offered,omitempty"`
	// Last is the last update made on this device.
	Last *LastUpdate `json:"last,omitempty"`
}

// LastUpdate is an update made: between which versions, and how it ended
// (started, done, rolled_back, rollback_failed).
type LastUpdate struct {
	From      string     `json:"from"`
	To        string     `json:"to"`
	State     string     `json:"state"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
}

// Agent describes the agent process.
type Agent struct {
	Running   bool       `json:"running"`
	PID       int        `json:"pid,omitempty"`
	Version   string     `json:"version,omitempty"`
	StartedAt *time.Time `json:"started_at,omitempty"`
	// Service is the unit a running agent runs as (empty when it is not a
	// service); when none runs, the unit status looked for.
	Service string `json:"service"`
	// UID is the user the running agent, and every command it runs, runs
	// as.
	UID *int `json:"uid,omitempty"`
	// Stale is set when a runtime record exists but its process is gone
	// (or the PID now belongs to another process) without having stopped.
	Stale bool `json:"stale,omitempty"`
	// Installed: the user has a unit file for Service (UnitFile), written
	// by `commandcore install` or linked by `systemctl --user enable`.
	Installed bool   `json:"installed"`
	UnitFile  string `json:"unit_file,omitempty"`
}

// ConnectionView is the connection as last observed by the agent, with the
// observation's age: it is not a claim about the server now.
type ConnectionView struct {
	State      string     `json:"state"`
	Server     string     `json:"server,omitempty"`
	ObservedAt *time.Time `json:"observed_at,omitempty"`
	Since      *time.Time `json:"since,omitempty"`
	AgeSeconds *int64     `json:"age_seconds,omitempty"`
}

// Jobs counts the managed jobs.
type Jobs struct {
	Running  int `json:"running"`
	Terminal int `json:"terminal"`
	Unread   int `json:"unread"`
	// Spares counts the supervisors started ahead for the next job, each
	// in a job unit of its own, that hold no job yet.
	Spares int `json:"spares"`
}

// Systemd describes the user manager as the running agent last saw it
// (its runtime record), not as the CLI's own environment would: unknown
// when no agent runs.
type Systemd struct {
	UserManager   string `json:"user_manager"`
	FailureDomain string `json:"failure_domain"`
	// AgentDirsHidden: the running agent's job units have its config and
	// state directories covered; false when no agent runs.
	AgentDirsHidden bool `json:"agent_dirs_hidden"`
	// RunDirsHidden: the running agent's process.run commands, and the
	// jobs of its no-systemd fallback, have them covered too; false when
	// no agent runs, or where the host refuses user namespaces.
	RunDirsHidden bool `json:"run_dirs_hidden"`
	// Both hold against a command's direct reads: one that can reach the
	// user manager can start a unit of its own, which nothing covers.
	//
	// JobsReachUserManager: new jobs and process.run commands can reach
	// the user manager (start units of their own, outside any cover), as
	// the owner's permissions.json says; false only when a valid one says
	// "jobs_reach_user_manager": false, whether or not an agent runs.
	JobsReachUserManager bool `json:"jobs_reach_user_manager"`
	// CanCutJobs and CanCutRun: the running agent's next job and next
	// process.run command could start cut off from the user manager (its
	// sockets covered, its unit files and configuration and the directory
	// of the agent's binary read-only); where not, a cut refuses them.
	// False when no agent runs.
	CanCutJobs bool       `json:"can_cut_jobs"`
	CanCutRun  bool       `json:"can_cut_run"`
	ObservedAt *time.Time `json:"observed_at,omitempty"`
	// AgentBinary is the directory of the running agent's binary as its
	// jobs meet it; absent when no agent runs, or one too old to say.
	AgentBinary *AgentBinary `json:"agent_binary,omitempty"`
}

// Policy is the owner's resource policy or why it is refused. Nice is the
// niceness new jobs get, NiceDefault true when the policy names none.
type Policy struct {
	MemoryMaxBytes *uint64 `json:"memory_max_bytes,omitempty"`
	Nice           *int    `json:"nice,omitempty"`
	NiceDefault    bool    `json:"nice_default,omitempty"`
	CPUWeight      *uint64 `json:"cpu_weight,omitempty"`
	Error          string  `json:"error,omitempty"`
}

// Permissions is the owner's permission ceiling (README) as status reads
// it: absent (every tool), the tools it allows, or why it refuses all.
type Permissions struct {
	Present bool     `json:"present"`
	Tools   []string `json:"tools,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// User manager states.
const (
	ManagerReachable   = "reachable"
	ManagerUnreachable = "unreachable"
	// ManagerUnknown: no running agent observed it.
	ManagerUnknown = "unknown"
)

// Failure domains status reports besides the job ones (jobmeta).
const (
	// DomainRefused: an installed agent without its user manager runs no
	// new job (systemd_unavailable).
	DomainRefused = "none"
	// DomainUnknown: no running agent observed it.
	DomainUnknown = "unknown"
)
