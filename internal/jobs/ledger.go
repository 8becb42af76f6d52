package jobs

// ledger holds what a launch has acquired. Each resource enters it the
// moment it exists; on failure everything is released in reverse order of
// acquisition (unit, pipe, admission slot), so every failure path releases
// the same things the same way.
type ledger struct {
	entries []ledgerEntry
}

type ledgerEntry struct {
	name    string
	release func()
}

func (l *ledger) add(name string, release func()) {
	l.entries = append(l.entries, ledgerEntry{name, release})
}

// releaseAll releases every entry, newest first, and empties the ledger.
func (l *ledger) releaseAll() []string {
	var order []string
	for i := len(l.entries) - 1; i >= 0; i-- {
		l.entries[i].release()
		order = append(order, l.entries[i].name)
	}
	l.entries = nil
	return order
}
