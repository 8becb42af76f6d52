// Package reconcile decides what became of a managed job from the evidence
// left behind. The evidence counts in a fixed priority:
//
//  1. the supervisor's terminal record (exited, stopped_by_request,
//     timed_out, or launch_failed when the shell never started). A job its service
//     manager stopped unasked is host_rebooted when the boot ID has since
//     changed and user_manager_lost when that manager is gone. It wins over
//     the launcher's own view: a launch abandoned on a missed READY or a
//     lost start-job reply whose supervisor ran the shell all the same ends
//     as the supervisor recorded;
//  2. an abandoned launch whose shell never ran (launch_failed); one whose
//     shell ran is judged by the rules below like any other job;
//  3. a live supervisor whose PID, start ticks and boot ID match (running,
//     or stopping once a stop was requested);
//  4. the unit's retained Result for the recorded InvocationID
//     (oom-kill → workload_oom; timeout of a time-limited job →
//     timed_out, its RuntimeMaxSec backstop; any other failure →
//     worker_lost);
//  5. a changed boot ID (host_rebooted); a current boot ID that could not
//     be read never counts as changed;
//  6. the recorded user manager gone (user_manager_lost);
//  7. otherwise worker_lost.
//
// It is pure: callers gather the evidence, so every rule is testable
// without the failure it describes.
package reconcile

import (
	"github.com/commandcore/commandcore/internal/jobmeta"
)

// UnitEvidence is what systemd retained about a failed job unit.
type UnitEvidence struct {
	InvocationID string
	Result       string
	// Settling reports a unit still winding down (its main process gone,
	// the rest of its cgroup not yet): its Result is not final.
	Settling bool
}

// Evidence is everything known about a job that lacks a terminal record.
type Evidence struct {
	Result *jobmeta.Result
	Claim  *jobmeta.Claim
	// LaunchAbandoned reports a launch its launcher gave up on (it found no
	// identity claim in time) and rolled back.
	LaunchAbandoned bool
	// StopRequested reports a stop request on file.
	StopRequested bool
	// SupervisorAlive reports that the recorded supervisor PID is alive
	// with the recorded start ticks.
	SupervisorAlive bool
	// BootID is the current boot ID, empty when it could not be read: an
	// unknown boot is no evidence of a reboot.
	BootID string
	// ManagerAlive reports whether the recorded user manager is alive with
	// its recorded start ticks; nil when no manager was recorded.
	ManagerAlive *bool
	// Unit is the unit's retained failure, or nil when there is none.
	Unit *UnitEvidence
	// TimeLimited reports a job started with a time limit: only its unit
	// has a RuntimeMaxSec, so only its Result "timeout" means the limit
	// (systemd reports a stop that took too long the same way).
	TimeLimited bool
	// TimeLimitPassed reports a time-limited job past its limit: its
	// supervisor is stopping it.
	TimeLimitPassed bool
}

// Verdict is the classification and the evidence that decided it.
type Verdict struct {
	State    jobmeta.State
	Evidence string
}

// Evidence names for Verdict.Evidence: stable words, no content.
const (
	ByResult       = "terminal_record"
	ByStartError   = "start_error"
	ByAbandoned    = "launch_abandoned"
	BySupervisor   = "live_supervisor"
	ByBootID       = "boot_id_changed"
	ByUnitSettling = "unit_settling"
	ByUnitOOM      = "unit_result_oom_kill"
	ByUnitTimeout  = "unit_result_timeout"
	ByUnitFailure  = "unit_result_failure"
	ByManagerGone  = "user_manager_gone"
	ByNoSupervisor = "supervisor_gone"
)

// Classify applies the priority to e. Claim must be set unless Result or
// LaunchAbandoned is; with a Result, BootID and ManagerAlive matter only for
// a manager's stop.
func Classify(e Evidence) Verdict {
	id := e.Claim
	if r := e.Result; r != nil {
		switch {
		case r.StartError != "":
			return Verdict{jobmeta.LaunchFailed, ByStartError}
		case r.StopRequested:
			return Verdict{jobmeta.StoppedByRequest, ByResult}
		case r.TimedOut:
			return Verdict{jobmeta.TimedOut, ByResult}
		case r.StoppedByManager && id != nil && e.BootID != "" && id.BootID != e.BootID:
			// systemd stopped the unit on the way down: the host rebooted.
			return Verdict{jobmeta.HostRebooted, ByBootID}
		case r.StoppedByManager && e.ManagerAlive != nil && !*e.ManagerAlive:
			// The user manager stopped it as it went away (a logout
			// without lingering, say).
			return Verdict{jobmeta.UserManagerLost, ByManagerGone}
		default:
			return Verdict{jobmeta.Exited, ByResult}
		}
	}
	if e.LaunchAbandoned && (id == nil || id.Child == nil) {
		return Verdict{jobmeta.LaunchFailed, ByAbandoned}
	}
	sameBoot := id != nil && (e.BootID == "" || id.BootID == e.BootID)
	if e.SupervisorAlive && sameBoot {
		if e.StopRequested || e.TimeLimitPassed {
			return Verdict{jobmeta.Stopping, BySupervisor}
		}
		return Verdict{jobmeta.Running, BySupervisor}
	}
	if u := e.Unit; u != nil && u.Settling && sameBoot {
		// Judge once systemd has: the job is still winding down.
		if e.StopRequested || e.TimeLimitPassed {
			return Verdict{jobmeta.Stopping, ByUnitSettling}
		}
		return Verdict{jobmeta.Running, ByUnitSettling}
	}
	if u := e.Unit; u != nil && id != nil && id.InvocationID != "" && u.InvocationID == id.InvocationID {
		if u.Result == "oom-kill" {
			return Verdict{jobmeta.WorkloadOOM, ByUnitOOM}
		}
		if u.Result == "timeout" && e.TimeLimited {
			return Verdict{jobmeta.TimedOut, ByUnitTimeout}
		}
		if u.Result != "" && u.Result != "success" {
			return Verdict{jobmeta.WorkerLost, ByUnitFailure}
		}
	}
	if id != nil && !sameBoot {
		return Verdict{jobmeta.HostRebooted, ByBootID}
	}
	if e.ManagerAlive != nil && !*e.ManagerAlive {
		return Verdict{jobmeta.UserManagerLost, ByManagerGone}
	}
	return Verdict{jobmeta.WorkerLost, ByNoSupervisor}
}
