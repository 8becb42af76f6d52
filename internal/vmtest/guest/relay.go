package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/testkit"
)

// The relay as the packages install it: the .deb (test/vm/run.sh puts it
// at debPath) holds the system unit and its flags file.
const (
	debPath      = "/usr/local/share/cctest/commandcore.deb"
	relayUnit    = "commandcore-relay.service"
	relayEnv     = "/etc/commandcore/relay.env"
	relayState   = "/var/lib/commandcore-relay"
	packagedBin  = "/usr/bin/commandcore"
	relayURL     = "http://127.0.0.1:443"
	relayDevice  = "vmdev"
	relayReplica = "vm-relay"
	// maxExposure is the highest `systemd-analyze security` level the
	// running unit may have (internal/install's test holds the file to it).
	maxExposure = 2.0
	// capNetBindService is CAP_NET_BIND_SERVICE's bit in /proc's cap masks.
	capNetBindService = 1 << 10
)

// relayService installs the .deb, runs the relay as its system service on
// port 443 with flags from relay.env, makes an enrollment code and a client
// token as the service's dynamic user, enrolls root's agent, runs a job
// through the relay, restarts the relay and checks that the device links
// again with the relay's state and the job kept.
func relayService() error {
	if err := waitFor(60*time.Second, func() bool {
		_, err := os.Stat("/run/user/0/bus")
		return err == nil
	}); err != nil {
		return fmt.Errorf("root's user bus never appeared: %w", err)
	}
	if out, err := command("dpkg", "-i", debPath); err != nil {
		return fmt.Errorf("dpkg -i: %w\n%s", err, out)
	}
	// Installed, not enabled.
	if out, _ := command("systemctl", "is-enabled", relayUnit); strings.TrimSpace(out) != "disabled" {
		return fmt.Errorf("after dpkg -i, systemctl is-enabled %s: %q, want disabled", relayUnit, out)
	}
	// Two flags in one variable: systemd splits it into words.
	env := fmt.Sprintf("COMMANDCORE_RELAY_ARGS=\"--listen 127.0.0.1:443 --name %s\"\n", relayReplica)
	if err := os.WriteFile(relayEnv, []byte(env), 0o600); err != nil {
		return err
	}
	if out, err := command("systemctl", "enable", "--now", relayUnit); err != nil {
		return fmt.Errorf("systemctl enable --now: %w\n%s", err, out)
	}
	pid1, err := waitRelay()
	if err != nil {
		return err
	}
	uid, err := checkSandbox(pid1)
	if err != nil {
		return err
	}

	// Administration as the service's user, while the service runs.
	out, err := asRelay("/usr/bin/id", "-u")
	if err != nil {
		return err
	}
	if strings.TrimSpace(out) != strconv.Itoa(uid) {
		return fmt.Errorf("systemd-run as %s ran as uid %s, the service as %d", "commandcore-relay", strings.TrimSpace(out), uid)
	}
	if out, err := asRelay(packagedBin, "relay", "replicas", "--state-dir", relayState); err != nil || !strings.Contains(out, relayReplica) || !strings.Contains(out, "127.0.0.1:443") {
		return fmt.Errorf("relay replicas lists no %s on 127.0.0.1:443 (are the flags split?): %v\n%s", relayReplica, err, out)
	}
	code, err := asRelay(packagedBin, "relay", "enroll-code", "--name", relayDevice, "--state-dir", relayState)
	if err != nil {
		return err
	}
	token, err := asRelay(packagedBin, "relay", "token", "create", "--name", "vmtest", "--devices", relayDevice, "--state-dir", relayState)
	if err != nil {
		return err
	}
	if err := checkOwned(uid); err != nil {
		return err
	}

	// Root's agent, in its user manager, enrolled with the code.
	if out, err := command(packagedBin, "enroll", "--server", relayURL, "--code", strings.TrimSpace(code)); err != nil {
		return fmt.Errorf("enroll: %w\n%s", err, out)
	}
	if out, err := command(packagedBin, "install"); err != nil {
		return fmt.Errorf("install: %w\n%s", err, out)
	}
	c, err := relayClient(strings.TrimSpace(token))
	if err != nil {
		return err
	}
	started, err := c.start("through-relay", "echo through-relay; exec sleep 100000")
	if err != nil {
		c.close()
		return err
	}
	var output jobs.Output
	err = c.call("process.output", jobs.OutputRequest{ProcessID: started.ProcessID, WaitMS: 10000}, &output)
	c.close()
	if err != nil {
		return err
	}
	if !strings.Contains(output.Stdout.Data, "through-relay") {
		return fmt.Errorf("job %s: no output through the relay: %q", started.ProcessID, output.Stdout.Data)
	}
	before, err := linkedDevice(time.Time{})
	if err != nil {
		return err
	}
	fmt.Printf("relay-service: device %s (%s) linked at %s, job %s ran through the relay\n", before.Name, before.ID, before.LinkedAt, started.ProcessID)

	if out, err := command("systemctl", "restart", relayUnit); err != nil {
		return fmt.Errorf("systemctl restart: %w\n%s", err, out)
	}
	pid2, err := waitRelay()
	if err != nil {
		return err
	}
	if pid2 == pid1 {
		return fmt.Errorf("the relay's main PID %d did not change across the restart", pid1)
	}
	after, err := linkedDevice(*before.LinkedAt)
	if err != nil {
		return err
	}
	if after.ID != before.ID || after.Standing != "active" {
		return fmt.Errorf("after the restart the device is %s (%s, %s), was %s", after.Name, after.ID, after.Standing, before.ID)
	}
	// The same token (the relay's state kept) reaches the same job.
	c, err = relayClient(strings.TrimSpace(token))
	if err != nil {
		return err
	}
	defer c.close()
	rec, err := c.status(started.ProcessID)
	if err != nil {
		return err
	}
	if rec.State != jobmeta.Running {
		return fmt.Errorf("after the restart job %s is %s, want running", rec.ProcessID, rec.State)
	}
	if err := c.call("process.output", jobs.OutputRequest{ProcessID: started.ProcessID}, &output); err != nil {
		return err
	}
	if !strings.Contains(output.Stdout.Data, "through-relay") {
		return fmt.Errorf("after the restart job %s output %q", started.ProcessID, output.Stdout.Data)
	}
	if err := checkOwned(uid); err != nil {
		return err
	}
	fmt.Printf("relay-service: after the restart (PID %d -> %d) device %s linked again at %s, token and job %s kept\n", pid1, pid2, after.ID, after.LinkedAt, started.ProcessID)

	level, err := exposure()
	if err != nil {
		return err
	}
	report("INFO relay-service: systemd-analyze security %s: %.1f", relayUnit, level)
	if level > maxExposure {
		return fmt.Errorf("systemd-analyze security rates %s %.1f, above %.1f", relayUnit, level, maxExposure)
	}
	return nil
}

// command runs a command as root with the test's environment less the
// test unit's INVOCATION_ID, and returns its standard output and error.
func command(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "INVOCATION_ID=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// asRelay runs a command as the relay service's dynamic user, in the way
// docs/deploy.md tells administrators to, and returns its standard output.
func asRelay(args ...string) (string, error) {
	cmd := exec.Command("systemd-run", append([]string{"--wait", "--pipe", "--quiet",
		"-p", "DynamicUser=yes", "-p", "User=commandcore-relay", "-p", "StateDirectory=commandcore-relay", "-p", "StateDirectoryMode=0700", "-p", "UMask=0077"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("systemd-run %s: %w: %s", strings.Join(args, " "), err, oneLine(stderr.String()))
	}
	return string(out), nil
}

// waitRelay waits until the service is active and its port answers, and
// returns its main PID.
func waitRelay() (int, error) {
	var pid int
	err := waitFor(60*time.Second, func() bool {
		state, _ := command("systemctl", "show", "--value", "-p", "ActiveState", relayUnit)
		main, _ := command("systemctl", "show", "--value", "-p", "MainPID", relayUnit)
		pid, _ = strconv.Atoi(strings.TrimSpace(main))
		if strings.TrimSpace(state) != "active" || pid == 0 {
			return false
		}
		conn, err := net.DialTimeout("tcp", "127.0.0.1:443", time.Second)
		if err != nil {
			return false
		}
		conn.Close()
		return true
	})
	if err != nil {
		out, _ := command("journalctl", "-b", "-u", relayUnit, "--no-pager", "-n", "20")
		return 0, fmt.Errorf("the relay never answered on 127.0.0.1:443: %w\n%s", err, out)
	}
	return pid, nil
}

// checkSandbox reads the running relay's credentials from /proc: not root,
// CAP_NET_BIND_SERVICE its one capability, no new privileges, a seccomp
// filter. It returns the service's uid.
func checkSandbox(pid int) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fields := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fields[k] = strings.TrimSpace(v)
	}
	uids := strings.Fields(fields["Uid"])
	if len(uids) == 0 {
		return 0, fmt.Errorf("no Uid in /proc/%d/status", pid)
	}
	uid, _ := strconv.Atoi(uids[0])
	var problems []string
	if uid == 0 || uid < 61184 || uid > 65519 {
		problems = append(problems, fmt.Sprintf("uid %d is not a dynamic user's", uid))
	}
	for _, k := range []string{"CapEff", "CapPrm", "CapBnd", "CapAmb"} {
		v, err := strconv.ParseUint(fields[k], 16, 64)
		if err != nil || v != capNetBindService {
			problems = append(problems, fmt.Sprintf("%s=%s, want CAP_NET_BIND_SERVICE alone (%x)", k, fields[k], capNetBindService))
		}
	}
	if fields["NoNewPrivs"] != "1" {
		problems = append(problems, "NoNewPrivs="+fields["NoNewPrivs"])
	}
	if fields["Seccomp"] != "2" {
		problems = append(problems, "Seccomp="+fields["Seccomp"]+", want 2 (a filter)")
	}
	if len(problems) > 0 {
		return 0, fmt.Errorf("the relay (PID %d): %s", pid, strings.Join(problems, "; "))
	}
	fmt.Printf("relay-service: PID %d runs as uid %d with CapEff=%s NoNewPrivs=1 Seccomp=2\n", pid, uid, fields["CapEff"])
	return uid, nil
}

// checkOwned checks the state directory and everything in it belong to the
// service's uid and are the service's alone: the administration commands
// made nothing root's or anyone else's.
func checkOwned(uid int) error {
	target, err := os.Readlink(relayState)
	if err != nil || target != "private/commandcore-relay" {
		return fmt.Errorf("%s links to %q (%v), want private/commandcore-relay", relayState, target, err)
	}
	entries, err := os.ReadDir(relayState + "/")
	if err != nil {
		return err
	}
	paths := []string{relayState + "/"}
	for _, e := range entries {
		paths = append(paths, relayState+"/"+e.Name())
	}
	for _, p := range paths {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		if int(st.Uid) != uid || st.Mode&0o077 != 0 {
			return fmt.Errorf("%s is uid %d mode %o, want uid %d and no access for others", p, st.Uid, st.Mode&0o7777, uid)
		}
	}
	if len(entries) == 0 {
		return errors.New(relayState + " is empty")
	}
	return nil
}

// relayClient opens an MCP session to the device through the relay.
func relayClient(token string) (*client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := testkit.Connect(ctx, "vmtest", testkit.Relayed(relayURL+"/mcp/"+relayDevice, token), nil)
	if err != nil {
		return nil, fmt.Errorf("connect through the relay: %w", err)
	}
	c := &client{session: s}
	// Until the agent links, calls end device_offline.
	var last error
	if err := waitFor(60*time.Second, func() bool {
		last = c.call("process.jobs", map[string]any{}, nil)
		return last == nil
	}); err != nil {
		c.close()
		return nil, fmt.Errorf("the device never answered through the relay: %v", last)
	}
	return c, nil
}

// relayDeviceState is a line of `relay devices --json`.
type relayDeviceState struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Connected bool       `json:"connected"`
	Standing  string     `json:"standing"`
	LinkedAt  *time.Time `json:"linked_at"`
}

// linkedDevice waits until the relay lists the device connected with a
// link taken after since, and returns it.
func linkedDevice(since time.Time) (*relayDeviceState, error) {
	var got *relayDeviceState
	var last string
	err := waitFor(60*time.Second, func() bool {
		out, err := asRelay(packagedBin, "relay", "devices", "--json", "--state-dir", relayState)
		last = out
		if err != nil {
			last = err.Error()
			return false
		}
		devs, err := testkit.DecodeLines[relayDeviceState]([]byte(out))
		if err != nil || len(devs) != 1 {
			return false
		}
		d := devs[0]
		if d.Name != relayDevice || !d.Connected || d.LinkedAt == nil || !d.LinkedAt.After(since) {
			return false
		}
		got = &d
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("the relay never listed %s linked after %s: %s", relayDevice, since.Format(time.RFC3339Nano), oneLine(last))
	}
	return got, nil
}

// exposure is the running unit's overall level by systemd-analyze security.
func exposure() (float64, error) {
	out, err := command("systemd-analyze", "security", "--no-pager", relayUnit)
	if err != nil {
		return 0, fmt.Errorf("systemd-analyze security: %w\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for ` + regexp.QuoteMeta(relayUnit) + `: ([0-9.]+)`).FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no overall exposure level in:\n%s", out)
	}
	return strconv.ParseFloat(m[1], 64)
}
