package selfupdate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A link note of another version is always news to a watchdog, whatever
// the times say: the previous agent linking again after a rollback.
func TestNoteLinkedRewritesAnotherVersion(t *testing.T) {
	dir := t.TempDir()
	if err := NoteLinked(dir, "1.2.0", time.Now()); err != nil {
		t.Fatal(err)
	}
	first, _ := readLinked(dir)
	if err := NoteLinked(dir, "1.1.0", first.At.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if l, err := readLinked(dir); err != nil || l.Version != "1.1.0" || l.At.Before(first.At) {
		t.Errorf("after the previous agent linked: %+v, %v", l, err)
	}
}

// The files an update keeps are read back up to 4 KiB: a record of
// exactly 4096 bytes is read, one of 4097 is refused.
func TestRecordIsReadUpTo4KiB(t *testing.T) {
	dir := t.TempDir()
	const head, tail = `{"from": "1.1.0", "to": "1.2.0", "state": "done", "started_at": "2024-05-01T10:00:00Z", "note": "`, `"}`
	for size, ok := range map[int]bool{4096: true, 4097: false} {
		doc := head + strings.Repeat("x", size-len(head)-len(tail)) + tail
		if err := os.WriteFile(filepath.Join(dir, RecordFile), []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := ReadRecord(dir)
		if ok && (err != nil || r == nil || r.State != StateDone || r.To != "1.2.0") {
			t.Errorf("a record of %d bytes: %+v, %v", size, r, err)
		}
		if !ok && err == nil {
			t.Errorf("a record of %d bytes was read: %+v", size, r)
		}
	}
	if r, err := ReadRecord(t.TempDir()); r != nil || err != nil {
		t.Errorf("no record: %+v, %v", r, err)
	}
}
