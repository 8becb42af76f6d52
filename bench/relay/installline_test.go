package relaybench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// installSteps are the script's steps, each named by the first command of
// it that bash's trace shows, in order.
var installSteps = []struct{ name, first string }{
	{"checks", "command -v curl"},
	{"sums", "fetch http"},
	{"binary", "fetch http"},
	{"sha256", "sha256 "},
	{"enroll", "cc /"},
	{"place", "mkdir -p"},
	{"install", "cc /"},
	{"link", "tries=0"},
	{"status", "cc /"},
	{"linger", "id -un"},
}

// BenchmarkInstallLine: the one line a person pastes, `curl -fsSL
// URL/install.sh | sh -s -- --code CODE`, from an empty home against a relay
// started just before (so its first download hashes its own binary), until
// the script returns, which it does once the agent says it is linked and
// status is printed. The script runs under bash -x with a time in each
// trace line, to split the wall time into its steps.
//
//	go test ./bench/relay -run '^$' -bench InstallLine -benchtime 10x
func BenchmarkInstallLine(b *testing.B) {
	if _, err := exec.LookPath("bash"); err != nil {
		b.Skip("bash is not installed")
	}
	home, _ := os.UserHomeDir()
	config := filepath.Join(home, ".config")
	// bash takes no PS4 from the environment when run as root, but reads
	// BASH_ENV.
	ps4 := filepath.Join(b.TempDir(), "ps4")
	if err := os.WriteFile(ps4, []byte("PS4='+${EPOCHREALTIME} '\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	samples := map[string][]time.Duration{}
	var total, linked []time.Duration
	for i := range b.N {
		e := &env{b: b, relayState: b.TempDir()}
		e.serve()
		code := e.relayCmd("enroll-code")
		service := fmt.Sprintf("cc-bench-%d-%d", os.Getpid(), i)
		env := append(os.Environ(), "HOME="+b.TempDir(), "XDG_CONFIG_HOME="+config, "BASH_ENV="+ps4)
		line := fmt.Sprintf("curl -fsSL %s/install.sh | bash -x -s -- --code %s --service %s", e.url, code, service)
		cmd := exec.Command("/bin/sh", "-c", line)
		cmd.Env = env
		var trace bytes.Buffer
		cmd.Stderr = &trace
		start := time.Now()
		err := cmd.Run()
		end := time.Now()
		unin := exec.Command(ccBin, "uninstall", "--purge", "--service", service)
		unin.Env = env
		unin.Run()
		if err != nil {
			b.Fatalf("the line: %v\n%s", err, trace.String())
		}
		at := stepTimes(b, trace.String())
		total = append(total, end.Sub(start))
		linked = append(linked, at["status"].Sub(start))
		for j, s := range installSteps {
			until := end
			if j+1 < len(installSteps) {
				until = at[installSteps[j+1].name]
			}
			from := at[s.name]
			if j == 0 {
				from = start // what precedes is the fetch of the script itself
			}
			samples[s.name] = append(samples[s.name], until.Sub(from))
		}
	}
	report(b, "line-to-linked", linked)
	report(b, "line-total", total)
	for _, s := range installSteps {
		b.ReportMetric(ms(summarize(samples[s.name]).P50), s.name+"-p50-ms")
	}
}

// stepTimes finds when each of installSteps began in bash's trace.
func stepTimes(b *testing.B, trace string) map[string]time.Time {
	b.Helper()
	at := map[string]time.Time{}
	next := 0
	for _, line := range strings.Split(trace, "\n") {
		if next == len(installSteps) {
			break
		}
		stamp, cmd, ok := strings.Cut(strings.TrimLeft(line, "+"), " ")
		if !ok {
			continue
		}
		secs, err := strconv.ParseFloat(stamp, 64)
		if err != nil || !strings.HasPrefix(cmd, installSteps[next].first) {
			continue
		}
		// The enroll, install and status steps are the cc calls in turn;
		// a cc call inside the link wait is not the status step.
		if installSteps[next].name == "status" && strings.Contains(cmd, "--json") {
			continue
		}
		at[installSteps[next].name] = time.Unix(0, int64(secs*1e9))
		next++
	}
	if next != len(installSteps) {
		b.Fatalf("the trace lacks step %s:\n%s", installSteps[next].name, trace)
	}
	return at
}
