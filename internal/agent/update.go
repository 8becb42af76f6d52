package agent

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/commandcore/commandcore/internal/activity"
	"github.com/commandcore/commandcore/internal/selfupdate"
	"github.com/commandcore/commandcore/internal/status"
	"github.com/commandcore/commandcore/internal/transport"
	"github.com/commandcore/commandcore/internal/version"
)

// updater hears the relay's update offers: it records each for status
// and, when the relay asks for the update (its policy is auto, or a
// person pressed Update), makes it, one at a time.
type updater struct {
	ctx      context.Context
	journal  *activity.Journal
	rt       *runtimeRecord
	exe      string
	stateDir string

	mu      sync.Mutex
	running bool
}

// offered is the link's Options.Offer: it runs on the link's reader, so
// the update itself runs apart.
func (u *updater) offered(o transport.Offer) {
	offer := selfupdate.Offer{Version: o.Version, SHA256: o.SHA256, Name: o.Name}
	if !offer.Valid() {
		return
	}
	u.rt.setOffer(&status.RuntimeOffer{Version: o.Version, SHA256: o.SHA256, Name: o.Name, ReceivedAt: time.Now().UTC()})
	if !o.Apply {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.running {
		return
	}
	u.running = true
	go func() {
		defer func() {
			u.mu.Lock()
			u.running = false
			u.mu.Unlock()
		}()
		u.apply(offer)
	}()
}

// apply makes the update the relay asked for. It never downgrades, and
// never tries again a version that was rolled back here: only a person
// with `commandcore update` does that.
func (u *updater) apply(o selfupdate.Offer) {
	if last, err := selfupdate.ReadRecord(u.stateDir); err == nil && last != nil && last.To == o.Version &&
		(last.State == selfupdate.StateRolledBack || last.State == selfupdate.StateRollbackFailed) {
		return
	}
	up := selfupdate.Update{Server: u.rt.server(), Offer: o, Current: version.Version, Exe: u.exe, Service: ownUnit(), StateDir: u.stateDir}
	u.journal.Record(UpdateEvent(up.Apply(u.ctx)))
}

// UpdateEvent is the journal's entry for an update's start: started, or
// refused before anything was fetched, or failed with the installed
// binary as it was.
func UpdateEvent(err error) activity.Event {
	e := activity.Event{Kind: activity.KindUpdate, Reason: activity.ReasonUpdateStarted, Outcome: activity.OutcomeOK}
	switch {
	case err == nil:
	case errors.Is(err, selfupdate.ErrCurrent), errors.Is(err, selfupdate.ErrDowngrade),
		errors.Is(err, selfupdate.ErrNotService), errors.Is(err, selfupdate.ErrNotWritable):
		e.Reason, e.Outcome = activity.ReasonUpdateRefused, activity.OutcomeFailed
	default:
		e.Reason, e.Outcome = activity.ReasonUpdateFailed, activity.OutcomeFailed
	}
	return e
}
