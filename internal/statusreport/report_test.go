package statusreport

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/status"
)

// TestNoAgentNoJobs: status over a fresh state directory says no agent
// runs, counts no jobs and leaves the directory as it found it.
func TestNoAgentNoJobs(t *testing.T) {
	state := t.TempDir()
	r := Build(Input{StateDir: state, ConfigDir: t.TempDir(), Service: "commandcore.service"}, procid.Default())
	if r.Agent.Running || r.Agent.Stale || r.Agent.Installed || r.Agent.Service != "commandcore.service" || r.StateDir != state {
		t.Fatalf("agent = %+v in %s, want not running, not stale, not installed, the service named, in %s", r.Agent, r.StateDir, state)
	}
	// With no agent to observe the user manager, status claims nothing
	// about it (whatever this process could reach).
	if r.Systemd.UserManager != "unknown" || r.Systemd.FailureDomain != "unknown" || r.Systemd.ObservedAt != nil {
		t.Fatalf("systemd = %+v, want unknown", r.Systemd)
	}
	if r.Connection.State != status.ConnUnknown || r.Jobs != (status.Jobs{}) {
		t.Fatalf("connection %q, jobs %+v; want unknown and none", r.Connection.State, r.Jobs)
	}
	if r.Permissions.Present || r.Policy.Error != "" {
		t.Fatalf("permissions %+v, policy %+v; want absent and valid", r.Permissions, r.Policy)
	}
	if ents, _ := os.ReadDir(state); len(ents) != 0 {
		t.Fatalf("status created %v in the state directory", ents)
	}
}

// TestRuntimeRecordIsVerified: a record is believed only when its PID is
// alive with the recorded start ticks on the recorded boot; otherwise it
// is stale and its connection is not reported.
func TestRuntimeRecordIsVerified(t *testing.T) {
	procs := procid.Default()
	self, err := procs.Self()
	boot, berr := procs.BootID()
	if err != nil || berr != nil {
		t.Fatal(err, berr)
	}
	observed := time.Now().UTC().Add(-time.Minute)
	live := status.Runtime{
		Schema: status.RuntimeSchema, PID: self.PID, StartTicks: self.StartTicks, BootID: boot,
		Version: "1.2.3", StartedAt: observed, Service: "cc.service", AgentDirsHidden: true, RunDirsHidden: true,
		Connection:  status.Connection{State: status.ConnConnected, Server: "https://relay.example", ObservedAt: observed, Since: observed},
		Systemd:     &status.RuntimeSystemd{UserManager: "unreachable", FailureDomain: "none", CanCutRun: true, ObservedAt: observed},
		AgentBinary: &status.AgentBinary{Dir: "/home/me/.local/bin", Writable: true, ReadOnlyInJobUnits: true},
	}
	stoppedAt := time.Now().UTC()
	for _, tc := range []struct {
		name    string
		change  func(*status.Runtime)
		running bool
		stale   bool
	}{
		{"this process", func(*status.Runtime) {}, true, false},
		{"reused PID", func(rt *status.Runtime) { rt.StartTicks++ }, false, true},
		{"earlier boot", func(rt *status.Runtime) { rt.BootID += "-before" }, false, true},
		// An agent that stopped cleanly leaves no stale record behind.
		{"stopped", func(rt *status.Runtime) { rt.StoppedAt = &stoppedAt }, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			rt := live
			tc.change(&rt)
			data, err := json.Marshal(&rt)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(state, status.RuntimeFile), data, 0o600); err != nil {
				t.Fatal(err)
			}
			r := Build(Input{StateDir: state, ConfigDir: t.TempDir(), Service: "commandcore.service", UnitFile: "/u/commandcore.service"}, procs)
			if r.Agent.Running != tc.running || r.Agent.Stale != tc.stale || !r.Agent.Installed || r.Agent.UnitFile != "/u/commandcore.service" {
				t.Fatalf("agent = %+v, want running %v, stale %v, installed", r.Agent, tc.running, tc.stale)
			}
			if !tc.running {
				if r.Connection.State != status.ConnUnknown || r.Systemd.AgentDirsHidden || r.Systemd.RunDirsHidden || r.Systemd.CanCutRun ||
					r.Systemd.UserManager != "unknown" || r.Agent.UID != nil || r.Systemd.AgentBinary != nil {
					t.Fatalf("a dead agent's connection %+v (systemd %+v) was believed", r.Connection, r.Systemd)
				}
				if r.Agent.Service != "commandcore.service" {
					t.Fatalf("service %q, want the one asked about", r.Agent.Service)
				}
				return
			}
			if r.Agent.PID != self.PID || r.Agent.Version != "1.2.3" || r.Agent.Service != "cc.service" || !r.Systemd.AgentDirsHidden || !r.Systemd.RunDirsHidden {
				t.Fatalf("agent %+v, dirs hidden %v/%v: not the record's", r.Agent, r.Systemd.AgentDirsHidden, r.Systemd.RunDirsHidden)
			}
			if r.Systemd.UserManager != "unreachable" || r.Systemd.FailureDomain != "none" || r.Systemd.CanCutJobs || !r.Systemd.CanCutRun ||
				r.Systemd.ObservedAt == nil || !r.Systemd.ObservedAt.Equal(observed) {
				t.Fatalf("systemd = %+v, want the record's facts", r.Systemd)
			}
			if b := r.Systemd.AgentBinary; b == nil || *b != *live.AgentBinary {
				t.Fatalf("agent binary %+v, want the record's %+v", b, live.AgentBinary)
			}
			if r.Agent.UID == nil || *r.Agent.UID != os.Geteuid() {
				t.Fatalf("agent uid %v, want this process's %d", r.Agent.UID, os.Geteuid())
			}
			if r.Connection.State != status.ConnConnected || r.Connection.Server != "https://relay.example" ||
				r.Connection.AgeSeconds == nil || *r.Connection.AgeSeconds < 60 {
				t.Fatalf("connection = %+v, want connected to the record's server, observed at least 60 s ago", r.Connection)
			}
		})
	}
}

// TestPolicyReported: status shows each of the owner's caps it finds in
// job-resources.json, and only those, and the niceness jobs get by default
// where the policy names none.
func TestPolicyReported(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{`{"nice": 10, "cpu_weight": 50}`, `{"nice":10,"cpu_weight":50}`},
		{`{"memory_max_bytes": 268435456, "nice": 0}`, `{"memory_max_bytes":268435456,"nice":0}`},
		{`{}`, `{"nice":19,"nice_default":true}`},
		{`{"nice": 0}`, `{"nice":0}`},
	} {
		state := t.TempDir()
		if err := os.WriteFile(filepath.Join(state, "job-resources.json"), []byte(tc.doc), 0o600); err != nil {
			t.Fatal(err)
		}
		r := Build(Input{StateDir: state, ConfigDir: t.TempDir(), Service: "commandcore.service"}, procid.Default())
		got, err := json.Marshal(r.Policy)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("%s: status policy %s, want %s", tc.doc, got, tc.want)
		}
	}
}

// TestJobsReachUserManagerReported: systemd.jobs_reach_user_manager is the
// owner's permissions.json, agent or none: true without a file or key,
// false only where a valid file says so.
func TestJobsReachUserManagerReported(t *testing.T) {
	for _, tc := range []struct {
		doc   string
		reach bool
	}{
		{"", true},
		{`{"schema_version": 1, "tools": ["*"]}`, true},
		{`{"schema_version": 1, "tools": ["*"], "jobs_reach_user_manager": true}`, true},
		{`{"schema_version": 1, "tools": ["*"], "jobs_reach_user_manager": false}`, false},
		{`{"schema_version": 1, "tools": ["*"], "jobs_reach_user_manager": "false"}`, true},
	} {
		config := t.TempDir()
		if tc.doc != "" {
			if err := os.WriteFile(filepath.Join(config, "permissions.json"), []byte(tc.doc), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		r := Build(Input{StateDir: t.TempDir(), ConfigDir: config, Service: "commandcore.service"}, procid.Default())
		out, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Systemd map[string]any `json:"systemd"`
		}
		if err := json.Unmarshal(out, &doc); err != nil {
			t.Fatal(err)
		}
		if got := doc.Systemd["jobs_reach_user_manager"]; got != tc.reach {
			t.Errorf("permissions.json %q: systemd.jobs_reach_user_manager = %v, want %v", tc.doc, got, tc.reach)
		}
	}
}
