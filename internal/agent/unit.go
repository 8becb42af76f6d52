package agent

import (
	"context"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/procfs"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/status"
)

// ownUnit is the systemd service this process is the agent of, for
// status: the unit its cgroup names, when systemd started it
// (INVOCATION_ID); empty otherwise, so a `make run` agent is not called a
// service because of a --service default.
func ownUnit() string {
	if os.Getenv("INVOCATION_ID") == "" {
		return ""
	}
	p, err := procfs.Self()
	if err != nil {
		return ""
	}
	cgs, err := p.Cgroups()
	if err != nil {
		return ""
	}
	return unitOfCgroups(cgs)
}

// unitOfCgroups is the service named by the last element of the unified
// hierarchy's path, else of systemd's named v1 hierarchy.
func unitOfCgroups(cgs []procfs.Cgroup) string {
	i := slices.IndexFunc(cgs, func(c procfs.Cgroup) bool { return c.HierarchyID == 0 && c.Path != "/" })
	if i < 0 {
		i = slices.IndexFunc(cgs, func(c procfs.Cgroup) bool { return slices.Contains(c.Controllers, "name=systemd") })
	}
	if i < 0 {
		return ""
	}
	if unit := path.Base(cgs[i].Path); strings.HasSuffix(unit, ".service") {
		return unit
	}
	return ""
}

// systemdView is what the agent sees of its user manager now: whether it
// reaches it, the failure domain its next job would get, and whether that
// job and the next process.run command could start cut off from it.
func systemdView(ctx context.Context, svc *jobs.Service) *status.RuntimeSystemd {
	sd := &status.RuntimeSystemd{UserManager: status.ManagerReachable, ObservedAt: time.Now().UTC()}
	domain, err := svc.Domain(ctx)
	switch {
	case err != nil:
		sd.UserManager, sd.FailureDomain = status.ManagerUnreachable, status.DomainRefused
	case domain == jobmeta.DomainSharedParentCgroup:
		sd.UserManager, sd.FailureDomain = status.ManagerUnreachable, domain
	default:
		sd.FailureDomain = domain
	}
	cutJobs, cutRun := svc.CanCutOff(domain)
	sd.CanCutJobs, sd.CanCutRun = cutJobs && err == nil, cutRun
	return sd
}
