package agent

// The transport is used in this file only.

import (
	"context"
	"fmt"
	"time"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/enrollment"
	"github.com/commandcore/commandcore/internal/isolation"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/selfupdate"
	"github.com/commandcore/commandcore/internal/status"
	"github.com/commandcore/commandcore/internal/tools"
	"github.com/commandcore/commandcore/internal/transport"
	"github.com/commandcore/commandcore/internal/version"
)

// ParseServers reads --server: one URL, or the comma-separated URLs of the
// server's replicas.
func ParseServers(list string) ([]string, error) { return transport.ParseServers(list) }

// serverLink is the device's link to its server: none until the device is
// enrolled, then one, kept up until the agent stops. Only Run's goroutine
// uses it.
type serverLink struct {
	svc       *jobs.Service
	rt        *runtimeRecord
	stateDir  string
	configDir string
	// servers, when set, replace the enrolled ones.
	servers []string
	started bool
	// done is closed once the started link has ended.
	done chan struct{}
	// updates hears the relay's update offers.
	updates *updater
	// startedAt is when this agent started: its first link after it is
	// noted for an update's watchdog.
	startedAt time.Time
}

// start keeps a link up for id until ctx ends.
func (l *serverLink) start(ctx context.Context, id *enrollment.Credential) error {
	servers := id.ServerList()
	if len(l.servers) > 0 {
		servers = l.servers
	}
	serve, err := linkServer(l.svc, id, l.stateDir, l.configDir, l.isolation)
	if err != nil {
		return err
	}
	l.started = true
	l.done = make(chan struct{})
	go func() {
		defer close(l.done)
		transport.Run(ctx, transport.Config{Servers: servers, Token: id.Token, PreviousToken: id.PreviousToken,
			Secret: id.Secret, Serve: serve, Journal: l.svc.Journal(), OnState: l.onState, OnServer: l.rt.setServer,
			Link: transport.Options{Offer: l.updates.offered},
			SaveToken: func(token, previous string) error {
				return enrollment.SaveToken(l.configDir, id.DeviceID, token, previous)
			}})
	}()
	return nil
}

// onState records the link's state. A link up forgets the last link's
// offer (the relay makes its own on each link) and notes, for an update's
// watchdog, that this version linked.
func (l *serverLink) onState(state string, at time.Time) {
	if state == status.ConnConnected {
		l.rt.setOffer(nil)
		selfupdate.NoteLinked(l.stateDir, version.Version, l.startedAt)
	}
	l.rt.setConnection(state, at)
}

// pickUp starts the link for an enrollment made while the agent runs,
// without a restart.
func (l *serverLink) pickUp(ctx context.Context) {
	if l.started {
		return
	}
	if id, err := enrollment.Load(l.configDir); err == nil {
		l.start(ctx, id)
	}
}

// wait returns once the link, if one was started, has ended.
func (l *serverLink) wait() {
	if l.started {
		<-l.done
	}
}

// linkServer returns what serves MCP over each live link: the tools, each
// call checked against the server's grant and the owner's ceiling, and
// what report says at that link's start of how jobs are kept from the
// agent. One gate serves every link, so a grant used on one is used.
func linkServer(svc *jobs.Service, id *enrollment.Credential, stateDir, configDir string, report func() isolation.Report) (func(context.Context, *transport.Conn) error, error) {
	key, err := id.PublicKey()
	if err != nil {
		return nil, err
	}
	gate := authz.RemoteGate(configDir, id.DeviceID, key, authz.NewUsedGrants(), time.Now)
	return func(ctx context.Context, conn *transport.Conn) error {
		srv, err := tools.NewServer(svc, stateDir, configDir, gate, report())
		if err != nil {
			return fmt.Errorf("serve link: %w", err)
		}
		ss, err := srv.Connect(ctx, conn, nil)
		if err != nil {
			return fmt.Errorf("serve link: %w", err)
		}
		return ss.Wait()
	}, nil
}

// isolation is what the relay is told at a link's start: how jobs meet
// the agent's binary, and whether the owner's cut from the user manager
// holds, as the agent last saw its manager. A policy that cannot be read
// counts as asking for the cut, which is what the launches take it for.
func (l *serverLink) isolation() isolation.Report {
	cut, err := authz.JobsCutOff(l.configDir)()
	return l.rt.isolation(cut || err != nil)
}
