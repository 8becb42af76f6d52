package testkit

import (
	"os/exec"
	"syscall"
	"testing"
)

// SkipWithoutUserNamespaces skips t on a host that refuses uid a user
// namespace of its own (a sysctl such as user.max_user_namespaces=0, or
// AppArmor's restriction of unprivileged ones). The caller must be root
// to start a process as uid; without unshare(1) nothing is checked.
func SkipWithoutUserNamespaces(t *testing.T, uid uint32) {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return
	}
	probe := exec.Command(unshare, "--user", "/bin/true")
	probe.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	if out, err := probe.CombinedOutput(); err != nil {
		t.Skipf("this host refuses uid %d a user namespace: %v %s", uid, err, out)
	}
}
