package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkConmonMemory is BenchmarkSupervisorMemory's job under the
// container world's supervisor: Debian's conmon with runc supervising a
// container (a busybox-static root) whose process writes the same 2 GiB to
// stdout, which conmon stores in its k8s-file log, rotated at 8 MiB so the
// disk holds a bounded log as a capture does. conmon's memory is sampled
// as the supervisor's is (sampleMemory), from runc start until the
// container's exit file appears. runc, not crun: Debian's crun refuses a
// hybrid cgroup host. Skipped where conmon, runc or busybox is missing
// (apt-get install conmon runc busybox-static).
func BenchmarkConmonMemory(b *testing.B) {
	tools := map[string]string{}
	for _, name := range []string{"conmon", "runc", "busybox"} {
		p, err := exec.LookPath(name)
		if err != nil {
			b.Skipf("%s is not installed (apt-get install conmon runc busybox-static)", name)
		}
		tools[name] = p
	}
	dir := b.TempDir()
	bundle := conmonBundle(b, dir, tools["runc"], tools["busybox"])
	var worst memPeak
	for i := range b.N {
		p := runConmon(b, dir, bundle, tools, fmt.Sprintf("ccbench%d", i))
		if p.hwmKiB >= worst.hwmKiB {
			worst = p
		}
	}
	reportMemory(b, worst)
}

// conmonBundle makes an OCI bundle whose process writes captureBytes of
// zeros to stdout, with a root holding only a static busybox.
func conmonBundle(b *testing.B, dir, runc, busybox string) string {
	b.Helper()
	bundle := filepath.Join(dir, "bundle")
	bin := filepath.Join(bundle, "rootfs", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile(busybox)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "busybox"), data, 0o755); err != nil {
		b.Fatal(err)
	}
	for _, applet := range []string{"sh", "head"} {
		if err := os.Symlink("busybox", filepath.Join(bin, applet)); err != nil {
			b.Fatal(err)
		}
	}
	spec := exec.Command(runc, "spec")
	spec.Dir = bundle
	if out, err := spec.CombinedOutput(); err != nil {
		b.Fatalf("runc spec: %v: %s", err, out)
	}
	path := filepath.Join(bundle, "config.json")
	var config map[string]any
	raw, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(raw, &config)
	}
	if err != nil {
		b.Fatal(err)
	}
	process := config["process"].(map[string]any)
	process["terminal"] = false
	process["args"] = []string{"/bin/sh", "-c", fmt.Sprintf("head -c %d /dev/zero", captureBytes)}
	if raw, err = json.Marshal(config); err == nil {
		err = os.WriteFile(path, raw, 0o644)
	}
	if err != nil {
		b.Fatal(err)
	}
	return bundle
}

// runConmon starts conmon for container id (it creates the container with
// runc and daemonizes), starts the container once its PID file exists, and
// samples conmon until the container has exited.
func runConmon(b *testing.B, dir, bundle string, tools map[string]string, id string) memPeak {
	b.Helper()
	root := filepath.Join(dir, "runc")
	exits := filepath.Join(dir, "exit")
	persist := filepath.Join(dir, "persist", id)
	for _, d := range []string{exits, persist, filepath.Join(dir, "sock")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			b.Fatal(err)
		}
	}
	pidFile := filepath.Join(dir, id+".pid")
	conmonPID := filepath.Join(dir, id+".conmon.pid")
	cmd := exec.Command(tools["conmon"], "--api-version", "1", "-c", id, "-u", id, "-n", id,
		"-r", tools["runc"], "--runtime-arg", "--root="+root, "-b", bundle, "-p", pidFile,
		"--exit-dir", exits, "--persist-dir", persist,
		"--socket-dir-path", filepath.Join(dir, "sock"),
		"-l", "k8s-file:"+filepath.Join(dir, id+".log"), "--log-size-max", strconv.Itoa(8<<20),
		"--conmon-pidfile", conmonPID, "--log-level", "error")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("conmon: %v: %s", err, out)
	}
	b.Cleanup(func() { exec.Command(tools["runc"], "--root="+root, "delete", "--force", id).Run() })
	pid := 0
	for deadline := time.Now().Add(10 * time.Second); pid == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("conmon did not create the container")
		}
		data, err := os.ReadFile(pidFile)
		if err != nil || len(data) == 0 {
			continue
		}
		if data, err = os.ReadFile(conmonPID); err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		}
	}
	if out, err := exec.Command(tools["runc"], "--root="+root, "start", id).CombinedOutput(); err != nil {
		b.Fatalf("runc start: %v: %s", err, out)
	}
	p := sampleMemory(pid, filepath.Join(exits, id), 2*time.Millisecond)
	if _, err := os.Stat(filepath.Join(exits, id)); err != nil {
		b.Fatalf("the container's exit was not recorded: %v", err)
	}
	return p
}
