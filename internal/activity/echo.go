package activity

import (
	"io"
	"sync"
)

// echo is where the writer also prints each event, one Format line: the
// agent's log. Lines are built from sanitised events only, so the log is as
// content-free as the journal.
type echo struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
}

// Echo makes the journal's writer print every event it writes (or fails to)
// to w as a Format line after prefix, except launch phases that went well:
// the tool call they belong to says that. A nil w stops the echo. The
// printing happens on the writer goroutine, so Record still never blocks.
func (j *Journal) Echo(w io.Writer, prefix string) {
	if j == nil {
		return
	}
	j.echo.mu.Lock()
	defer j.echo.mu.Unlock()
	j.echo.w = w
	j.echo.prefix = prefix
}

// print echoes a written batch.
func (j *Journal) print(batch []Event) {
	j.echo.mu.Lock()
	defer j.echo.mu.Unlock()
	if j.echo.w == nil {
		return
	}
	for _, e := range batch {
		if e.Kind == KindLaunchPhase && e.Outcome == OutcomeOK {
			continue
		}
		io.WriteString(j.echo.w, j.echo.prefix+Format(e)+"\n")
	}
}
