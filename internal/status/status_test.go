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
	mem := uint64(268435456)
	return &Report{
		SchemaVersion: SchemaVersion,
		Agent:         Agent{Running: true, PID: 4242, Version: "1.2.3", StartedAt: &started, Service: "commandcore.service"},
		Connection:    ConnectionView{State: ConnNotEnrolled, ObservedAt: &observed, Since: &started, AgeSeconds: &age},
		Jobs:          Jobs{Running: 2, Terminal: 5, Unread: 1},
		Systemd:       Systemd{UserManager: ManagerReachable, FailureDomain: "systemd_unit"},
		Policy:        Policy{MemoryMaxBytes: &mem},
		Permissions:   Permissions{Present: true, Tools: []string{"process.*", "system.metrics"}},
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
	for _, want := range []string{"running (pid 4242", "up 2m0s", "not_enrolled (as the agent last saw it, 30s ago)", "2 running, 5 finished (1 unread)", "memory cap 268435456", "Permissions: only process.*, system.metrics"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("human status lacks %q:\n%s", want, buf.String())
		}
	}
	buf.Reset()
	WriteHuman(&buf, &Report{Agent: Agent{Stale: true}, Connection: ConnectionView{State: ConnUnknown}, Policy: Policy{Error: "malformed JSON"}}, time.Now())
	if !strings.Contains(buf.String(), "not running (stale record)") || !strings.Contains(buf.String(), "INVALID") ||
		!strings.Contains(buf.String(), "Permissions: every tool (no ceiling)") {
		t.Errorf("stale human status:\n%s", buf.String())
	}
}

func TestDecodeRuntime(t *testing.T) {
	good := `{"schema":1,"pid":10,"start_ticks":5,"boot_id":"b","version":"v","started_at":"2026-11-30T08:00:00Z","service":"commandcore.service","connection":{"state":"not_enrolled"}}`
	rt, err := DecodeRuntime([]byte(good))
	if err != nil || rt.PID != 10 || rt.Connection.State != ConnNotEnrolled {
		t.Fatalf("good record: %+v %v", rt, err)
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
