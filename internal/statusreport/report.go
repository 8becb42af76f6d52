// Package statusreport builds the `commandcore status` report: it verifies
// the agent's runtime record and reads the jobs, the user manager, the
// policy and the permission ceiling, creating nothing. It sits beside
// status, which stays a leaf the link can import without these packages.
package statusreport

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobresources"
	"github.com/commandcore/commandcore/internal/jobstore"
	"github.com/commandcore/commandcore/internal/launcher"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/ownerfile"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/status"
)

// readRuntime reads the agent's runtime record; nil when absent or unreadable.
func readRuntime(stateDir string) *status.Runtime {
	data, err := ownerfile.Read(filepath.Join(stateDir, status.RuntimeFile), limits.MaxMetadataBytes, ownerfile.SharedWrite)
	if err != nil {
		return nil
	}
	rt, err := status.DecodeRuntime(data)
	if err != nil {
		return nil
	}
	return rt
}

// Build verifies the runtime record (PID alive with the recorded start
// ticks and boot ID) and gathers jobs, systemd and policy.
func Build(ctx context.Context, stateDir, configDir, service string, procs *procid.Source) *status.Report {
	r := &status.Report{SchemaVersion: status.SchemaVersion, Agent: status.Agent{Service: service}}
	r.Connection.State = status.ConnUnknown
	if rt := readRuntime(stateDir); rt != nil {
		boot, _ := procs.BootID()
		alive, _ := procs.Alive(procid.Identity{PID: rt.PID, StartTicks: rt.StartTicks})
		if alive && rt.BootID == boot {
			started := rt.StartedAt
			r.Agent = status.Agent{Running: true, PID: rt.PID, Version: rt.Version, StartedAt: &started, Service: rt.Service}
			c := rt.Connection
			r.Connection = status.ConnectionView{State: c.State, Server: c.Server, ObservedAt: &c.ObservedAt, Since: &c.Since}
			age := int64(time.Since(c.ObservedAt).Seconds())
			r.Connection.AgeSeconds = &age
			r.Systemd.AgentDirsHidden = rt.AgentDirsHidden
		} else {
			r.Agent.Stale = true
		}
	}
	r.Jobs = countJobs(stateDir, procs)
	l := launcher.New("", false)
	defer l.Close()
	r.Systemd.UserManager = status.ManagerUnreachable
	r.Systemd.FailureDomain = jobmeta.DomainSharedParentCgroup
	if _, err := l.Bus(ctx); err == nil {
		r.Systemd.UserManager = status.ManagerReachable
		r.Systemd.FailureDomain = jobmeta.DomainSystemdUnit
	}
	if p, err := jobresources.Load(stateDir); err != nil {
		r.Policy.Error = strings.TrimPrefix(err.Error(), jobresources.ErrInvalid.Error()+": ")
	} else if p.MemoryMaxBytes > 0 {
		m := p.MemoryMaxBytes
		r.Policy.MemoryMaxBytes = &m
	}
	c, err := authz.LoadCeiling(configDir)
	r.Permissions = status.Permissions{Present: c.Present(), Tools: c.Tools()}
	if err != nil {
		r.Permissions.Error = strings.TrimPrefix(errcode.From(err).Message, "the local permission ceiling is invalid: ")
	}
	return r
}

// countJobs counts live, terminal and unread jobs. status only reads: it
// does not create a job store that is not there (jobstore.Open would).
func countJobs(stateDir string, procs *procid.Source) status.Jobs {
	var n status.Jobs
	if _, err := os.Stat(filepath.Join(stateDir, "jobs")); err != nil {
		return n
	}
	store, err := jobstore.Open(stateDir, procs)
	if err != nil {
		return n
	}
	recs, err := store.List()
	if err != nil {
		return n
	}
	for _, rec := range recs {
		switch {
		case rec.State.Live():
			n.Running++
		case rec.Terminal:
			n.Terminal++
			if !rec.Read {
				n.Unread++
			}
		}
	}
	return n
}
