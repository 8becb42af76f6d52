package cli

import (
	"bytes"
	"strings"
	"testing"
)

func runMain(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(args, IO{In: strings.NewReader(""), Out: &out, Err: &errb})
	return code, out.String(), errb.String()
}

func TestExitCodes(t *testing.T) {
	state := t.TempDir()
	// No unit of this user's is in sight.
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	cases := []struct {
		args []string
		code int
		out  string // substring of stdout+stderr
	}{
		{[]string{"version"}, ExitOK, "commandcore "},
		{[]string{"no-such-command"}, ExitUsage, "unknown command"},
		{[]string{"jobs", "show"}, ExitUsage, "takes 1 argument"},
		{[]string{"jobs", "--bogus-flag"}, ExitUsage, "unknown flag"},
		{[]string{"activity", "--last", "-1", "--state-dir", state}, ExitUsage, "--last"},
		{[]string{"activity", "--last", "5", "--state-dir", state}, ExitOK, ""},
		{[]string{"status", "--state-dir", state}, ExitNotAlive, "not installed"},
		{[]string{"jobs", "show", "../x", "--state-dir", state}, ExitFailure, "no job matches"},
		{[]string{"status", "--service", "a/b"}, ExitUsage, "invalid service name"},
		{[]string{"install", "--service", "bad@name"}, ExitUsage, "--service"},
		// The hidden role, run by hand: its own failure status (125), not
		// the shell's.
		{[]string{"hide-exec", "--help"}, 125, "started by the agent only"},
	}
	for _, c := range cases {
		code, out, errOut := runMain(c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.out) {
			t.Errorf("%v: exit %d (want %d), output %q", c.args, code, c.code, out+errOut)
		}
	}
}

func TestStatusNotRunningPrintsOnlyTheReport(t *testing.T) {
	code, out, errOut := runMain("status", "--json", "--state-dir", t.TempDir())
	if code != ExitNotAlive || !strings.Contains(out, `"running": false`) || errOut != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestRelayNeedsNoHome: the relay's commands find their state by
// --state-dir alone, as the system service's dynamic user runs them with
// no home directory; only the default state directory needs one.
func TestRelayNeedsNoHome(t *testing.T) {
	t.Setenv("HOME", "")
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("XDG_STATE_HOME", "")
	state := t.TempDir()
	for _, args := range [][]string{
		{"relay", "token", "create", "--name", "ci", "--state-dir", state},
		{"relay", "token", "list", "--state-dir", state},
		{"relay", "devices", "--state-dir", state},
		{"relay", "enroll-code", "--state-dir", state},
	} {
		if code, out, errOut := runMain(args...); code != ExitOK {
			t.Errorf("%v: exit %d, output %q", args, code, out+errOut)
		}
	}
	if code, out, errOut := runMain("relay", "devices"); code != ExitFailure || !strings.Contains(errOut, "no home directory") {
		t.Errorf("relay devices with neither --state-dir nor a home: exit %d, output %q", code, out+errOut)
	}
}
