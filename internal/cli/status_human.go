package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/selfupdate"
	"github.com/commandcore/commandcore/internal/status"
)

// writeStatus prints the friendly summary of r.
func writeStatus(w io.Writer, r *status.Report, now time.Time) error {
	var err error
	p := func(format string, args ...any) {
		if err == nil {
			_, err = fmt.Fprintf(w, format, args...)
		}
	}
	p("Agent:       %s\n", agentLine(r, now))
	if u := r.Update; u != nil {
		p("%s", updateText(u, now))
	}
	p("State:       %s\n", r.StateDir)
	p("Config:      %s\n", r.ConfigDir)
	p("Connection:  %s\n", connectionLine(r, now))
	p("Jobs:        %d running, %d finished (%d unread)%s\n", r.Jobs.Running, r.Jobs.Terminal, r.Jobs.Unread, sparesText(r.Jobs.Spares))
	p("systemd:     %s\n", systemdLine(r, now))
	if r.Agent.Running {
		writeIsolation(p, r)
	} else {
		p("Commands:    user manager %s, as permissions.json says (no agent runs)\n", reachLine(r.Systemd.JobsReachUserManager))
	}
	if r.Policy.Error != "" {
		p("Policy:      INVALID (%s): launches are refused\n", r.Policy.Error)
	} else {
		p("Policy:      %s\n", policyLine(r.Policy))
	}
	p("Permissions: %s\n", permissionsLine(r.Permissions))
	return err
}

// agentLine says whether the agent runs, and how.
func agentLine(r *status.Report, now time.Time) string {
	switch {
	case r.Agent.Running:
		as := "not a service"
		if r.Agent.Service != "" {
			as = "as " + r.Agent.Service
		}
		return fmt.Sprintf("running (pid %d, %s, %s), up %s", r.Agent.PID, r.Agent.Version, as, since(now, r.Agent.StartedAt))
	case r.Agent.Stale:
		return fmt.Sprintf("not running (stale record: pid %d ended without stopping)", r.Agent.PID)
	case r.Agent.Installed:
		return fmt.Sprintf("installed, not running (%s; start it with: systemctl --user start %s)", r.Agent.UnitFile, r.Agent.Service)
	}
	return fmt.Sprintf("not installed (no user unit %s)", r.Agent.Service)
}

// connectionLine is the link's state, its server and since when, as the
// agent last saw it.
func connectionLine(r *status.Report, now time.Time) string {
	conn := r.Connection.State
	if r.Connection.Server != "" {
		prep := " to "
		if conn == status.ConnDisconnected {
			prep = " from "
		}
		conn += prep + r.Connection.Server
		if r.Connection.Since != nil {
			conn += " for " + age(now, *r.Connection.Since)
		}
	}
	if r.Connection.ObservedAt != nil {
		conn += fmt.Sprintf(" (as the agent last saw it, %s ago)", age(now, *r.Connection.ObservedAt))
	}
	return conn
}

// systemdLine is the user manager as the running agent last saw it, and
// where new jobs run.
func systemdLine(r *status.Report, now time.Time) string {
	seen := ""
	if r.Systemd.ObservedAt != nil {
		seen = fmt.Sprintf(" (as the agent last saw it, %s ago)", age(now, *r.Systemd.ObservedAt))
	}
	switch {
	case !r.Agent.Running:
		return "unknown (no agent runs to observe it)"
	case r.Systemd.UserManager == status.ManagerUnknown:
		return "unknown (this agent does not record it)"
	case r.Systemd.FailureDomain == status.DomainRefused:
		return fmt.Sprintf("user manager %s; new jobs are refused (an installed agent runs jobs only under it)%s", r.Systemd.UserManager, seen)
	}
	return fmt.Sprintf("user manager %s; new jobs run as %s%s", r.Systemd.UserManager, r.Systemd.FailureDomain, seen)
}

// permissionsLine is the owner's ceiling on tools.
func permissionsLine(perm status.Permissions) string {
	switch {
	case perm.Error != "":
		return fmt.Sprintf("INVALID (%s): every tool call is refused", perm.Error)
	case perm.Present && len(perm.Tools) == 0:
		return "no tool (the ceiling allows none)"
	case perm.Present && slices.Contains(perm.Tools, authz.AllTools):
		return "every tool (permissions.json allows *)"
	case perm.Present:
		return "only " + strings.Join(perm.Tools, ", ")
	}
	return "every tool (no ceiling)"
}

// writeIsolation says what a running agent's commands can reach: what
// holds, never more (README, "What a command can do").
func writeIsolation(p func(string, ...any), r *status.Report) {
	sd := r.Systemd
	who := "this user"
	if r.Agent.UID != nil {
		who = fmt.Sprintf("uid %d", *r.Agent.UID)
	}
	p("Commands:    jobs and process.run commands run as %s and can do what that user can\n", who)
	if r.Agent.UID != nil && *r.Agent.UID == 0 {
		// Only a cut-off unit's user namespace takes root's power to
		// unmount.
		undo := "every job and process.run command"
		if !sd.JobsReachUserManager {
			undo = "process.run commands and jobs without a user manager"
		}
		p("             as root, %s can unmount the covers below\n", undo)
	}
	manager := reachLine(sd.JobsReachUserManager)
	if sd.JobsReachUserManager {
		manager += ": they can start units of their own, outside every cover, and so read the device credential"
	} else {
		manager += ", which see its unit files and configuration read-only; jobs started before keep their reach"
		var refused []string
		if !sd.CanCutJobs && sd.FailureDomain != status.DomainRefused {
			refused = append(refused, "new jobs")
		}
		if !sd.CanCutRun {
			refused = append(refused, "process.run commands")
		}
		if len(refused) > 0 {
			manager += "; REFUSED, as this host cannot cut them off: " + strings.Join(refused, ", ")
		}
	}
	p("             user manager %s\n", manager)
	// A cut-off unit hides them in its own user namespace, which may work
	// where a plain unit's cover does not.
	units := sd.AgentDirsHidden || (!sd.JobsReachUserManager && sd.CanCutJobs && sd.UserManager == status.ManagerReachable)
	var files string
	switch {
	case units && sd.RunDirsHidden:
		files = "covered in job units and process.run commands"
	case units:
		files = "covered in job units; process.run commands and jobs without a user manager CAN read them (this host refuses them a mount namespace)"
	case sd.RunDirsHidden:
		files = "covered in process.run commands and jobs without a user manager; job units CAN read them (this user manager cannot hide directories)"
	default:
		files = "CAN be read by jobs and process.run commands (this host cannot hide directories)"
	}
	if sd.JobsReachUserManager && (units || sd.RunDirsHidden) {
		files += ", against direct reads only"
	}
	p("             agent's files %s\n", files)
	if b := sd.AgentBinary; b != nil {
		p("             agent's binary %s\n", binaryLine(b, sd))
	}
}

// binaryLine says whether jobs and process.run commands can replace the
// agent's binary, which the user manager runs at the agent's next start.
func binaryLine(b *status.AgentBinary, sd status.Systemd) string {
	switch {
	case b.Dir == "":
		return "not found: whether jobs can replace it is unknown"
	case !b.Writable:
		return "in " + b.Dir + ": not this user's to write"
	case b.Shared:
		return "in " + b.Dir + " CAN be replaced by jobs and process.run commands: they need to write that directory, so it stays writable (install the binary in a directory of its own)"
	}
	// A cut-off unit sees it read-only whenever it runs at all.
	units := b.ReadOnlyInJobUnits || (!sd.JobsReachUserManager && sd.CanCutJobs && sd.UserManager == status.ManagerReachable)
	run := b.ReadOnlyInRun || (!sd.JobsReachUserManager && sd.CanCutRun)
	line := "directory " + b.Dir
	switch {
	case units && run:
		line += " read-only in job units and process.run commands"
	case units:
		line += " read-only in job units; process.run commands and jobs without a user manager CAN replace the binary (this host refuses them a mount namespace)"
	case run:
		line += " read-only in process.run commands and jobs without a user manager; job units CAN replace the binary (this user manager cannot make it read-only)"
	default:
		return "in " + b.Dir + " CAN be replaced by jobs and process.run commands (this host cannot make it read-only)"
	}
	if sd.JobsReachUserManager {
		line += ", against direct writes only"
	}
	return line
}

// reachLine says whether new jobs and process.run commands reach the
// user manager, as the owner's permissions.json says.
func reachLine(reach bool) string {
	if reach {
		return "reachable from jobs and process.run commands"
	}
	return "cut off from new jobs and process.run commands (jobs_reach_user_manager false)"
}

func since(now time.Time, t *time.Time) string {
	if t == nil {
		return "?"
	}
	return age(now, *t)
}

func age(now, t time.Time) string {
	d := now.Sub(t).Round(time.Second)
	if d < 0 {
		d = 0
	}
	return d.String()
}

// policyLine says what the owner's job-resources.json imposes on new jobs.
func policyLine(pol status.Policy) string {
	parts := []string{"no memory cap"}
	if pol.MemoryMaxBytes != nil {
		parts[0] = fmt.Sprintf("memory cap %d bytes per job", *pol.MemoryMaxBytes)
	}
	if pol.Nice != nil {
		line := fmt.Sprintf("jobs at nice %d", *pol.Nice)
		if pol.NiceDefault {
			line += " (the default)"
		}
		parts = append(parts, line)
	}
	if pol.CPUWeight != nil {
		parts = append(parts, fmt.Sprintf("job units at CPU weight %d", *pol.CPUWeight))
	}
	return strings.Join(parts, "; ")
}

// sparesText names the supervisors started ahead, which have units of
// their own but no job: nothing when there are none.
func sparesText(n int) string {
	switch n {
	case 0:
		return ""
	case 1:
		return "; 1 spare supervisor waiting for the next job"
	}
	return fmt.Sprintf("; %d spare supervisors waiting for the next job", n)
}

// updateText is the update on offer and how the last update went.
func updateText(u *status.Update, now time.Time) string {
	var b strings.Builder
	if u.Offered != "" {
		fmt.Fprintf(&b, "Update:      %s offered by the relay (outdated; commandcore update installs it)\n", u.Offered)
	}
	if l := u.Last; l != nil {
		what := map[string]string{
			selfupdate.StateStarted:        "under way",
			selfupdate.StateDone:           "done: the new agent linked",
			selfupdate.StateRolledBack:     "rolled back: the new agent did not link in time, the previous binary runs again",
			selfupdate.StateRollbackFailed: "failed, and putting the previous binary back failed too (see docs/updates.md)",
		}[l.State]
		if what == "" {
			what = l.State
		}
		at := l.StartedAt
		if l.EndedAt != nil {
			at = *l.EndedAt
		}
		fmt.Fprintf(&b, "Last update: %s to %s, %s (%s ago)\n", l.From, l.To, what, age(now, at))
	}
	return b.String()
}
