package cli

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"path/filepath"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/access"
	"github.com/commandcore/commandcore/internal/activity"
	"github.com/commandcore/commandcore/internal/grant"
	"github.com/commandcore/commandcore/internal/identity"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/principal"
	"github.com/commandcore/commandcore/internal/status"
	"github.com/commandcore/commandcore/internal/tools"
	"github.com/commandcore/commandcore/internal/transport"
	"github.com/commandcore/commandcore/internal/version"
)

// reconcileEvery is how often the agent looks at every job, so losses are
// classified (and journalled) even when no client asks.
const reconcileEvery = 10 * time.Second

func newAgentCmd(g *globalFlags) *cobra.Command {
	var installed bool
	var server string
	every := reconcileEvery
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the agent (installed as a systemd user service)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if server != "" {
				if _, err := transport.AgentURL(server); err != nil {
					return usageError("--server: %v", err)
				}
			}
			if every <= 0 {
				return usageError("--reconcile-every must be positive")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), unix.SIGINT, unix.SIGTERM)
			defer stop()
			svc, err := openService(g, installed || runningAsService())
			if err != nil {
				return err
			}
			defer svc.Close()
			self, err := svc.Procs.Self()
			if err != nil {
				return fmt.Errorf("own identity: %w", err)
			}
			boot, err := svc.Procs.BootID()
			if err != nil {
				return fmt.Errorf("boot id: %w", err)
			}
			dirs, err := g.dirs()
			if err != nil {
				return err
			}
			// Without an identity the agent manages jobs locally and says
			// it is not enrolled.
			id, err := identity.Load(dirs.Config)
			if err != nil && !errors.Is(err, identity.ErrNotEnrolled) {
				return err
			}
			hidden := svc.HideOwnDirs(ctx, dirs.Config)
			now := time.Now().UTC()
			rt := &runtimeRecord{path: filepath.Join(svc.StateDir, status.RuntimeFile), rt: status.Runtime{
				Schema: status.RuntimeSchema, PID: self.PID, StartTicks: self.StartTicks, BootID: boot,
				Version: version.Version, StartedAt: now, Service: g.serviceName(),
				Connection:      status.Connection{State: status.ConnNotEnrolled, ObservedAt: now, Since: now},
				AgentDirsHidden: hidden,
			}}
			if err := rt.write(); err != nil {
				return err
			}
			svc.Journal.Record(activity.Event{Kind: activity.KindAgentStart, Outcome: activity.OutcomeOK})
			// READY only now: state and journal are open, jobs reconciled.
			ends := &endWatch{live: map[string]bool{}}
			ends.observe(svc)
			daemon.SdNotify(false, daemon.SdNotifyReady)

			var watchdog <-chan time.Time
			if d, err := daemon.SdWatchdogEnabled(false); err == nil && d > 0 {
				t := time.NewTicker(d / 2)
				defer t.Stop()
				watchdog = t.C
			}
			tick := time.NewTicker(every)
			defer tick.Stop()
			// linkDone is closed once the link (if any) has ended.
			linkDone := make(chan struct{})
			linked := false
			startLink := func(id *identity.Identity) error {
				if server != "" {
					id.Server = server
				}
				serve, err := linkServer(svc, id, dirs.Config)
				if err != nil {
					return err
				}
				linked = true
				rt.setServer(id.Server)
				go func() {
					defer close(linkDone)
					transport.Run(ctx, transport.Config{Server: id.Server, Token: id.Token, PreviousToken: id.PreviousToken,
						Secret: id.Secret, Serve: serve, Journal: svc.Journal, OnState: rt.setConnection,
						SaveToken: func(token, previous string) error {
							return identity.SaveToken(dirs.Config, id.DeviceID, token, previous)
						}})
				}()
				return nil
			}
			if id != nil {
				if err := startLink(id); err != nil {
					return err
				}
			}
			for {
				select {
				case <-ctx.Done():
					daemon.SdNotify(false, daemon.SdNotifyStopping)
					if linked {
						<-linkDone
					}
					svc.Journal.Record(activity.Event{Kind: activity.KindAgentStop, Outcome: activity.OutcomeOK})
					return nil
				case <-watchdog:
					daemon.SdNotify(false, daemon.SdNotifyWatchdog)
				case <-tick.C:
					ends.observe(svc)
					rt.observe()
					// An enrollment made while the agent runs is picked up
					// here, without a restart.
					if !linked {
						if id, err := identity.Load(dirs.Config); err == nil {
							startLink(id)
						}
					}
				}
			}
		},
	}
	cmd.Flags().StringVar(&server, "server", "", "the server's URL (default: the one enrolled with)")
	cmd.Flags().BoolVar(&installed, "installed", false, "behave as an installed service: refuse jobs outside the systemd user manager")
	cmd.Flags().DurationVar(&every, "reconcile-every", reconcileEvery, "how often to look at every job")
	cmd.Flags().MarkHidden("reconcile-every")
	return cmd
}

// endWatch journals each job's end once: a job the agent saw live and now
// sees terminal.
type endWatch struct {
	live map[string]bool
}

func (w *endWatch) observe(svc *jobs.Service) {
	recs, err := svc.List(principal.Local)
	if err != nil {
		return
	}
	now := make(map[string]bool, len(recs))
	for _, r := range recs {
		switch {
		case r.State.Live():
			now[r.ProcessID] = true
		case r.Terminal && w.live[r.ProcessID]:
			svc.Journal.Record(activity.JobEndEvent(r.ProcessID, r.State))
		}
	}
	w.live = now
}

// runtimeRecord is the agent's runtime record, written whenever what it
// says changes; the link reports from its own goroutine.
type runtimeRecord struct {
	path string
	mu   sync.Mutex
	rt   status.Runtime
}

func (r *runtimeRecord) write() error {
	if err := jobmeta.WriteAtomic(r.path, &r.rt); err != nil {
		return fmt.Errorf("write runtime record: %w", err)
	}
	return nil
}

// observe refreshes when the agent last looked at its connection.
func (r *runtimeRecord) observe() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rt.Connection.ObservedAt = time.Now().UTC()
	r.write()
}

// setServer names the server the link goes to.
func (r *runtimeRecord) setServer(server string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rt.Connection.Server = server
}

func (r *runtimeRecord) setConnection(state string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &r.rt.Connection
	if c.State != state {
		c.State, c.Since = state, at
	}
	c.ObservedAt = at
	r.write()
}

// linkServer returns what serves MCP over each live link: the tools, each
// call checked against the server's grant and the owner's ceiling.
func linkServer(svc *jobs.Service, id *identity.Identity, configDir string) (func(context.Context, *transport.Conn) error, error) {
	key, err := id.PublicKey()
	if err != nil {
		return nil, err
	}
	host, err := tools.NewHost("/proc", svc.StateDir, configDir)
	if err != nil {
		return nil, err
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "commandcore", Version: version.Version}, nil)
	tools.Register(srv, svc, host, access.Remote(configDir, id.DeviceID, key, grant.NewUsed(0), time.Now))
	return func(ctx context.Context, conn *transport.Conn) error {
		ss, err := srv.Connect(ctx, conn, nil)
		if err != nil {
			return fmt.Errorf("serve link: %w", err)
		}
		return ss.Wait()
	}, nil
}
