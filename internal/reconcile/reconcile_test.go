package reconcile

import (
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/jobmeta"
)

func claim(inv string) *jobmeta.Claim {
	return &jobmeta.Claim{Schema: 1, BootID: "boot-a", InvocationID: inv}
}

func TestPriority(t *testing.T) {
	yes, no := true, false
	code := 0
	cases := []struct {
		name string
		e    Evidence
		want jobmeta.State
	}{
		{"result wins over everything", Evidence{Result: &jobmeta.Result{ExitCode: &code, CompletedAt: time.Now()}, Claim: claim("i"), BootID: "boot-b"}, jobmeta.Exited},
		{"stopped result", Evidence{Result: &jobmeta.Result{StopRequested: true}}, jobmeta.StoppedByRequest},
		{"start error", Evidence{Result: &jobmeta.Result{StartError: "shell_start_failed"}}, jobmeta.LaunchFailed},
		{"manager's stop, then a reboot", Evidence{Result: &jobmeta.Result{StoppedByManager: true, Signal: "SIGTERM"}, Claim: claim("i"), BootID: "boot-b"}, jobmeta.HostRebooted},
		{"manager's stop, manager gone", Evidence{Result: &jobmeta.Result{StoppedByManager: true}, Claim: claim("i"), BootID: "boot-a", ManagerAlive: &no}, jobmeta.UserManagerLost},
		{"manager's stop, manager alive", Evidence{Result: &jobmeta.Result{StoppedByManager: true}, Claim: claim("i"), BootID: "boot-a", ManagerAlive: &yes}, jobmeta.Exited},
		{"a requested stop is never a reboot", Evidence{Result: &jobmeta.Result{StopRequested: true}, Claim: claim("i"), BootID: "boot-b"}, jobmeta.StoppedByRequest},
		{"a normal exit is never a reboot", Evidence{Result: &jobmeta.Result{ExitCode: &code}, Claim: claim("i"), BootID: "boot-b", ManagerAlive: &no}, jobmeta.Exited},
		{"live supervisor", Evidence{Claim: claim("i"), SupervisorAlive: true, BootID: "boot-a", ManagerAlive: &no}, jobmeta.Running},
		{"live supervisor stopping", Evidence{Claim: claim("i"), SupervisorAlive: true, StopRequested: true, BootID: "boot-a"}, jobmeta.Stopping},
		{"reboot", Evidence{Claim: claim("i"), SupervisorAlive: true, BootID: "boot-b"}, jobmeta.HostRebooted},
		{"oom for the same invocation", Evidence{Claim: claim("i"), BootID: "boot-a", Unit: &UnitEvidence{InvocationID: "i", Result: "oom-kill"}, ManagerAlive: &no}, jobmeta.WorkloadOOM},
		{"oom of another invocation is not trusted", Evidence{Claim: claim("i"), BootID: "boot-a", Unit: &UnitEvidence{InvocationID: "j", Result: "oom-kill"}}, jobmeta.WorkerLost},
		{"signal is not oom", Evidence{Claim: claim("i"), BootID: "boot-a", Unit: &UnitEvidence{InvocationID: "i", Result: "signal"}}, jobmeta.WorkerLost},
		{"unit still settling", Evidence{Claim: claim("i"), BootID: "boot-a", Unit: &UnitEvidence{InvocationID: "i", Settling: true}, ManagerAlive: &no}, jobmeta.Running},
		{"unit settling after a stop", Evidence{Claim: claim("i"), BootID: "boot-a", StopRequested: true, Unit: &UnitEvidence{InvocationID: "i", Settling: true}}, jobmeta.Stopping},
		{"settling unit from before a reboot", Evidence{Claim: claim("i"), BootID: "boot-b", Unit: &UnitEvidence{InvocationID: "i", Settling: true}}, jobmeta.HostRebooted},
		{"manager gone", Evidence{Claim: claim("i"), BootID: "boot-a", ManagerAlive: &no}, jobmeta.UserManagerLost},
		{"manager alive, supervisor gone", Evidence{Claim: claim("i"), BootID: "boot-a", ManagerAlive: &yes}, jobmeta.WorkerLost},
		{"no manager recorded", Evidence{Claim: claim(""), BootID: "boot-a"}, jobmeta.WorkerLost},
	}
	for _, c := range cases {
		if got := Classify(c.e).State; got != c.want {
			t.Errorf("%s: got %s, want %s", c.name, got, c.want)
		}
	}
}
