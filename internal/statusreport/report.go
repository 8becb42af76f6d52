// Package statusreport builds the `commandcore status` report: it verifies
// the agent's runtime record (which also carries the agent's view of its
// user manager) and reads the jobs, the policy and the permission ceiling,
// creating nothing and asking no bus. It sits beside status, which stays a
// leaf the link can import without these packages.
package statusreport

import (
	"github.com/commandcore/commandcore/internal/selfupdate"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobresources"
	"github.com/commandcore/commandcore/internal/jobstore"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/status"
)

// Input says which installation status reports on.
type Input struct {
	StateDir, ConfigDir string
	// Service is the agent's unit name; UnitFile is its unit file, empty
	// when it is not installed.
	Service, UnitFile string
}

// Build verifies the runtime record (PID alive with the recorded start
// ticks and boot ID) and gathers jobs, systemd and policy. The systemd
// facts are the running agent's own (its record), never probed from here:
// this process's environment may not even reach the user bus.
func Build(in Input, procs *procid.Source) *status.Report {
	stateDir := in.StateDir
	r := &status.Report{SchemaVersion: status.SchemaVersion, StateDir: stateDir, ConfigDir: in.ConfigDir,
		Agent: status.Agent{Service: in.Service, Installed: in.UnitFile != "", UnitFile: in.UnitFile}}
	r.Connection.State = status.ConnUnknown
	r.Systemd = status.Systemd{UserManager: status.ManagerUnknown, FailureDomain: status.DomainUnknown}
	// A record of an agent that stopped cleanly says no more than no record.
	if rt, err := status.ReadRuntime(stateDir); err == nil && rt.StoppedAt == nil {
		boot, _ := procs.BootID()
		alive, _ := procs.Alive(procid.Identity{PID: rt.PID, StartTicks: rt.StartTicks})
		if alive && rt.BootID == boot {
			started := rt.StartedAt
			r.Agent.Running, r.Agent.PID, r.Agent.Version, r.Agent.StartedAt, r.Agent.Service = true, rt.PID, rt.Version, &started, rt.Service
			// The record is owned by the reader's user (ReadRuntime), so
			// the agent runs as this process's user.
			uid := os.Geteuid()
			r.Agent.UID = &uid
			c := rt.Connection
			r.Connection = status.ConnectionView{State: c.State, Server: c.Server, ObservedAt: &c.ObservedAt, Since: &c.Since}
			age := int64(time.Since(c.ObservedAt).Seconds())
			r.Connection.AgeSeconds = &age
			r.Systemd.AgentDirsHidden, r.Systemd.RunDirsHidden = rt.AgentDirsHidden, rt.RunDirsHidden
			r.Systemd.AgentBinary = rt.AgentBinary
			if sd := rt.Systemd; sd != nil {
				at := sd.ObservedAt
				r.Systemd.UserManager, r.Systemd.FailureDomain, r.Systemd.ObservedAt = sd.UserManager, sd.FailureDomain, &at
				r.Systemd.CanCutJobs, r.Systemd.CanCutRun = sd.CanCutJobs, sd.CanCutRun
			}
			if o := rt.Offer; o != nil {
				r.Update = &status.Update{Offered: o.Version}
			}
		} else {
			r.Agent.Stale, r.Agent.PID = true, rt.PID
		}
	}
	if last, err := selfupdate.ReadRecord(stateDir); err == nil && last != nil {
		if r.Update == nil {
			r.Update = &status.Update{}
		}
		r.Update.Last = &status.LastUpdate{From: last.From, To: last.To, State: last.State, StartedAt: last.StartedAt, EndedAt: last.EndedAt}
	}
	r.Jobs = countJobs(stateDir, procs)
	if p, err := jobresources.Load(stateDir); err != nil {
		r.Policy.Error = strings.TrimPrefix(err.Error(), jobresources.ErrInvalid.Error()+": ")
	} else {
		if p.MemoryMaxBytes > 0 {
			m := p.MemoryMaxBytes
			r.Policy.MemoryMaxBytes = &m
		}
		if p.CPUWeight > 0 {
			w := p.CPUWeight
			r.Policy.CPUWeight = &w
		}
		n := p.JobNice()
		r.Policy.Nice, r.Policy.NiceDefault = &n, p.Nice == nil
	}
	c, err := authz.LoadCeiling(in.ConfigDir)
	r.Permissions = status.Permissions{Present: c.Present(), Tools: c.Tools()}
	r.Systemd.JobsReachUserManager = c.JobsReachUserManager()
	if err != nil {
		r.Permissions.Error = strings.TrimPrefix(errcode.From(err).Message, "the local permission ceiling is invalid: ")
	}
	return r
}

// countJobs counts live, terminal and unread jobs, and the spares. status only reads: it
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
	// A count it cannot take is left at zero: the jobs still count.
	n.Spares, _ = store.Spares()
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
