package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/statedir"
	"github.com/commandcore/commandcore/internal/status"
)

func TestStatus(t *testing.T) {
	dirs := statedir.Dirs{State: t.TempDir(), Config: t.TempDir(), Service: statedir.DefaultService}
	var out bytes.Buffer
	o := &statusOptions{IO: IO{Out: &out, Err: &out}, Dirs: dirs, JSON: true, Now: time.Now}
	var ee *exitError
	if err := runStatus(o); !errors.As(err, &ee) || ee.code != ExitNotAlive || !ee.quiet {
		t.Fatalf("no agent: %v, want a quiet exit 3", err)
	}
	var r status.Report
	if !strings.HasPrefix(out.String(), "{\n  \"") || json.Unmarshal(out.Bytes(), &r) != nil || r.Agent.Running {
		t.Fatalf("status --json with no agent:\n%s", out.String())
	}

	// A runtime record of a live process (this one) is a running agent.
	procs := procid.Default()
	self, err := procs.Self()
	boot, berr := procs.BootID()
	if err != nil || berr != nil {
		t.Fatal(err, berr)
	}
	at := time.Now().UTC().Add(-time.Minute)
	rt, _ := json.Marshal(status.Runtime{Schema: status.RuntimeSchema, PID: self.PID, StartTicks: self.StartTicks, BootID: boot,
		Version: "1.2.3", StartedAt: at, Service: statedir.DefaultService,
		Connection: status.Connection{State: status.ConnConnected, Server: "https://relay.example", ObservedAt: at, Since: at}})
	if err := os.WriteFile(filepath.Join(dirs.State, status.RuntimeFile), rt, 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	o.JSON = false
	if err := runStatus(o); err != nil {
		t.Fatalf("a running agent: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "https://relay.example") || strings.Contains(out.String(), "not running") {
		t.Fatalf("status with a running agent:\n%s", out.String())
	}
}
