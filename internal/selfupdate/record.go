package selfupdate

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/commandcore/commandcore/internal/atomicfile"
	"github.com/commandcore/commandcore/internal/strictjson"
)

// The files an update keeps in the agent's state directory.
const (
	// RecordFile is the last update: what it went from and to, and how it
	// ended.
	RecordFile = "update.json"
	// LinkedFile is written by the agent each time its link comes up, with
	// its version: what the watchdog waits for.
	LinkedFile = "linked.json"
)

// The states of an update.
const (
	// StateStarted: the new binary is in place and the watchdog restarts
	// the service.
	StateStarted = "started"
	// StateDone: the new agent linked in time.
	StateDone = "done"
	// StateRolledBack: it did not; the previous binary runs again.
	StateRolledBack = "rolled_back"
	// StateRollbackFailed: it did not, and putting the previous binary
	// back failed too.
	StateRollbackFailed = "rollback_failed"
)

// Record is the last update, as `commandcore status` shows it.
type Record struct {
	From      string     `json:"from"`
	To        string     `json:"to"`
	State     string     `json:"state"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
}

// Linked is the agent's note that its link came up.
type Linked struct {
	Version string    `json:"version"`
	At      time.Time `json:"at"`
}

// maxFileBytes bounds the files read back.
const maxFileBytes = 4 << 10

// ReadRecord reads the last update's record; nil when there was none.
func ReadRecord(stateDir string) (*Record, error) {
	var r Record
	if err := readJSON(filepath.Join(stateDir, RecordFile), &r); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	return &r, nil
}

// WriteRecord replaces the last update's record.
func WriteRecord(stateDir string, r Record) error {
	if err := atomicfile.WriteJSON(filepath.Join(stateDir, RecordFile), r); err != nil {
		return fmt.Errorf("write the update record: %w", err)
	}
	return nil
}

// NoteLinked records that the agent of version linked now; it rewrites
// the file only when that says something new to a watchdog (another
// version, or the first link of this agent process: at is its start).
func NoteLinked(stateDir, version string, at time.Time) error {
	var cur Linked
	if readJSON(filepath.Join(stateDir, LinkedFile), &cur) == nil && cur.Version == version && !cur.At.Before(at) {
		return nil
	}
	return atomicfile.WriteJSON(filepath.Join(stateDir, LinkedFile), Linked{Version: version, At: time.Now().UTC()})
}

// readLinked reads the agent's last link note.
func readLinked(stateDir string) (Linked, error) {
	var l Linked
	err := readJSON(filepath.Join(stateDir, LinkedFile), &l)
	return l, err
}

func readJSON(path string, v any) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return err
	}
	return strictjson.Decode(data, v, maxFileBytes, strictjson.AllowUnknownFields)
}
