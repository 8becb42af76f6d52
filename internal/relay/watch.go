package relay

import (
	"time"

	"github.com/commandcore/commandcore/internal/relaystate"
)

// watchLinks keeps the links this process holds honest, for all of them
// at once: every StandingPoll it reads every device's standing in one
// query and ends the links of devices revoked, compromised or deleted by
// another process; every SeenEvery it records that the linked devices were
// seen (a live link has carried a frame within the silence timeout), so
// last-seen stays honest even if this relay dies without marking them
// gone. One query a second for the whole relay, not one per link: with
// thousands of links the per-link poll was most of an idle relay's CPU
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
	for {
		select {
		case <-s.stopWatch:
			return
		case <-seen.C:
			if ids := s.linkedDevices(); len(ids) > 0 {
				s.store.SetSeen(ids, s.Now())
			}
		case <-standing.C:
			s.checkStanding()
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

// checkStanding ends the links of devices that may no longer link: gone
// from the database, or no longer active. A database that cannot answer
// ends no link.
func (s *Server) checkStanding() {
	linked := s.linkedDevices()
	if len(linked) == 0 {
		return
	}
	all, err := s.store.Standings()
	if err != nil {
		return
	}
	standing := make(map[string]string, len(all))
	for _, d := range all {
		standing[d.ID] = d.Standing
	}
	for _, id := range linked {
		st, ok := standing[id]
		switch {
		case !ok:
			s.endDevice(id, "gone")
		case st != relaystate.StandingActive:
			s.endDevice(id, st)
		}
	}
}
