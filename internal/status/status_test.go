package status

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func fixed() *Report {
	started := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	observed := started.Add(90 * time.Second)
	age := int64(30)
	mem, nice, weight, uid := uint64(268435456), 10, uint64(50), 1000
	return &Report{
		SchemaVersion: SchemaVersion,
		Agent: Agent{Running: true, PID: 4242, UID: &uid, Version: "1.2.3", StartedAt: &started, Service: "commandcore.service",
			Installed: true, UnitFile: "/home/u/.config/systemd/user/commandcore.service"},
		Connection: ConnectionView{State: ConnNotEnrolled, ObservedAt: &observed, Since: &started, AgeSeconds: &age},
		Jobs:       Jobs{Running: 2, Terminal: 5, Unread: 1},
		Systemd: Systemd{UserManager: ManagerReachable, FailureDomain: "systemd_unit",
			JobsReachUserManager: true, CanCutJobs: true, CanCutRun: true, ObservedAt: &observed},
		Policy:      Policy{MemoryMaxBytes: &mem, Nice: &nice, CPUWeight: &weight},
		Permissions: Permissions{Present: true, Tools: []string{"process.*", "system.metrics"}},
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

func TestHuman(t *testing.T) {
	var buf bytes.Buffer
	r := fixed()
	if err := WriteHuman(&buf, r, r.Agent.StartedAt.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"running (pid 4242, 1.2.3, as commandcore.service), up 2m0s", "State:       /home/u/.local/state/commandcore\n", "not_enrolled (as the agent last saw it, 30s ago)", "2 running, 5 finished (1 unread)", "Policy:      memory cap 268435456 bytes per job; jobs at nice 10; job units at CPU weight 50\n", "Permissions: only process.*, system.metrics"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("human status lacks %q:\n%s", want, buf.String())
		}
	}
}

// TestHumanNotRunning: the three ways no agent runs each have their own
// words, and no systemd fact is claimed without an agent to observe it.
func TestHumanNotRunning(t *testing.T) {
	for _, tc := range []struct {
		agent Agent
		want  string
	}{
		{Agent{Service: "cc.service"}, "Agent:       not installed (no user unit cc.service)\n"},
		{Agent{Service: "cc.service", Installed: true, UnitFile: "/u/cc.service"},
			"Agent:       installed, not running (/u/cc.service; start it with: systemctl --user start cc.service)\n"},
		{Agent{Service: "cc.service", Installed: true, Stale: true, PID: 77}, "Agent:       not running (stale record: pid 77 ended without stopping)\n"},
	} {
		var buf bytes.Buffer
		r := &Report{Agent: tc.agent, Connection: ConnectionView{State: ConnUnknown},
			Systemd:  Systemd{UserManager: ManagerUnknown, FailureDomain: DomainUnknown},
			Policy:   Policy{Error: "malformed JSON"},
			StateDir: "/s/cc", ConfigDir: "/c/cc"}
		if err := WriteHuman(&buf, r, time.Now()); err != nil {
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
	for sd, want := range map[Systemd]string{
		{UserManager: ManagerReachable, FailureDomain: "systemd_unit"}:           "user manager reachable; new jobs run as systemd_unit (as the agent last saw it, 10s ago)",
		{UserManager: ManagerUnreachable, FailureDomain: "shared_parent_cgroup"}: "user manager unreachable; new jobs run as shared_parent_cgroup (as the agent last saw it, 10s ago)",
		{UserManager: ManagerUnreachable, FailureDomain: DomainRefused}:          "user manager unreachable; new jobs are refused",
		{UserManager: ManagerUnknown, FailureDomain: DomainUnknown}:              "systemd:     unknown (this agent does not record it)",
	} {
		r.Systemd = sd
		if sd.UserManager != ManagerUnknown {
			r.Systemd.ObservedAt = r.Connection.ObservedAt
		}
		var buf bytes.Buffer
		WriteHuman(&buf, r, now)
		if !strings.Contains(buf.String(), want) {
			t.Errorf("%+v: human status lacks %q:\n%s", sd, want, buf.String())
		}
	}
	r.Agent.Service = ""
	var buf bytes.Buffer
	WriteHuman(&buf, r, now)
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
		WriteHuman(&buf, r, time.Now())
		if !strings.Contains(buf.String(), tc.want) {
			t.Errorf("units %v, run %v, reach %v: human status lacks %q:\n%s", tc.units, tc.run, tc.reach, tc.want, buf.String())
		}
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
			[]string{"             user manager cut off from new jobs and process.run commands (jobs_reach_user_manager false); jobs started before keep their reach\n"},
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
		WriteHuman(&buf, r, time.Now())
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
		r := &Report{Agent: Agent{Service: "cc.service"}, Systemd: Systemd{UserManager: ManagerUnknown, FailureDomain: DomainUnknown, JobsReachUserManager: reach}}
		var buf bytes.Buffer
		WriteHuman(&buf, r, time.Now())
		if !strings.Contains(buf.String(), want) || strings.Contains(buf.String(), "agent's files") {
			t.Errorf("no agent, reach %v: human status lacks %q or claims a cover:\n%s", reach, want, buf.String())
		}
	}
}

func TestDecodeRuntime(t *testing.T) {
	good := `{"schema":1,"pid":10,"start_ticks":5,"boot_id":"b","version":"v","started_at":"2026-11-30T08:00:00Z","service":"commandcore.service","connection":{"state":"not_enrolled"}}`
	rt, err := DecodeRuntime([]byte(good))
	if err != nil || rt.PID != 10 || rt.Connection.State != ConnNotEnrolled || rt.Systemd != nil || rt.StoppedAt != nil {
		t.Fatalf("good record: %+v %v", rt, err)
	}
	stopped := good[:len(good)-1] + `,"systemd":{"user_manager":"reachable","failure_domain":"systemd_unit","observed_at":"2026-11-30T08:00:05Z"},"stopped_at":"2026-11-30T09:00:00Z"}`
	if rt, err := DecodeRuntime([]byte(stopped)); err != nil || rt.Systemd == nil || rt.Systemd.FailureDomain != "systemd_unit" || rt.StoppedAt == nil {
		t.Fatalf("record with systemd facts, stopped: %+v %v", rt, err)
	}
	for _, bad := range []string{``, `{}`, `[]`, `{"schema":1,"pid":-1,"start_ticks":5,"boot_id":"b"}`,
		`{"schema":2,"pid":10,"start_ticks":5,"boot_id":"b"}`, good + `}`, good[:40]} {
		if _, err := DecodeRuntime([]byte(bad)); !errors.Is(err, ErrBadRuntime) {
			t.Errorf("%q: %v, want ErrBadRuntime", bad, err)
		}
	}
}

func FuzzDecodeRuntime(f *testing.F) {
	f.Add([]byte(`{"schema":1,"pid":10,"start_ticks":5,"boot_id":"b"}`))
	f.Add([]byte(`{"schema":1,"pid":10,"start_ticks":5,"boot_id":"b","connection":{"state":"x","observed_at":"2026-01-01T00:00:00Z"}}`))
	f.Add([]byte(`{"schema":1,"pid":10,"start_ticks":5,"boot_id":"b","systemd":{"user_manager":"unreachable","failure_domain":"none","observed_at":"2026-01-01T00:00:00Z"},"stopped_at":"2026-01-01T00:00:01Z"}`))
	f.Add([]byte(`{"schema":1,"pid":10,"start_ticks":5,"boot_id":"b","systemd":{"user_manager":"reachable","failure_domain":"systemd_unit","can_cut_jobs":true,"can_cut_run":false,"observed_at":"2026-01-01T00:00:00Z"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rt, err := DecodeRuntime(data)
		if err != nil {
			if !errors.Is(err, ErrBadRuntime) || rt != nil {
				t.Fatalf("error %v with record %v", err, rt)
			}
			return
		}
		if rt.PID <= 0 || rt.StartTicks == 0 || rt.BootID == "" {
			t.Fatalf("accepted %+v", rt)
		}
	})
}

func TestHumanNamesTheServer(t *testing.T) {
	r := fixed()
	now := r.Agent.StartedAt.Add(10 * time.Minute)
	since := now.Add(-3 * time.Minute)
	r.Connection.Since = &since
	r.Connection.Server = "https://relay.example"
	for state, want := range map[string]string{
		ConnConnected:    "connected to https://relay.example for 3m0s (as the agent last saw it",
		ConnDisconnected: "disconnected from https://relay.example for 3m0s",
		ConnConnecting:   "connecting to https://relay.example for 3m0s",
	} {
		r.Connection.State = state
		var buf bytes.Buffer
		WriteHuman(&buf, r, now)
		if !strings.Contains(buf.String(), want) {
			t.Errorf("%s: human status lacks %q:\n%s", state, want, buf.String())
		}
	}
}
