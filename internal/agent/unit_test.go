package agent

import (
	"testing"

	"github.com/prometheus/procfs"
)

func TestUnitOfCgroups(t *testing.T) {
	const svc = "/user.slice/user-1000.slice/user@1000.service/app.slice/cc.service"
	for _, tc := range []struct {
		name string
		cgs  []procfs.Cgroup
		want string
	}{
		{"unified", []procfs.Cgroup{{HierarchyID: 0, Path: svc}}, "cc.service"},
		// Hybrid hosts (like these test VMs) may leave the unified path "/".
		{"hybrid", []procfs.Cgroup{{HierarchyID: 4, Controllers: []string{"memory"}, Path: "/x"},
			{HierarchyID: 9, Controllers: []string{"name=systemd"}, Path: svc}, {HierarchyID: 0, Path: "/"}}, "cc.service"},
		{"a login shell", []procfs.Cgroup{{HierarchyID: 0, Path: "/user.slice/user-1000.slice/session-2.scope"}}, ""},
		{"a container root", []procfs.Cgroup{{HierarchyID: 0, Path: "/"}}, ""},
		{"none", nil, ""},
	} {
		if got := unitOfCgroups(tc.cgs); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
