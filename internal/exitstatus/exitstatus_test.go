package exitstatus

import (
	"errors"
	"os/exec"
	"testing"
)

// TestOfRealProcesses: processes that exit with a code, are killed by a
// named signal, or by a real-time one without a name, are told apart.
func TestOfRealProcesses(t *testing.T) {
	for _, c := range []struct {
		script string
		code   int
		signal string
	}{
		{"exit 0", 0, ""},
		{"exit 3", 3, ""},
		{"kill -KILL $$", 0, "SIGKILL"},
		{"kill -TERM $$", 0, "SIGTERM"},
		{"kill -40 $$", 0, "signal 40"},
	} {
		cmd := exec.Command("/bin/sh", "-c", c.script)
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		code, signal := Of(cmd.ProcessState)
		switch {
		case c.signal != "" && (code != nil || signal != c.signal):
			t.Errorf("%s: code %v signal %q, want %s", c.script, code, signal, c.signal)
		case c.signal == "" && (code == nil || *code != c.code || signal != ""):
			t.Errorf("%s: code %v signal %q, want exit %d", c.script, code, signal, c.code)
		}
	}
}
