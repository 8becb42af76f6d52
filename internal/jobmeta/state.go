// Package jobmeta is the managed-job records: the files a job directory
// holds, the record the tools and the CLI show, and the versioned, strict
// way they are read. It imports only small packages (none of the job core,
// the network or MCP), so every role can use it.
package jobmeta

// State is a job's state (docs/states.md).
type State string

// Live states.
const (
	Starting State = "starting"
	Running  State = "running"
	Stopping State = "stopping"
)

// Terminal states.
const (
	Exited           State = "exited"
	StoppedByRequest State = "stopped_by_request"
	TimedOut         State = "timed_out"
	WorkloadOOM      State = "workload_oom"
	WorkerLost       State = "worker_lost"
	HostRebooted     State = "host_rebooted"
	UserManagerLost  State = "user_manager_lost"
	LaunchFailed     State = "launch_failed"
)

// Corrupt marks a job whose metadata cannot be read; it is neither live nor
// terminal and is never deleted automatically.
const Corrupt State = "corrupt"

// Terminal reports whether s is a terminal state.
func (s State) Terminal() bool {
	switch s {
	case Exited, StoppedByRequest, TimedOut, WorkloadOOM, WorkerLost, HostRebooted, UserManagerLost, LaunchFailed:
		return true
	}
	return false
}

// Live reports whether s is a live state.
func (s State) Live() bool {
	return s == Starting || s == Running || s == Stopping
}

// UnitPrefix starts every job's transient unit name:
// commandcore-job-<device-uuid>-<job-uuid>.service.
const UnitPrefix = "commandcore-job-"

// Failure domains (docs/states.md).
const (
	DomainSystemdUnit        = "systemd_unit"
	DomainSharedParentCgroup = "shared_parent_cgroup"
)
