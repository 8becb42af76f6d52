package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/selfupdate"
	"github.com/commandcore/commandcore/internal/status"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func fixed() *status.Report {
	started := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	observed := started.Add(90 * time.Second)
	age := int64(30)
	mem, nice, weight, uid := uint64(268435456), 10, uint64(50), 1000
	return &status.Report{
		SchemaVersion: status.SchemaVersion,
		Agent: status.Agent{Running: true, PID: 4242, UID: &uid, Version: "1.2.3", StartedAt: &started, Service: "commandcore.service",
			Installed: true, UnitFile: "/home/u/.config/systemd/user/commandcore.service"},
		Connection: status.ConnectionView{State: status.ConnNotEnrolled, ObservedAt: &observed, Since: &started, AgeSeconds: &age},
		Jobs:       status.Jobs{Running: 2, Terminal: 5, Unread: 1, Spares: 1},
		Systemd: status.Systemd{UserManager: status.ManagerReachable, FailureDomain: "systemd_unit",
			JobsReachUserManager: true, CanCutJobs: true, CanCutRun: true, ObservedAt: &observed,
			AgentBinary: &status.AgentBinary{Dir: "/home/u/.local/bin", Writable: true}},
		Policy:      status.Policy{MemoryMaxBytes: &mem, Nice: &nice, CPUWeight: &weight},
		Permissions: status.Permissions{Present: true, Tools: []string{"process.*", "system.metrics"}},
		StateDir:    "/home/u/.local/state/commandcore",
		ConfigDir:   "/home/u/.config/commandcore",
	}
}

// TestJSONGolden pins the --json shape: fields may be added, never renamed
// or removed, so this file only ever grows.
func TestJSONGolden(t *testing.T) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(fixed()); err != nil {
		t.Fatal(err)
	}
	const golden = "testdata/status.golden.json"
	if *update {
		os.WriteFile(golden, buf.Bytes(), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("status --json changed shape:\n%s\nwant:\n%s", buf.Bytes(), want)
	}
}

// TestHuman compares the whole human report with its golden file: every
// label as the README shows it, every line, nothing more.
func TestHuman(t *testing.T) {
	var buf bytes.Buffer
	r := fixed()
	if err := writeStatus(&buf, r, r.Agent.StartedAt.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	const golden = "testdata/status.golden.txt"
	if *update {
		os.WriteFile(golden, buf.Bytes(), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if buf.String() != string(want) {
		t.Fatalf("status's human report:\n%s\nwant:\n%s", buf.String(), want)
	}
}

// TestHumanNotRunning: the three ways no agent runs each have their own
// words, and no systemd fact is claimed without an agent to observe it.
func TestHumanNotRunning(t *testing.T) {
	for _, tc := range []struct {
		agent status.Agent
		want  string
	}{
		{status.Agent{Service: "cc.service"}, "Agent:       not installed (no user unit cc.service)\n"},
		{status.Agent{Service: "cc.service", Installed: true, UnitFile: "/u/cc.service"},
			"Agent:       installed, not running (/u/cc.service; start it with: systemctl --user start cc.service)\n"},
		{status.Agent{Service: "cc.service", Installed: true, Stale: true, PID: 77}, "Agent:       not running (stale record: pid 77 ended without stopping)\n"},
	} {
		var buf bytes.Buffer
		r := &status.Report{Agent: tc.agent, Connection: status.ConnectionView{State: status.ConnUnknown},
			Systemd:  status.Systemd{UserManager: status.ManagerUnknown, FailureDomain: status.DomainUnknown},
			Policy:   status.Policy{Error: "malformed JSON"},
			StateDir: "/s/cc", ConfigDir: "/c/cc"}
		if err := writeStatus(&buf, r, time.Now()); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		for _, want := range []string{tc.want, "State:       /s/cc\n", "Config:      /c/cc\n", "systemd:     unknown (no agent runs to observe it)\n",
			"INVALID", "Permissions: every tool (no ceiling)"} {
			if !strings.Contains(out, want) {
				t.Errorf("human status lacks %q:\n%s", want, out)
			}
		}
	}
}

// TestHumanSystemd: the user manager as the running agent recorded it.
func TestHumanSystemd(t *testing.T) {
	r := fixed()
	now := r.Agent.StartedAt.Add(100 * time.Second)
	for sd, want := range map[status.Systemd]string{
		{UserManager: status.ManagerReachable, FailureDomain: "systemd_unit"}:           "user manager reachable; new jobs run as systemd_unit (as the agent last saw it, 10s ago)",
		{UserManager: status.ManagerUnreachable, FailureDomain: "shared_parent_cgroup"}: "user manager unreachable; new jobs run as shared_parent_cgroup (as the agent last saw it, 10s ago)",
		{UserManager: status.ManagerUnreachable, FailureDomain: status.DomainRefused}:   "user manager unreachable; new jobs are refused",
		{UserManager: status.ManagerUnknown, FailureDomain: status.DomainUnknown}:       "systemd:     unknown (this agent does not record it)",
	} {
		r.Systemd = sd
		if sd.UserManager != status.ManagerUnknown {
			r.Systemd.ObservedAt = r.Connection.ObservedAt
		}
		var buf bytes.Buffer
		writeStatus(&buf, r, now)
		if !strings.Contains(buf.String(), want) {
			t.Errorf("%+v: human status lacks %q:\n%s", sd, want, buf.String())
		}
	}
	r.Agent.Service = ""
	var buf bytes.Buffer
	writeStatus(&buf, r, now)
	if !strings.Contains(buf.String(), "running (pid 4242, 1.2.3, not a service)") {
		t.Errorf("an agent that is no service:\n%s", buf.String())
	}
}

// TestHumanIsolation: what jobs and what process.run commands can reach
// of the agent's files is said for each, as the running agent's probes
// found it (a cut-off unit covers them in its own user namespace), and
// while commands reach the user manager no cover is claimed beyond direct
// reads.
func TestHumanIsolation(t *testing.T) {
	r := fixed()
	for _, tc := range []struct {
		units, run, reach, cutJobs bool
		want                       string
	}{
		{true, true, false, false, "             agent's files covered in job units and process.run commands\n"},
		{true, true, true, false, "             agent's files covered in job units and process.run commands, against direct reads only\n"},
		{true, false, false, false, "             agent's files covered in job units; process.run commands and jobs without a user manager CAN read them (this host refuses them a mount namespace)\n"},
		{false, true, false, false, "             agent's files covered in process.run commands and jobs without a user manager; job units CAN read them (this user manager cannot hide directories)\n"},
		{false, false, true, true, "             agent's files CAN be read by jobs and process.run commands (this host cannot hide directories)\n"},
		// Cut off, units hide them in their own user namespace.
		{false, true, false, true, "             agent's files covered in job units and process.run commands\n"},
	} {
		r.Systemd.AgentDirsHidden, r.Systemd.RunDirsHidden, r.Systemd.JobsReachUserManager = tc.units, tc.run, tc.reach
		r.Systemd.CanCutJobs, r.Systemd.CanCutRun = tc.cutJobs, true
		var buf bytes.Buffer
		writeStatus(&buf, r, time.Now())
		if !strings.Contains(buf.String(), tc.want) {
			t.Errorf("units %v, run %v, reach %v: human status lacks %q:\n%s", tc.units, tc.run, tc.reach, tc.want, buf.String())
		}
	}
}

// TestHumanAgentBinary: whether jobs and process.run commands can replace
// the agent's binary is said as the running agent found it: its directory
// read-only to each (a cut-off unit sees it so whenever it runs), not the
// user's to write, left writable as one jobs need, or not found; while
// commands reach the user manager no more is claimed than direct writes.
func TestHumanAgentBinary(t *testing.T) {
	const dir = "/home/me/.local/bin"
	for _, tc := range []struct {
		b     status.AgentBinary
		reach bool
		want  string
	}{
		{status.AgentBinary{Dir: dir, Writable: true, ReadOnlyInJobUnits: true, ReadOnlyInRun: true}, false,
			"agent's binary directory /home/me/.local/bin read-only in job units and process.run commands\n"},
		{status.AgentBinary{Dir: dir, Writable: true, ReadOnlyInJobUnits: true, ReadOnlyInRun: true}, true,
			"agent's binary directory /home/me/.local/bin read-only in job units and process.run commands, against direct writes only\n"},
		{status.AgentBinary{Dir: dir, Writable: true, ReadOnlyInJobUnits: true}, true,
			"agent's binary directory /home/me/.local/bin read-only in job units; process.run commands and jobs without a user manager CAN replace the binary (this host refuses them a mount namespace), against direct writes only\n"},
		{status.AgentBinary{Dir: dir, Writable: true, ReadOnlyInRun: true}, true,
			"read-only in process.run commands and jobs without a user manager; job units CAN replace the binary (this user manager cannot make it read-only)"},
		// Cut off, units see it read-only in their own user namespace.
		{status.AgentBinary{Dir: dir, Writable: true, ReadOnlyInRun: true}, false,
			"agent's binary directory /home/me/.local/bin read-only in job units and process.run commands\n"},
		{status.AgentBinary{Dir: dir, Writable: true}, true,
			"agent's binary in /home/me/.local/bin CAN be replaced by jobs and process.run commands (this host cannot make it read-only)\n"},
		{status.AgentBinary{Dir: "/home/me", Writable: true, Shared: true}, false,
			"agent's binary in /home/me CAN be replaced by jobs and process.run commands: they need to write that directory, so it stays writable (install the binary in a directory of its own)\n"},
		{status.AgentBinary{Dir: "/usr/bin"}, true, "agent's binary in /usr/bin: not this user's to write\n"},
		{status.AgentBinary{}, true, "agent's binary not found: whether jobs can replace it is unknown\n"},
	} {
		r := fixed()
		r.Systemd.AgentDirsHidden, r.Systemd.RunDirsHidden = true, true
		r.Systemd.UserManager, r.Systemd.JobsReachUserManager, r.Systemd.CanCutJobs, r.Systemd.CanCutRun = status.ManagerReachable, tc.reach, true, true
		b := tc.b
		r.Systemd.AgentBinary = &b
		var buf bytes.Buffer
		writeStatus(&buf, r, time.Now())
		if !strings.Contains(buf.String(), tc.want) {
			t.Errorf("%+v, reach %v: human status lacks %q:\n%s", tc.b, tc.reach, tc.want, buf.String())
		}
	}
	r := fixed()
	r.Systemd.AgentBinary = nil
	var buf bytes.Buffer
	writeStatus(&buf, r, time.Now())
	if strings.Contains(buf.String(), "agent's binary") {
		t.Errorf("an agent that records nothing of its binary:\n%s", buf.String())
	}
}

// TestHumanUserManagerReach: status says that commands run as the agent's
// user, whether they reach its user manager (and what that gives them),
// which commands a cut the host cannot make refuses, and, for root, which
// covers a command can undo; with no agent running, the owner's setting.
func TestHumanUserManagerReach(t *testing.T) {
	root, user := 0, 1000
	for _, tc := range []struct {
		name             string
		uid              *int
		reach, jobs, run bool
		want, never      []string
	}{
		{"reach", &user, true, true, true,
			[]string{"Commands:    jobs and process.run commands run as uid 1000 and can do what that user can\n",
				"             user manager reachable from jobs and process.run commands: they can start units of their own, outside every cover, and so read the device credential\n"},
			[]string{"as root", "REFUSED"}},
		{"cut", &user, false, true, true,
			[]string{"             user manager cut off from new jobs and process.run commands (jobs_reach_user_manager false), which see its unit files and configuration read-only; jobs started before keep their reach\n"},
			[]string{"as root", "REFUSED", "device credential"}},
		{"cut, units cannot", &user, false, false, true,
			[]string{"; REFUSED, as this host cannot cut them off: new jobs\n"}, []string{"new jobs, process.run commands"}},
		{"cut, neither can", &user, false, false, false,
			[]string{"; REFUSED, as this host cannot cut them off: new jobs, process.run commands\n"}, nil},
		{"root reach", &root, true, true, true,
			[]string{"run as uid 0 ", "             as root, every job and process.run command can unmount the covers below\n"}, nil},
		{"root cut", &root, false, true, true,
			[]string{"             as root, process.run commands and jobs without a user manager can unmount the covers below\n"}, nil},
	} {
		r := fixed()
		r.Agent.UID = tc.uid
		r.Systemd.AgentDirsHidden, r.Systemd.RunDirsHidden = true, true
		r.Systemd.JobsReachUserManager, r.Systemd.CanCutJobs, r.Systemd.CanCutRun = tc.reach, tc.jobs, tc.run
		var buf bytes.Buffer
		writeStatus(&buf, r, time.Now())
		for _, want := range tc.want {
			if !strings.Contains(buf.String(), want) {
				t.Errorf("%s: human status lacks %q:\n%s", tc.name, want, buf.String())
			}
		}
		for _, never := range tc.never {
			if strings.Contains(buf.String(), never) {
				t.Errorf("%s: human status says %q:\n%s", tc.name, never, buf.String())
			}
		}
	}
	for reach, want := range map[bool]string{
		true:  "Commands:    user manager reachable from jobs and process.run commands, as permissions.json says (no agent runs)\n",
		false: "Commands:    user manager cut off from new jobs and process.run commands (jobs_reach_user_manager false), as permissions.json says (no agent runs)\n",
	} {
		r := &status.Report{Agent: status.Agent{Service: "cc.service"}, Systemd: status.Systemd{UserManager: status.ManagerUnknown, FailureDomain: status.DomainUnknown, JobsReachUserManager: reach}}
		var buf bytes.Buffer
		writeStatus(&buf, r, time.Now())
		if !strings.Contains(buf.String(), want) || strings.Contains(buf.String(), "agent's files") {
			t.Errorf("no agent, reach %v: human status lacks %q or claims a cover:\n%s", reach, want, buf.String())
		}
	}
}

func TestHumanNamesTheServer(t *testing.T) {
	r := fixed()
	now := r.Agent.StartedAt.Add(10 * time.Minute)
	since := now.Add(-3 * time.Minute)
	r.Connection.Since = &since
	r.Connection.Server = "https://relay.example"
	for state, want := range map[string]string{
		status.ConnConnected:    "connected to https://relay.example for 3m0s (as the agent last saw it",
		status.ConnDisconnected: "disconnected from https://relay.example for 3m0s",
		status.ConnConnecting:   "connecting to https://relay.example for 3m0s",
	} {
		r.Connection.State = state
		var buf bytes.Buffer
		writeStatus(&buf, r, now)
		if !strings.Contains(buf.String(), want) {
			t.Errorf("%s: human status lacks %q:\n%s", state, want, buf.String())
		}
	}
}

// TestHumanPolicyDefaultNice: the niceness jobs get without an owner's
// choice is named as the default, an owner's own choice is not.
func TestHumanPolicyDefaultNice(t *testing.T) {
	nineteen, zero := 19, 0
	for pol, want := range map[*status.Policy]string{
		{Nice: &nineteen, NiceDefault: true}: "no memory cap; jobs at nice 19 (the default)",
		{Nice: &nineteen}:                    "no memory cap; jobs at nice 19",
		{Nice: &zero}:                        "no memory cap; jobs at nice 0",
	} {
		if got := policyLine(*pol); got != want {
			t.Errorf("%+v: policy line %q, want %q", *pol, got, want)
		}
	}
}

// TestSparesText: no spare says nothing; more than one are counted.
func TestSparesText(t *testing.T) {
	for n, want := range map[int]string{0: "", 1: "; 1 spare supervisor waiting for the next job", 3: "; 3 spare supervisors waiting for the next job"} {
		if got := sparesText(n); got != want {
			t.Errorf("sparesText(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestHumanPermissions: each kind of ceiling in its own words; a file
// whose tools allow * (or that names none) allows every tool.
func TestHumanPermissions(t *testing.T) {
	for p, want := range map[*status.Permissions]string{
		{}:                                    "Permissions: every tool (no ceiling)\n",
		{Present: true}:                       "Permissions: no tool (the ceiling allows none)\n",
		{Present: true, Tools: []string{"*"}}: "Permissions: every tool (permissions.json allows *)\n",
		{Present: true, Tools: []string{"files.*", "*"}}: "Permissions: every tool (permissions.json allows *)\n",
		{Present: true, Tools: []string{"files.*"}}:      "Permissions: only files.*\n",
		{Error: "not owner-only"}:                        "Permissions: INVALID (not owner-only): every tool call is refused\n",
	} {
		r := fixed()
		r.Permissions = *p
		var buf bytes.Buffer
		if err := writeStatus(&buf, r, time.Now()); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), want) {
			t.Errorf("%+v: human status lacks %q:\n%s", *p, want, buf.String())
		}
	}
}

// TestHumanUpdate: status says which version the relay offers, and how
// the last update ended, in words.
func TestHumanUpdate(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	ended := now.Add(-2 * time.Minute)
	for state, want := range map[string]string{
		selfupdate.StateDone:       "Last update: 1.1.0 to 1.2.0, done: the new agent linked (2m0s ago)",
		selfupdate.StateRolledBack: "Last update: 1.1.0 to 1.2.0, rolled back: the new agent did not link in time, the previous binary runs again (2m0s ago)",
	} {
		got := updateText(&status.Update{Offered: "1.2.0", Last: &status.LastUpdate{From: "1.1.0", To: "1.2.0", State: state, StartedAt: ended.Add(-time.Minute), EndedAt: &ended}}, now)
		if !strings.Contains(got, "Update:      1.2.0 offered by the relay") || !strings.Contains(got, want) {
			t.Errorf("%s:\n%s\nwant %q", state, got, want)
		}
	}
	if got := updateText(&status.Update{Last: &status.LastUpdate{From: "1", To: "2", State: selfupdate.StateStarted, StartedAt: now}}, now); strings.Contains(got, "offered") || !strings.Contains(got, "under way") {
		t.Errorf("an update under way:\n%s", got)
	}
}
