package activity

import "time"

// LinkUp records that the link to the server was established.
func (j *Journal) LinkUp() {
	j.Record(Event{Kind: KindLinkUp, Outcome: OutcomeOK})
}

// LinkEnd records how a link ended (reason is one of the Reason words,
// which internal/transport's End shares) and how long it was up.
func (j *Journal) LinkEnd(reason string, up time.Duration) {
	j.Record(LinkEndEvent(Reason(reason), up))
}
