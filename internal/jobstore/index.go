package jobstore

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/atomicfile"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/strictjson"
)

// indexFile keeps what admission and retention need of the jobs that can
// no longer change, so a launch does not re-derive every job on disk. It
// is a cache: it is rebuilt from the directories when missing or
// unreadable, an entry counts only while its directory exists, and only
// jobs whose end is on disk (the supervisor's result.json, or the agent's
// reconciled.json) enter it. Its name is not a job ID, so listings skip it.
const indexFile = ".index.json"

// indexSchema is the index format this build writes and reads; another
// one is rebuilt.
const indexSchema = 3

// maxIndexBytes bounds the index read; a full table's is a few tens of KiB.
const maxIndexBytes = 4 << 20

// index maps a job ID to its final facts.
type index struct {
	Schema int                   `json:"schema"`
	Jobs   map[string]indexEntry `json:"jobs"`
}

// indexEntry is what a final job contributes to admission, retention and
// listings: its summary, whose Read can only go from false to true (a
// false is checked against read.json before it is relied on), and when it
// ended.
type indexEntry struct {
	jobmeta.Summary
	EndedAt     time.Time            `json:"ended_at"`
	Idempotency *jobmeta.Idempotency `json:"idempotency,omitempty"`
}

// indexCache keeps the index last decoded and the identity of the file it
// came from, so a listing decodes it again only after it changed: the
// index is replaced by a rename (a new inode) and anything else that
// writes it changes its size or times. Were a change ever missed, the
// stale index would still hold only facts of final jobs, which do not
// change (a read mark it lacks is checked on disk, a job it lacks is
// derived, one it has counts only while its directory exists).
type indexCache struct {
	mu  sync.Mutex
	key fileKey
	idx *index
	// pending are the final jobs this process derived since it last
	// wrote the index: written once there are indexPending of them, so a
	// launch into a full table does not rewrite the index each time one
	// more job ended. Facts of final jobs, they stay true.
	pending map[string]indexEntry
}

// indexPending is how many final jobs a process keeps to itself before it
// rewrites the index (Store.IndexEvery, when set, says otherwise); a
// process that starts without them derives each once.
const indexPending = 16

// fileKey tells one version of a file from another.
type fileKey struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

// readIndex returns the index, or an empty one when it is missing, corrupt
// or of another schema. The index returned may be shared: callers only
// read it.
func (s *Store) readIndex() *index {
	empty := &index{Schema: indexSchema, Jobs: map[string]indexEntry{}}
	f, err := os.Open(filepath.Join(s.root, indexFile))
	if err != nil {
		return empty
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Size > maxIndexBytes {
		return empty
	}
	key := fileKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
	s.indexCache.mu.Lock()
	defer s.indexCache.mu.Unlock()
	if s.indexCache.idx != nil && s.indexCache.key == key {
		return s.indexCache.idx
	}
	// A file grown since the Fstat reads one byte past the bound, which
	// the decoder refuses.
	data, err := io.ReadAll(io.LimitReader(f, maxIndexBytes+1))
	if err != nil {
		return empty
	}
	var idx index
	if strictjson.Decode(data, &idx, maxIndexBytes) != nil || idx.Schema != indexSchema || idx.Jobs == nil {
		return empty
	}
	for id, e := range idx.Jobs {
		if !jobmeta.ValidID(id) || e.ProcessID != id || !e.State.Terminal() || !e.Terminal {
			return empty
		}
	}
	s.indexCache.key, s.indexCache.idx = key, &idx
	return &idx
}

// entryOf is the index entry of a final job's record.
func entryOf(r *jobmeta.Record) indexEntry {
	return indexEntry{Summary: r.Summary(), EndedAt: endTime(r), Idempotency: r.Idempotency}
}

// indexed returns the index entry of job id (or a pending one) with its
// read mark brought up to date, and whether there is one; updated reports
// a read mark the index did not know of.
func (s *Store) indexed(idx *index, id string) (e indexEntry, ok, updated bool) {
	e, ok = idx.Jobs[id]
	if !ok {
		s.indexCache.mu.Lock()
		e, ok = s.indexCache.pending[id]
		s.indexCache.mu.Unlock()
	}
	if ok && !e.Read {
		if _, err := os.Lstat(s.file(id, jobmeta.ReadMarkFile)); err == nil {
			e.Read, updated = true, true
		}
	}
	return e, ok, updated
}

// Summaries returns every job's summary, newest first: the final jobs'
// from the index, the others derived from their files. It does not write
// the index (listing takes no lock); the next launch brings it up to date.
func (s *Store) Summaries() ([]jobmeta.Summary, error) {
	ids, err := s.ids()
	if err != nil {
		return nil, err
	}
	idx := s.readIndex()
	recs := make([]*jobmeta.Record, 0, len(ids))
	for _, id := range ids {
		if e, ok, _ := s.indexed(idx, id); ok {
			sum := e.Summary
			recs = append(recs, &jobmeta.Record{ProcessID: id, Name: sum.Name, Owner: sum.Owner, State: sum.State, Terminal: true,
				CreatedAt: sum.CreatedAt, CompletedAt: sum.CompletedAt, ExitCode: sum.ExitCode, Read: sum.Read})
			continue
		}
		r, err := s.derive(id, false)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		recs = append(recs, r)
	}
	sortNewestFirst(recs)
	out := make([]jobmeta.Summary, len(recs))
	for i, r := range recs {
		out[i] = r.Summary()
	}
	return out, nil
}

// writeIndex replaces the index with idx and keeps it as the one read
// last, pending entries included. A failure costs only speed: the next
// launch derives the jobs again.
func (s *Store) writeIndex(idx *index) {
	path := filepath.Join(s.root, indexFile)
	if atomicfile.WriteCacheJSON(path, idx) != nil {
		return
	}
	var st unix.Stat_t
	s.indexCache.mu.Lock()
	defer s.indexCache.mu.Unlock()
	s.indexCache.pending = nil
	if unix.Stat(path, &st) == nil {
		s.indexCache.key, s.indexCache.idx = fileKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}, idx
	}
}

// keepPending keeps e, a final job's entry, until the index is written.
func (s *Store) keepPending(id string, e indexEntry) {
	s.indexCache.mu.Lock()
	defer s.indexCache.mu.Unlock()
	if s.indexCache.pending == nil {
		s.indexCache.pending = map[string]indexEntry{}
	}
	s.indexCache.pending[id] = e
}

// pendingEnough reports whether indexPending final jobs (Store.IndexEvery,
// when set) wait to be written.
func (s *Store) pendingEnough() bool {
	s.indexCache.mu.Lock()
	defer s.indexCache.mu.Unlock()
	every := s.IndexEvery
	if every <= 0 {
		every = indexPending
	}
	return len(s.indexCache.pending) >= every
}

// final reports whether a job's end is recorded on disk, so its record can
// no longer change state.
func (s *Store) final(id string) bool {
	for _, name := range []string{jobmeta.ResultFile, jobmeta.ReconciledFile} {
		if _, err := os.Lstat(s.file(id, name)); err == nil {
			return true
		}
	}
	return false
}

// admissionRecords returns what Admit decides on: every job on disk, the
// final ones from the index or kept pending (each read mark still unset
// checked on disk) and the others derived from their files. It rewrites
// the index once enough final jobs are pending.
func (s *Store) admissionRecords() ([]*jobmeta.Record, error) {
	ids, err := s.ids()
	if err != nil {
		return nil, err
	}
	idx := s.readIndex()
	fresh := &index{Schema: indexSchema, Jobs: make(map[string]indexEntry, len(idx.Jobs))}
	recs := make([]*jobmeta.Record, 0, len(ids))
	for _, id := range ids {
		if e, ok, _ := s.indexed(idx, id); ok {
			fresh.Jobs[id] = e
			ended := e.EndedAt
			recs = append(recs, &jobmeta.Record{ProcessID: id, Owner: e.Owner, State: e.State, Terminal: true, CreatedAt: e.CreatedAt,
				CompletedAt: &ended, Read: e.Read, Idempotency: e.Idempotency})
			continue
		}
		if r, ok := s.stillLive(id); ok {
			recs = append(recs, r)
			continue
		}
		// Admission decides on states, owners and keys: a summary's
		// derivation, without the capture files.
		r, f, err := s.deriveFiles(id, false)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if f != nil {
			s.rememberRunning(r, f)
		}
		recs = append(recs, r)
		if r.Terminal && s.final(id) {
			fresh.Jobs[id] = entryOf(r)
		}
	}
	if s.pendingEnough() {
		s.writeIndex(fresh)
	}
	sortNewestFirst(recs)
	return recs, nil
}
