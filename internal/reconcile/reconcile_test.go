package reconcile

import (
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/procid"
)

func claim(inv string) *jobmeta.Claim {
	return &jobmeta.Claim{Schema: 1, BootID: "boot-a", InvocationID: inv}
}

func TestPriority(t *testing.T) {
	yes, no := true, false
	code := 0
	seven := 7
	ran := claim("i")
	ran.Child = &procid.Identity{PID: 42, StartTicks: 4242}
	cases := []struct {
		name     string
		e        Evidence
		want     jobmeta.State
		evidence string
	}{
		{"result wins over everything", Evidence{Result: &jobmeta.Result{ExitCode: &code, CompletedAt: time.Now()}, Claim: claim("i"), BootID: "boot-b"}, jobmeta.Exited, ByResult},
		{"timed out result", Evidence{Result: &jobmeta.Result{TimedOut: true, Signal: "SIGTERM"}, Claim: claim("i"), BootID: "boot-b"}, jobmeta.TimedOut, ByResult},
		{"stopped result", Evidence{Result: &jobmeta.Result{StopRequested: true}}, jobmeta.StoppedByRequest, ByResult},
		{"start error", Evidence{Result: &jobmeta.Result{StartError: "shell_start_failed"}}, jobmeta.LaunchFailed, ByStartError},
		{"manager's stop, then a reboot", Evidence{Result: &jobmeta.Result{StoppedByManager: true, Signal: "SIGTERM"}, Claim: claim("i"), BootID: "boot-b"}, jobmeta.HostRebooted, ByBootID},
		{"manager's stop, manager gone", Evidence{Result: &jobmeta.Result{StoppedByManager: true}, Claim: claim("i"), BootID: "boot-a", ManagerAlive: &no}, jobmeta.UserManagerLost, ByManagerGone},
		{"manager's stop, manager alive", Evidence{Result: &jobmeta.Result{StoppedByManager: true}, Claim: claim("i"), BootID: "boot-a", ManagerAlive: &yes}, jobmeta.Exited, ByResult},
		{"a requested stop is never a reboot", Evidence{Result: &jobmeta.Result{StopRequested: true}, Claim: claim("i"), BootID: "boot-b"}, jobmeta.StoppedByRequest, ByResult},
		{"a normal exit is never a reboot", Evidence{Result: &jobmeta.Result{ExitCode: &code}, Claim: claim("i"), BootID: "boot-b", ManagerAlive: &no}, jobmeta.Exited, ByResult},
		{"live supervisor", Evidence{Claim: claim("i"), SupervisorAlive: true, BootID: "boot-a", ManagerAlive: &no}, jobmeta.Running, BySupervisor},
		{"live supervisor stopping", Evidence{Claim: claim("i"), SupervisorAlive: true, StopRequested: true, BootID: "boot-a"}, jobmeta.Stopping, BySupervisor},
		{"live supervisor past the time limit", Evidence{Claim: claim("i"), SupervisorAlive: true, TimeLimited: true, TimeLimitPassed: true, BootID: "boot-a"}, jobmeta.Stopping, BySupervisor},
		{"live supervisor within the time limit", Evidence{Claim: claim("i"), SupervisorAlive: true, TimeLimited: true, BootID: "boot-a"}, jobmeta.Running, BySupervisor},
		{"unit settling past the time limit", Evidence{Claim: claim("i"), BootID: "boot-a", TimeLimited: true, TimeLimitPassed: true, Unit: &UnitEvidence{InvocationID: "i", Settling: true}}, jobmeta.Stopping, ByUnitSettling},
		{"reboot", Evidence{Claim: claim("i"), SupervisorAlive: true, BootID: "boot-b"}, jobmeta.HostRebooted, ByBootID},
		{"oom for the same invocation", Evidence{Claim: claim("i"), BootID: "boot-a", Unit: &UnitEvidence{InvocationID: "i", Result: "oom-kill"}, ManagerAlive: &no}, jobmeta.WorkloadOOM, ByUnitOOM},
		{"oom of another invocation is not trusted", Evidence{Claim: claim("i"), BootID: "boot-a", Unit: &UnitEvidence{InvocationID: "j", Result: "oom-kill"}}, jobmeta.WorkerLost, ByNoSupervisor},
		{"backstop timeout for the same invocation", Evidence{Claim: claim("i"), BootID: "boot-a", TimeLimited: true, Unit: &UnitEvidence{InvocationID: "i", Result: "timeout"}, ManagerAlive: &yes}, jobmeta.TimedOut, ByUnitTimeout},
		{"backstop timeout of another invocation is not trusted", Evidence{Claim: claim("i"), BootID: "boot-a", TimeLimited: true, Unit: &UnitEvidence{InvocationID: "j", Result: "timeout"}}, jobmeta.WorkerLost, ByNoSupervisor},
		{"timeout without a time limit is a stop that hung", Evidence{Claim: claim("i"), BootID: "boot-a", Unit: &UnitEvidence{InvocationID: "i", Result: "timeout"}}, jobmeta.WorkerLost, ByUnitFailure},
		{"signal is not oom", Evidence{Claim: claim("i"), BootID: "boot-a", Unit: &UnitEvidence{InvocationID: "i", Result: "signal"}}, jobmeta.WorkerLost, ByUnitFailure},
		{"unit still settling", Evidence{Claim: claim("i"), BootID: "boot-a", Unit: &UnitEvidence{InvocationID: "i", Settling: true}, ManagerAlive: &no}, jobmeta.Running, ByUnitSettling},
		{"unit settling after a stop", Evidence{Claim: claim("i"), BootID: "boot-a", StopRequested: true, Unit: &UnitEvidence{InvocationID: "i", Settling: true}}, jobmeta.Stopping, ByUnitSettling},
		{"settling unit from before a reboot", Evidence{Claim: claim("i"), BootID: "boot-b", Unit: &UnitEvidence{InvocationID: "i", Settling: true}}, jobmeta.HostRebooted, ByBootID},
		{"manager gone", Evidence{Claim: claim("i"), BootID: "boot-a", ManagerAlive: &no}, jobmeta.UserManagerLost, ByManagerGone},
		{"manager alive, supervisor gone", Evidence{Claim: claim("i"), BootID: "boot-a", ManagerAlive: &yes}, jobmeta.WorkerLost, ByNoSupervisor},
		{"no manager recorded", Evidence{Claim: claim(""), BootID: "boot-a"}, jobmeta.WorkerLost, ByNoSupervisor},
		{"unit failure while the manager is gone", Evidence{Claim: claim("i"), BootID: "boot-a", Unit: &UnitEvidence{InvocationID: "i", Result: "exit-code"}, ManagerAlive: &no}, jobmeta.WorkerLost, ByUnitFailure},
		{"a unit that succeeded is no failure", Evidence{Claim: claim("i"), BootID: "boot-a", Unit: &UnitEvidence{InvocationID: "i", Result: "success"}, ManagerAlive: &yes}, jobmeta.WorkerLost, ByNoSupervisor},
		{"a unit that succeeded, manager gone", Evidence{Claim: claim("i"), BootID: "boot-a", Unit: &UnitEvidence{InvocationID: "i", Result: "success"}, ManagerAlive: &no}, jobmeta.UserManagerLost, ByManagerGone},
		{"a unit without a result is no failure", Evidence{Claim: claim("i"), BootID: "boot-a", Unit: &UnitEvidence{InvocationID: "i"}}, jobmeta.WorkerLost, ByNoSupervisor},
		{"empty invocation IDs never match", Evidence{Claim: claim(""), BootID: "boot-a", Unit: &UnitEvidence{Result: "oom-kill"}}, jobmeta.WorkerLost, ByNoSupervisor},
		{"manager's stop, current boot unknown", Evidence{Result: &jobmeta.Result{StoppedByManager: true}, Claim: claim("i"), ManagerAlive: &yes}, jobmeta.Exited, ByResult},
		{"live supervisor, current boot unknown", Evidence{Claim: claim("i"), SupervisorAlive: true}, jobmeta.Running, BySupervisor},
		{"supervisor gone, current boot unknown", Evidence{Claim: claim("i")}, jobmeta.WorkerLost, ByNoSupervisor},
		{"oom, current boot unknown", Evidence{Claim: claim("i"), Unit: &UnitEvidence{InvocationID: "i", Result: "oom-kill"}}, jobmeta.WorkloadOOM, ByUnitOOM},
		{"manager's stop, no identity", Evidence{Result: &jobmeta.Result{StoppedByManager: true}, BootID: "boot-b", ManagerAlive: &yes}, jobmeta.Exited, ByResult},
		{"an abandoned launch that never claimed", Evidence{LaunchAbandoned: true, BootID: "boot-a"}, jobmeta.LaunchFailed, ByAbandoned},
		{"an abandoned launch whose shell never ran", Evidence{LaunchAbandoned: true, Claim: claim("i"), SupervisorAlive: true, BootID: "boot-a"}, jobmeta.LaunchFailed, ByAbandoned},
		{"an abandoned launch that ran to its end", Evidence{LaunchAbandoned: true, Result: &jobmeta.Result{ExitCode: &seven}, Claim: ran, BootID: "boot-a"}, jobmeta.Exited, ByResult},
		{"an abandoned launch whose shell could not start", Evidence{LaunchAbandoned: true, Result: &jobmeta.Result{StartError: "shell_start_failed"}, Claim: claim("i")}, jobmeta.LaunchFailed, ByStartError},
		{"an abandoned launch whose shell runs", Evidence{LaunchAbandoned: true, Claim: ran, SupervisorAlive: true, BootID: "boot-a"}, jobmeta.Running, BySupervisor},
		{"an abandoned launch whose supervisor was lost", Evidence{LaunchAbandoned: true, Claim: ran, BootID: "boot-a", ManagerAlive: &yes}, jobmeta.WorkerLost, ByNoSupervisor},
		{"manager's stop, no manager recorded", Evidence{Result: &jobmeta.Result{StoppedByManager: true}, Claim: claim("i"), BootID: "boot-a"}, jobmeta.Exited, ByResult},
	}
	for _, c := range cases {
		if got := Classify(c.e); got != (Verdict{c.want, c.evidence}) {
			t.Errorf("%s: got %s by %s, want %s by %s", c.name, got.State, got.Evidence, c.want, c.evidence)
		}
	}
}

// TestEvidenceWords pins the evidence names persisted in reconciled.json:
// records written by one version are read by the next.
func TestEvidenceWords(t *testing.T) {
	for got, want := range map[string]string{
		ByResult: "terminal_record", ByStartError: "start_error", ByAbandoned: "launch_abandoned", BySupervisor: "live_supervisor",
		ByBootID: "boot_id_changed", ByUnitSettling: "unit_settling", ByUnitOOM: "unit_result_oom_kill", ByUnitTimeout: "unit_result_timeout",
		ByUnitFailure: "unit_result_failure", ByManagerGone: "user_manager_gone", ByNoSupervisor: "supervisor_gone",
	} {
		if got != want {
			t.Errorf("evidence %q, want %q", got, want)
		}
	}
}
