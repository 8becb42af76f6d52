package relay

import (
	"time"

	"github.com/commandcore/commandcore/internal/relay/store"
)

// watchLinks keeps the links this process holds honest, for all of them
// at once: every StandingPoll it checks the standings of the devices it
// holds links for and ends the links of devices revoked, compromised or
// deleted by another process (standingEnds); every SeenEvery it records
// that the linked devices were seen (a live link has carried a frame
// within the silence timeout), so last-seen stays honest even if this
// relay dies without marking them gone. One watcher for the whole relay,
// not one per link, and an idle relay's check reads one integer: with
// thousands of links the per-link poll was most of an idle relay's CPU,
// and then the standings of every device read each second was
// (BENCHMARKS.md, relay capacity). It runs until Close.
func (s *Server) watchLinks() {
	every := s.SeenEvery
	if every <= 0 {
		every = lastSeenEvery
	}
	seen := time.NewTicker(every)
	defer seen.Stop()
	standing := time.NewTicker(StandingPoll)
	defer standing.Stop()
	var w watchState
	for {
		select {
		case <-s.stopWatch:
			return
		case <-seen.C:
			if ids := s.linkedDevices(); len(ids) > 0 {
				s.store.SetSeen(ids, s.Now())
			}
		case <-standing.C:
			for id, why := range s.standingEnds(&w) {
				s.endDevice(id, why)
			}
		}
	}
}

// linkedDevices returns the IDs of the devices with a live link here.
func (s *Server) linkedDevices() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.links))
	for id := range s.links {
		ids = append(ids, id)
	}
	return ids
}

// watchState is what the link watcher knows from its last reading of the
// standings.
type watchState struct {
	read bool
	// changes is the store's standing-change counter, and holds the
	// relay's count of links taken, when the standings were last read.
	changes int64
	holds   uint64
}

// standingEnds returns the devices holding a link here that may no
// longer link, each with why: "gone" from the database, or a standing
// other than active. It reads every device's standing only when the
// store's standing-change counter moved or a link was taken since its
// last reading (w), and otherwise that counter alone: what the last
// reading decided still holds for every device it saw, and a device
// linked since was authenticated before its link was taken, so a later
// change to its standing moves the counter. The counter is read before
// the standings, so a change between the two is read again next time. A
// database that cannot answer ends no link.
func (s *Server) standingEnds(w *watchState) map[string]string {
	s.mu.Lock()
	holds := s.holds
	held := make([]string, 0, len(s.held))
	for id := range s.held {
		held = append(held, id)
	}
	s.mu.Unlock()
	if len(held) == 0 {
		return nil
	}
	changes, err := s.store.StandingChanges()
	if err != nil || w.read && changes == w.changes && holds == w.holds {
		return nil
	}
	all, err := s.store.Standings()
	if err != nil {
		return nil
	}
	*w = watchState{read: true, changes: changes, holds: holds}
	standing := make(map[string]string, len(all))
	for _, d := range all {
		standing[d.ID] = d.Standing
	}
	ends := map[string]string{}
	for _, id := range held {
		st, ok := standing[id]
		switch {
		case !ok:
			ends[id] = "gone"
		case st != store.StandingActive:
			ends[id] = st
		}
	}
	return ends
}
