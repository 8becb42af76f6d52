package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/hideexec"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/run"
)

// BenchmarkRunTrue times process.run's core (run.Run in process, no MCP)
// of `true`, from the call to its result: with the shell started directly,
// as before the hide-exec role (direct), and through the role (hidden),
// which adds a start of the commandcore binary and its mounts.
func BenchmarkRunTrue(b *testing.B) {
	state, config := b.TempDir(), b.TempDir()
	h := hideexec.Probe(context.Background(), ccBin, state, config, hideexec.Covers{ReadOnly: binaryDir()})
	if h == nil {
		b.Fatal("the hide-exec probe failed")
	}
	for _, v := range []struct {
		name string
		hide *hideexec.Hider
	}{{"direct", nil}, {"hidden", h}} {
		b.Run(v.name, func(b *testing.B) {
			measure(b, sampler{name: v.name, run: func() (time.Duration, error) {
				began := time.Now()
				res, err := run.Run(context.Background(), run.Request{Command: "true", Cwd: "/"},
					run.Options{Shell: jobs.DefaultShell(), Hide: v.hide})
				d := time.Since(began)
				if err == nil && (res.ExitCode == nil || *res.ExitCode != 0) {
					err = fmt.Errorf("true exited %v", res.ExitCode)
				}
				return d, err
			}})
		})
	}
}

// BenchmarkHideExecMemory is the hide-exec role's memory at the moment it
// execs its program (`true`), started as the agent starts it (Wrap): the
// role runs under ptrace and is read at the entry of its execve, when all
// of the binary's initialisers and the role's mounts are done. Anonymous
// is what each process.run pays in private memory for the role; Rss adds
// the binary's file pages, shared with the agent.
func BenchmarkHideExecMemory(b *testing.B) {
	state, config := b.TempDir(), b.TempDir()
	h := hideexec.Probe(context.Background(), ccBin, state, config, hideexec.Covers{ReadOnly: binaryDir()})
	if h == nil {
		b.Fatal("the hide-exec probe failed")
	}
	// Every ptrace request comes from the thread that started the tracee.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var anon, rss []int64
	for range b.N {
		r, err := roleAtExec(h)
		if err != nil {
			b.Fatal(err)
		}
		anon, rss = append(anon, r["Anonymous"]), append(rss, r["Rss"])
	}
	b.ReportMetric(float64(median(anon)), "Anonymous-KiB")
	b.ReportMetric(float64(median(rss)), "Rss-KiB")
}

// roleAtExec starts `true` through the role, stops the role at the entry
// of its execve and returns its /proc/PID/smaps_rollup there.
func roleAtExec(h *hideexec.Hider) (map[string]int64, error) {
	cmd := exec.Command("/bin/true")
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	h.Wrap(cmd, "", false)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer cmd.Wait()
	pid := cmd.Process.Pid
	var ws syscall.WaitStatus
	// The first stop is the tracee's own exec of the binary.
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		return nil, err
	}
	for {
		if err := syscall.PtraceSyscall(pid, 0); err != nil {
			return nil, err
		}
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
			return nil, err
		}
		if ws.Exited() {
			return nil, fmt.Errorf("the role exited (%d) before its exec", ws.ExitStatus())
		}
		var regs syscall.PtraceRegs
		if err := syscall.PtraceGetRegs(pid, &regs); err != nil {
			return nil, err
		}
		if regs.Orig_rax == syscall.SYS_EXECVE {
			data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
			syscall.PtraceDetach(pid)
			if err != nil {
				return nil, err
			}
			return statusFields(data), nil
		}
	}
}
