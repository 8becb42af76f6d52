package termscreen

import (
	"bytes"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/commandcore/commandcore/internal/atomicfile"
	"github.com/commandcore/commandcore/internal/capture"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/terminal"
)

// readBytes is how much of the capture one read takes.
const readBytes = 16 << 10

// Follower feeds a terminal what a job writes to its stdout capture.
type Follower struct {
	mu   sync.Mutex
	term *Terminal
	f    *os.File
	// fed is how much of the stream the terminal has been fed (or
	// skipped).
	fed  int64
	buf  []byte
	stop chan struct{}
	done chan struct{}
}

// Follow follows the capture at path, the stdout of a job on a terminal
// of size, until Close.
func Follow(path string, size terminal.Size) (*Follower, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open capture: %w", err)
	}
	fl := &Follower{term: New(size), f: f, buf: make([]byte, readBytes), stop: make(chan struct{}), done: make(chan struct{})}
	go fl.run()
	return fl, nil
}

// run feeds the terminal every limits.ScreenFollowInterval until Close.
// Once output pauses after some was fed, the memory the emulator's work
// left behind goes back to the system: the emulator allocates as it
// draws, and a supervisor otherwise keeps the pages its heap grew to.
func (fl *Follower) run() {
	defer close(fl.done)
	t := time.NewTicker(limits.ScreenFollowInterval)
	defer t.Stop()
	var pause pauses
	for {
		select {
		case <-fl.stop:
			return
		case <-t.C:
			fl.mu.Lock()
			before := fl.fed
			fl.catchUp()
			after := fl.fed
			fl.mu.Unlock()
			if pause.tick(before, after) {
				debug.FreeOSMemory()
			}
		}
	}
}

// pauses tells the ticks at which output paused after some was fed.
type pauses struct{ fedSince bool }

// tick reports whether a tick that moved fed from before to after is the
// first without output since one with.
func (p *pauses) tick(before, after int64) bool {
	if after != before {
		p.fedSince = true
		return false
	}
	paused := p.fedSince
	p.fedSince = false
	return paused
}

// catchUp feeds the terminal what the capture holds past fed. Past a flood
// (more than limits.ScreenFloodBytes since the last feed) only the last
// limits.ScreenResyncBytes are fed, from a line's start where there is
// one, and bytes the capture dropped are skipped: the screen then shows the
// end of the output as a terminal would, less what the skipped bytes would
// have changed that later ones did not redraw.
func (fl *Follower) catchUp() error {
	m, err := capture.ReadMeta(fl.f)
	if err != nil {
		return err
	}
	resync := false
	if m.ObservedBytes-fl.fed > limits.ScreenFloodBytes {
		to := m.ObservedBytes - limits.ScreenResyncBytes
		if err := fl.skip(to); err != nil {
			return err
		}
		resync = true
	}
	for fl.fed < m.ObservedBytes {
		p, _, err := capture.ReadPageInto(fl.f, fl.fed, fl.buf)
		if err != nil {
			return err
		}
		if len(p.Data) == 0 {
			break
		}
		data := p.Data
		if resync || p.Gap != nil {
			// Mid-stream, a line's start is where a sequence cannot be
			// half over.
			if i := bytes.IndexByte(data, '\n'); i >= 0 {
				data = data[i+1:]
			}
			resync = false
		}
		fl.term.Write(data)
		fl.fed = p.NextOffset
	}
	return nil
}

// skip moves fed to offset without feeding the terminal what lies
// between, except whether it left the alternate screen on or off: a
// full-screen program's flood must not make its screen read as the main
// one.
func (fl *Follower) skip(offset int64) error {
	var alt altScan
	for fl.fed < offset {
		p, _, err := capture.ReadPageInto(fl.f, fl.fed, fl.buf[:min(int64(len(fl.buf)), offset-fl.fed)])
		if err != nil {
			return err
		}
		if len(p.Data) == 0 {
			break
		}
		alt.scan(p.Data, p.Gap != nil)
		fl.fed = p.NextOffset
	}
	fl.fed = offset
	switch alt.last {
	case 'h':
		fl.term.WriteString(altScreenOn)
	case 'l':
		fl.term.WriteString(altScreenOff)
	}
	return nil
}

// Resize resizes the terminal, once it has been fed what the job wrote at
// the old size.
func (fl *Follower) Resize(size terminal.Size) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	fl.catchUp()
	fl.term.Resize(size)
}

// Screen returns the screen once the terminal has been fed all the capture
// holds.
func (fl *Follower) Screen() (jobmeta.Screen, error) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if err := fl.catchUp(); err != nil {
		return jobmeta.Screen{}, fmt.Errorf("read capture: %w", err)
	}
	s := fl.term.Screen()
	s.Offset = fl.fed
	return s, nil
}

// Publish writes the current screen to path.
func (fl *Follower) Publish(path string) error {
	s, err := fl.Screen()
	if err != nil {
		return err
	}
	if err := atomicfile.WriteJSON(path, &s); err != nil {
		return fmt.Errorf("write screen: %w", err)
	}
	return nil
}

// Close stops following and releases the capture and the terminal.
func (fl *Follower) Close() {
	select {
	case <-fl.stop:
		return
	default:
	}
	close(fl.stop)
	<-fl.done
	fl.f.Close()
	fl.term.Close()
}
