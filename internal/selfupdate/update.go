package selfupdate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Refusals: nothing was fetched or replaced.
var (
	// ErrCurrent: the agent runs the version offered already.
	ErrCurrent = errors.New("the agent runs the version its relay offers already")
	// ErrDowngrade: the offer is older, and a downgrade was not asked for.
	ErrDowngrade = errors.New("the relay offers an older version: a downgrade needs --allow-downgrade")
	// ErrNotService: the agent does not run as a user service, so nothing
	// could restart it or bring the previous binary back.
	ErrNotService = errors.New("the agent does not run as a systemd user service (commandcore install)")
	// ErrNotWritable: the binary's directory is not the user's to write
	// (a package installed it): the package manager updates it.
	ErrNotWritable = errors.New("the agent's binary is not in a directory this user may write (installed by a package? update it with the package manager)")
)

// Update is one update of an installed agent.
type Update struct {
	// Server is the relay's URL the agent links to; the binary comes from
	// its /download/.
	Server string
	Offer  Offer
	// Current is the running agent's version.
	Current string
	// Exe is the installed binary the service runs, Service its unit,
	// StateDir the agent's state directory.
	Exe, Service, StateDir string
	// AllowDowngrade lets an older offer through.
	AllowDowngrade bool
	// Client fetches the binary; nil means a client without redirects.
	Client *http.Client
}

// Check refuses an update that must not happen, before anything is
// fetched.
func (u Update) Check() error {
	if !u.Offer.Valid() {
		return errors.New("the relay's offer is malformed")
	}
	if u.Offer.Version == u.Current {
		return ErrCurrent
	}
	if IsDowngrade(u.Current, u.Offer.Version) && !u.AllowDowngrade {
		return ErrDowngrade
	}
	if u.Service == "" {
		return ErrNotService
	}
	if !filepath.IsAbs(u.Exe) {
		return errors.New("the agent's binary has no absolute path")
	}
	if unix.Access(filepath.Dir(u.Exe), unix.W_OK) != nil {
		return ErrNotWritable
	}
	return nil
}

// Apply fetches and verifies the offered binary, puts it in place keeping
// the previous one, records the update as started and starts the watchdog
// unit, which restarts the service and rolls back if the new agent does
// not link. It returns once the watchdog runs; the caller's own agent (if
// it is the agent) is then restarted by it. A failure before the swap
// leaves the installed binary untouched; one after it puts the previous
// binary back.
func (u Update) Apply(ctx context.Context) error {
	if err := u.Check(); err != nil {
		return err
	}
	client := u.Client
	if client == nil {
		client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	next, err := Fetch(ctx, client, u.Server, u.Offer, filepath.Dir(u.Exe))
	if err != nil {
		return err
	}
	if err := Swap(u.Exe, next); err != nil {
		os.Remove(next)
		return err
	}
	if err := WriteRecord(u.StateDir, Record{From: u.Current, To: u.Offer.Version, State: StateStarted, StartedAt: time.Now().UTC()}); err != nil {
		Restore(u.Exe)
		return err
	}
	// The watchdog runs the previous binary: the one known to work here.
	argv := []string{PreviousPath(u.Exe), "update-watchdog", "--service", u.Service, "--exe", u.Exe,
		"--state-dir", u.StateDir, "--from", u.Current, "--to", u.Offer.Version}
	if _, err := startWatchdog(ctx, argv); err != nil {
		Restore(u.Exe)
		end := time.Now().UTC()
		WriteRecord(u.StateDir, Record{From: u.Current, To: u.Offer.Version, State: StateRolledBack, StartedAt: end, EndedAt: &end})
		return fmt.Errorf("%w (the previous binary is back)", err)
	}
	return nil
}
