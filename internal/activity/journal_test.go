package activity

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/humantime"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/limits"
)

const jobA = "0f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"

// clock is an adjustable journal clock.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock { c := &clock{}; c.set(t); return c }
func (c *clock) now() time.Time   { return time.Unix(0, c.ns.Load()) }
func (c *clock) set(t time.Time)  { c.ns.Store(t.UnixNano()) }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func openT(t *testing.T, path string, o options) *Journal {
	t.Helper()
	j, err := openJournal(path, o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func dbPath(t *testing.T) string { return filepath.Join(t.TempDir(), "state", "activity.db") }

// rawCount counts rows regardless of age, through a separate connection.
func rawCount(t *testing.T, path string) (n, minID, maxID int64) {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(path, url.Values{"mode": {"ro"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRow(`SELECT COUNT(*), COALESCE(MIN(id),0), COALESCE(MAX(id),0) FROM events`).Scan(&n, &minID, &maxID); err != nil {
		t.Fatal(err)
	}
	return n, minID, maxID
}

func reader(t *testing.T, path string, now func() time.Time) *Reader {
	t.Helper()
	if now == nil {
		now = time.Now
	}
	r, err := openReader(path, now)
	if err != nil {
		t.Fatalf("open reader: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestRecordAndRead(t *testing.T) {
	path := dbPath(t)
	j := openT(t, path, options{})
	j.Record(Event{Kind: KindAgentStart, Outcome: OutcomeOK})
	j.Record(ToolCallEvent(ToolProcessStatus, jobA, 12*time.Millisecond, nil))
	j.Record(LaunchPhaseEvent(PhaseUnitStart, jobA, 35*time.Millisecond, jobmeta.LaunchErrUnit))
	j.Record(ToolCallEvent(ToolProcessStop, jobA, time.Millisecond, errcode.New(errcode.IdentityMismatch, "x")))
	j.Record(JobEndEvent(jobA, jobmeta.Exited))
	j.Record(ReconcileEvent(jobA, jobmeta.WorkerLost))
	j.Record(LinkEndEvent(ReasonSilenceTimeout, 90*time.Second))
	j.flush()

	r := reader(t, path, nil)
	all, err := r.Last(100, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 7 {
		t.Fatalf("got %d events, want 7", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i].ID <= all[i-1].ID {
			t.Fatalf("IDs not ascending: %v", all)
		}
	}
	got := all[2]
	want := Event{ID: got.ID, Time: got.Time, Kind: KindLaunchPhase, JobID: jobA, Phase: PhaseUnitStart,
		Outcome: OutcomeFailed, DurationMS: 35, ErrorCode: "unit_start_failed"}
	if got != want {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if got.Time.Location() != time.UTC || time.Since(got.Time) > time.Minute {
		t.Fatalf("time %v not recent UTC", got.Time)
	}
	if all[3].ErrorCode != "identity_mismatch" || all[3].Outcome != OutcomeFailed {
		t.Fatalf("tool failure: %+v", all[3])
	}

	errs, err := r.Last(100, true)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range errs {
		kinds = append(kinds, string(e.Kind))
	}
	if strings.Join(kinds, ",") != "launch_phase,tool_call,reconcile,link_end" {
		t.Fatalf("errors-only kinds: %v", kinds)
	}
	last2, _ := r.Last(2, false)
	if len(last2) != 2 || last2[0].ID != all[5].ID || last2[1].ID != all[6].ID {
		t.Fatalf("Last(2) = %+v", last2)
	}
	since, _ := r.Since(all[4].ID, false, 0)
	if len(since) != 2 || since[0].ID != all[5].ID {
		t.Fatalf("Since = %+v", since)
	}
	since, _ = r.Since(0, true, 1)
	if len(since) != 1 || since[0].ID != all[2].ID {
		t.Fatalf("Since errors-only limit 1 = %+v", since)
	}
	if c, _ := r.Cursor(); c != all[6].ID {
		t.Fatalf("Cursor = %d", c)
	}
	if st := j.Stats(); st != (Stats{Recorded: 7}) {
		t.Fatalf("stats %+v", st)
	}
}

func TestKeepsNewestMaxEntries(t *testing.T) {
	path := dbPath(t)
	j := openT(t, path, options{})
	const total = limits.JournalMaxEntries + 2000
	for i := 0; i < total; i++ {
		j.Record(Event{Kind: KindToolCall, Tool: ToolProcessJobs, Outcome: OutcomeOK, DurationMS: int64(i)})
		if i%500 == 499 {
			j.flush()
			if n, _, _ := rawCount(t, path); n > limits.JournalMaxEntries+pruneEvery+maxBatch {
				t.Fatalf("%d rows while open: pruning lags", n)
			}
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if st := j.Stats(); st.Recorded != total || st.Dropped != 0 || st.WriteFailures != 0 {
		t.Fatalf("stats %+v", st)
	}
	n, minID, maxID := rawCount(t, path)
	if n != limits.JournalMaxEntries || maxID-minID+1 != limits.JournalMaxEntries {
		t.Fatalf("rows %d ids %d..%d", n, minID, maxID)
	}
	evs, err := reader(t, path, nil).Last(total, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != limits.JournalMaxEntries || evs[0].DurationMS != total-limits.JournalMaxEntries || evs[len(evs)-1].DurationMS != total-1 {
		t.Fatalf("kept %d events, first %d last %d", len(evs), evs[0].DurationMS, evs[len(evs)-1].DurationMS)
	}
}

func TestPrunesOlderThanMaxAge(t *testing.T) {
	path := dbPath(t)
	c := newClock(t0)
	j := openT(t, path, options{now: c.now})
	for i := 0; i < 20; i++ {
		j.Record(Event{Kind: KindToolCall, Tool: ToolSystemMetrics, Outcome: OutcomeOK})
	}
	j.flush()
	if n, _, _ := rawCount(t, path); n != 20 {
		t.Fatalf("%d rows", n)
	}
	// Just inside the bound: kept.
	c.set(t0.Add(limits.JournalMaxAge - time.Minute))
	j.Record(Event{Kind: KindAgentStart})
	j.flush()
	if n, _, _ := rawCount(t, path); n != 21 {
		t.Fatalf("%d rows before expiry", n)
	}
	// Past it: the next write prunes the old ones.
	c.set(t0.Add(limits.JournalMaxAge + time.Hour))
	j.Record(Event{Kind: KindAgentStop})
	j.flush()
	if n, _, _ := rawCount(t, path); n != 2 {
		t.Fatalf("%d rows after expiry, want 2", n)
	}
	j.Close()

	// A newly opened journal's writer prunes before anything else.
	c2 := newClock(t0.Add(3 * limits.JournalMaxAge))
	j2 := openT(t, path, options{now: c2.now})
	j2.flush()
	if n, _, _ := rawCount(t, path); n != 0 {
		t.Fatalf("%d rows after reopen, want 0", n)
	}
	j2.Record(Event{Kind: KindAgentStart})
	j2.Close()

	// A reader never shows expired entries, even before the writer prunes.
	r := reader(t, path, func() time.Time { return c2.now().Add(limits.JournalMaxAge + time.Second) })
	if evs, err := r.Last(10, false); err != nil || len(evs) != 0 {
		t.Fatalf("reader returned expired entries: %v %v", evs, err)
	}
	if evs, err := reader(t, path, c2.now).Last(10, false); err != nil || len(evs) != 1 {
		t.Fatalf("reader: %v %v", evs, err)
	}
}

func marker(t *testing.T) string {
	b := make([]byte, 8)
	rand.Read(b)
	return "MARKER-" + hex.EncodeToString(b)
}

// scanFor fails the test if any file in dir contains any marker.
func scanFor(t *testing.T, dir string, markers []string, when string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
		lower := bytes.ToLower(b) // catches a marker in any case
		for _, m := range markers {
			if bytes.Contains(lower, bytes.ToLower([]byte(m))) {
				t.Errorf("%s: marker %s found in %s", when, m, e.Name())
			}
		}
	}
	return files
}

func TestNoMarkerInDatabaseFiles(t *testing.T) {
	path := dbPath(t)
	dir := filepath.Dir(path)
	j := openT(t, path, options{})
	var markers []string
	m := func() string { s := marker(t); markers = append(markers, s); return s }
	for i := 0; i < 50; i++ {
		j.Record(Event{Kind: Kind(m()), Tool: Tool(m()), JobID: m(), Phase: Phase(m()), Outcome: Outcome(m()),
			ErrorCode: m(), State: m(), Reason: Reason(m()), DurationMS: int64(i)})
		// A marker in the shape of a job ID, but not canonical.
		upper := strings.ToUpper(jobA[:24]) + hex.EncodeToString([]byte(m())[7:13])
		markers = append(markers, upper)
		j.Record(Event{Kind: KindToolCall, Tool: ToolProcessStart, JobID: upper})
		// Raw error text never reaches the journal, coded or not.
		j.Record(ToolCallEvent(ToolProcessStart, "", time.Millisecond, errors.New(m())))
		j.Record(ToolCallEvent(ToolFilesSearch, "", time.Millisecond, errcode.New(errcode.InvalidArgument, "root %s", m())))
		j.Record(LaunchPhaseEvent(PhasePipe, jobA, time.Millisecond, m()))
	}
	j.flush()
	// While the agent runs: database, -wal and -shm.
	files := scanFor(t, dir, markers, "open")
	if _, ok := files["activity.db-wal"]; !ok {
		t.Fatalf("no -wal file while open: %v", files)
	}
	// Positive control: the scan does see what was written.
	var all []byte
	for _, b := range files {
		all = append(all, b...)
	}
	if !bytes.Contains(all, []byte(jobA)) || !bytes.Contains(all, []byte("launch_phase")) {
		t.Fatal("scan did not find the recorded allowlisted content")
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	scanFor(t, dir, markers, "closed")
	if st := j.Stats(); st.Recorded != 250 {
		t.Fatalf("stats %+v", st)
	}
}

func TestNonsenseBecomesOther(t *testing.T) {
	path := dbPath(t)
	j := openT(t, path, options{})
	j.Record(Event{Kind: "tool_call ", Tool: "process.START", JobID: strings.ToUpper(jobA), Phase: "unit-start",
		Outcome: "OK", ErrorCode: "not found", State: "exited\n", Reason: "\x1b[31m", DurationMS: -5})
	j.Record(Event{})
	j.Close()
	evs, err := reader(t, path, nil).Last(10, false)
	if err != nil || len(evs) != 2 {
		t.Fatalf("%v %v", evs, err)
	}
	got := evs[0]
	want := Event{ID: got.ID, Time: got.Time, Kind: Other, Tool: Other, JobID: "", Phase: Other, Outcome: Other,
		ErrorCode: Other, State: Other, Reason: Other, DurationMS: 0}
	if got != want {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if evs[1].Kind != Other || evs[1].Tool != "" || evs[1].Outcome != "" {
		t.Fatalf("empty event: %+v", evs[1])
	}
}

// A tampered database still only yields allowlisted words.
func TestReaderSanitisesTamperedRows(t *testing.T) {
	path := dbPath(t)
	j := openT(t, path, options{})
	j.Close()
	db, err := sql.Open("sqlite", dsn(path, nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO events (ts, kind, tool, job_id, error_code) VALUES (?, 'x', '/etc/passwd', 'nope', '\x1b')`, time.Now().UnixNano()); err != nil {
		t.Fatal(err)
	}
	db.Close()
	evs, err := reader(t, path, nil).Last(1, false)
	if err != nil || len(evs) != 1 {
		t.Fatal(evs, err)
	}
	if e := evs[0]; e.Kind != Other || e.Tool != Other || e.JobID != "" || e.ErrorCode != Other {
		t.Fatalf("tampered row leaked: %+v", e)
	}
}

// recordQuickly records n events and fails if that takes long: Record must
// not wait for the database.
func recordQuickly(t *testing.T, j *Journal, n int) {
	t.Helper()
	start := time.Now()
	for i := 0; i < n; i++ {
		j.Record(Event{Kind: KindLaunchPhase, Phase: PhaseAdmission, JobID: jobA, Outcome: OutcomeOK, DurationMS: int64(i)})
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("%d Record calls took %v", n, d)
	}
}

// A database SQLite itself opens read-only: the journal opens, accepts
// events without blocking, and counts every write as failed.
func TestReadOnlyDatabase(t *testing.T) {
	path := dbPath(t)
	j := openT(t, path, options{})
	j.Record(Event{Kind: KindAgentStart})
	j.Close()

	ro := openT(t, path, options{params: url.Values{"mode": {"ro"}}})
	recordQuickly(t, ro, 300)
	ro.flush()
	if st := ro.Stats(); st.Recorded != 0 || st.WriteFailures+st.Dropped != 300 || st.WriteFailures == 0 {
		t.Fatalf("stats %+v", st)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := rawCount(t, path); n != 1 {
		t.Fatalf("%d rows", n)
	}
}

// A database that reaches its size limit (SQLITE_FULL, as on a full disk):
// events that fit are kept, the rest are counted as failures.
func TestFullDatabase(t *testing.T) {
	path := dbPath(t)
	j := openT(t, path, options{params: url.Values{"_pragma": {"max_page_count(8)"}}})
	const total = 3000
	for i := 0; i < total; i += 300 {
		recordQuickly(t, j, 300)
		j.flush()
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	st := j.Stats()
	if st.Recorded == 0 || st.WriteFailures == 0 || st.Recorded+st.WriteFailures+st.Dropped != total {
		t.Fatalf("stats %+v", st)
	}
	if n, _, _ := rawCount(t, path); uint64(n) != st.Recorded {
		t.Fatalf("%d rows, %d recorded", n, st.Recorded)
	}
}

// simulateDiskFull stands in for write errors SQLite cannot be made to
// produce here (ENOSPC, EIO).
func simulateDiskFull(context.Context, []Event) error { return errors.New("disk full") }

func TestWriteFailuresAreCounted(t *testing.T) {
	j := openT(t, dbPath(t), options{noWriter: true})
	j.insert = simulateDiskFull
	j.done = make(chan struct{})
	go j.run()
	recordQuickly(t, j, 500)
	j.flush()
	if st := j.Stats(); st != (Stats{WriteFailures: 500}) {
		t.Fatalf("stats %+v", st)
	}
	// A journal that starts working again records again.
	j.insert = j.insertBatch
	j.Record(Event{Kind: KindAgentStop})
	j.Close()
	if st := j.Stats(); st != (Stats{Recorded: 1, WriteFailures: 500}) {
		t.Fatalf("stats %+v", st)
	}
}

// With the writer stuck in the database, Record keeps returning at once and
// drops what does not fit in the queue.
func TestFullQueueDropsWithoutBlocking(t *testing.T) {
	j := openT(t, dbPath(t), options{noWriter: true})
	release := make(chan struct{})
	var entered sync.Once
	stuck := make(chan struct{})
	j.insert = func(ctx context.Context, b []Event) error {
		entered.Do(func() { close(stuck) })
		<-release
		return j.insertBatch(ctx, b)
	}
	j.done = make(chan struct{})
	go j.run()
	j.Record(Event{Kind: KindAgentStart})
	<-stuck
	const total = queueSize + maxBatch + 1000
	recordQuickly(t, j, total)
	if st := j.Stats(); st.Dropped < total-queueSize-maxBatch {
		t.Fatalf("stats %+v: expected drops", st)
	}
	close(release)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	st := j.Stats()
	if st.Recorded+st.Dropped != total+1 || st.WriteFailures != 0 || st.Recorded < queueSize {
		t.Fatalf("stats %+v", st)
	}
}

func TestNilAndClosedJournal(t *testing.T) {
	var j *Journal
	j.Record(Event{Kind: KindAgentStart})
	if j.Stats() != (Stats{}) || j.Close() != nil {
		t.Fatal("nil journal")
	}
	j2 := openT(t, dbPath(t), options{})
	j2.Close()
	j2.Record(Event{Kind: KindAgentStart})
	if err := j2.Close(); err != nil {
		t.Fatal(err)
	}
	if st := j2.Stats(); st != (Stats{Dropped: 1}) {
		t.Fatalf("stats %+v", st)
	}
}

func TestConcurrentReaderWhileWriting(t *testing.T) {
	path := dbPath(t)
	j := openT(t, path, options{})
	j.Record(Event{Kind: KindAgentStart})
	j.flush()
	r := reader(t, path, nil)
	const writers, each = 4, 750
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				j.Record(ToolCallEvent(ToolProcessOutput, jobA, time.Duration(i)*time.Millisecond, nil))
				if i%100 == 0 {
					j.flush()
				}
			}
		}()
	}
	var seen []int64
	var cursor int64
	deadline := time.Now().Add(30 * time.Second)
	for len(seen) < writers*each+1 && time.Now().Before(deadline) {
		evs, err := r.Since(cursor, false, 500)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			seen = append(seen, e.ID)
			cursor = e.ID
		}
		if len(evs) == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	wg.Wait()
	j.Close()
	if len(seen) != writers*each+1 || !sort.SliceIsSorted(seen, func(a, b int) bool { return seen[a] < seen[b] }) {
		t.Fatalf("follower saw %d events", len(seen))
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] != seen[i-1]+1 {
			t.Fatalf("gap or duplicate at %d: %d then %d", i, seen[i-1], seen[i])
		}
	}
}

func TestCorruptDatabaseFailsOpen(t *testing.T) {
	for name, content := range map[string][]byte{
		"garbage":    bytes.Repeat([]byte("not a database at all "), 500),
		"bad header": append([]byte("SQLite format 3\x00"), bytes.Repeat([]byte{0xff}, 8192)...),
	} {
		t.Run(name, func(t *testing.T) {
			path := dbPath(t)
			os.MkdirAll(filepath.Dir(path), 0o700)
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			j, err := Open(path)
			if err == nil {
				j.Close()
				t.Fatal("corrupt journal opened")
			}
			j.Record(Event{Kind: KindAgentStart}) // the caller's nil journal
		})
	}
}

func TestFileModes(t *testing.T) {
	path := dbPath(t)
	os.MkdirAll(filepath.Dir(path), 0o700)
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o644)
	j := openT(t, path, options{})
	j.Record(Event{Kind: KindAgentStart})
	j.flush()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v", filepath.Base(p), fi.Mode().Perm())
		}
	}
	fresh := dbPath(t)
	openT(t, fresh, options{})
	if fi, err := os.Stat(filepath.Dir(fresh)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("created directory mode: %v %v", fi.Mode().Perm(), err)
	}
}

func TestOpenReader(t *testing.T) {
	if _, err := OpenReader(filepath.Join(t.TempDir(), "none.db")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing journal: %v", err)
	}
	empty := filepath.Join(t.TempDir(), "empty.db")
	os.WriteFile(empty, nil, 0o600)
	if _, err := OpenReader(empty); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("uninitialised journal: %v", err)
	}
	// With no agent running (no -wal, no -shm).
	path := dbPath(t)
	j := openT(t, path, options{})
	j.Record(Event{Kind: KindAgentStart})
	j.Close()
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("-wal left after close: %v", err)
	}
	r, err := OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if evs, err := r.Last(5, false); err != nil || len(evs) != 1 {
		t.Fatalf("%v %v", evs, err)
	}
	// Whatever SQLite creates for the reader is owner-only too.
	ents, _ := os.ReadDir(filepath.Dir(path))
	for _, e := range ents {
		if fi, err := e.Info(); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v %v", e.Name(), fi.Mode(), err)
		}
	}
	// The reader cannot write.
	if _, err := r.db.Exec(`DELETE FROM events`); err == nil {
		t.Fatal("reader wrote")
	}
}

func TestFormat(t *testing.T) {
	e := LaunchPhaseEvent(PhaseUnitStart, jobA, 35*time.Millisecond, jobmeta.LaunchErrUnit)
	e.Time = t0
	got := Format(e)
	want := t0.Local().Format("Mon 2006-01-02 15:04:05 MST") + "  launch_phase  unit_start        0f8e7d6c  failed      35ms  unit_start_failed"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	e = Event{Time: t0, Kind: KindAgentStart, Outcome: OutcomeOK}
	if got := Format(e); !strings.HasSuffix(got, "agent_start   -                 -         ok           0ms") {
		t.Fatalf("%q", got)
	}
	e = Event{Time: t0, Kind: "x", Tool: "/secret/path", DurationMS: 200_000}
	if got := Format(e); strings.Contains(got, "secret") || !strings.Contains(got, "3m20s") {
		t.Fatalf("%q", got)
	}
	for _, ms := range []int64{0, 999, 1234, 59_999, 1 << 62} {
		if s := formatDuration(ms); s == "" || strings.HasPrefix(s, "-") {
			t.Fatalf("formatDuration(%d) = %q", ms, s)
		}
	}
}

func TestJSONShape(t *testing.T) {
	b, err := json.Marshal(Event{ID: 7, Time: t0, Kind: KindJobEnd, JobID: jobA, State: "exited", Outcome: OutcomeOK})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":7,"time":"2026-03-01T12:00:00Z","kind":"job_end","tool":"","job_id":"` + jobA +
		`","phase":"","outcome":"ok","duration_ms":0,"error_code":"","state":"exited","reason":""}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	if b, _ := json.Marshal(Stats{1, 2, 3}); string(b) != `{"recorded":1,"dropped":2,"write_failures":3}` {
		t.Fatalf("%s", b)
	}
}

func TestAllowlistedValuesSurvive(t *testing.T) {
	check := func(name string, n int, f func(i int) (in, out Event)) {
		for i := 0; i < n; i++ {
			in, want := f(i)
			if got := sanitize(in); got != want {
				t.Errorf("%s: sanitize(%+v) = %+v", name, in, got)
			}
		}
	}
	for _, k := range kinds {
		check("kind", 1, func(int) (Event, Event) { return Event{Kind: k}, Event{Kind: k} })
	}
	for _, v := range errorCodes {
		check("code", 1, func(int) (Event, Event) {
			return Event{Kind: KindToolCall, ErrorCode: v}, Event{Kind: KindToolCall, ErrorCode: v}
		})
	}
	for _, v := range states {
		check("state", 1, func(int) (Event, Event) {
			return Event{Kind: KindJobEnd, State: v}, Event{Kind: KindJobEnd, State: v}
		})
	}
	for _, k := range tools {
		check("tool", 1, func(int) (Event, Event) {
			return Event{Kind: KindToolCall, Tool: k}, Event{Kind: KindToolCall, Tool: k}
		})
	}
	for _, k := range phases {
		check("phase", 1, func(int) (Event, Event) {
			return Event{Kind: KindLaunchPhase, Phase: k}, Event{Kind: KindLaunchPhase, Phase: k}
		})
	}
	for _, k := range reasons {
		check("reason", 1, func(int) (Event, Event) {
			return Event{Kind: KindLinkEnd, Reason: k}, Event{Kind: KindLinkEnd, Reason: k}
		})
	}
	if len(tools) != 19 || len(kinds) != 10 || len(reasons) != 16 {
		t.Fatalf("allowlist sizes changed: %d tools, %d kinds, %d reasons", len(tools), len(kinds), len(reasons))
	}
	if JobEndEvent(jobA, jobmeta.WorkerLost).Outcome != OutcomeFailed || JobEndEvent(jobA, jobmeta.StoppedByRequest).Outcome != OutcomeOK ||
		JobEndEvent(jobA, jobmeta.TimedOut).Outcome != OutcomeOK {
		t.Fatal("JobEndEvent outcome")
	}
	if UserManagerEvent(ReasonBusReplaced, true).Outcome != OutcomeOK || UserManagerEvent(ReasonUserManagerGone, false).Outcome != OutcomeFailed {
		t.Fatal("UserManagerEvent outcome")
	}
	if LinkEndEvent(ReasonLocalShutdown, 0).Outcome != OutcomeOK || LinkEndEvent(ReasonRemoteClose, 0).Outcome != OutcomeFailed {
		t.Fatal("LinkEndEvent outcome")
	}
}

func TestEchoPrintsEachEventContentFree(t *testing.T) {
	var mu sync.Mutex
	var out bytes.Buffer
	j := openT(t, dbPath(t), options{now: newClock(t0).now})
	j.Echo(lockedBuffer{&mu, &out}, "agent: ")
	j.LinkUp()
	j.Record(Event{Kind: KindToolCall, Tool: ToolProcessStart, JobID: jobA, Outcome: OutcomeFailed, DurationMS: 35, ErrorCode: string(errcode.JobTableFull)})
	j.Record(Event{Kind: KindLaunchPhase, Phase: PhaseUnitStart, Outcome: OutcomeOK, DurationMS: 3})
	j.Record(Event{Kind: KindToolCall, Tool: "rm -rf /secret", Outcome: OutcomeOK, DurationMS: 1250})
	j.LinkEnd(string(ReasonRemoteClose), 90*time.Second)
	j.flush()
	mu.Lock()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	mu.Unlock()
	stamp := humantime.Time(t0)
	want := []string{
		"agent: " + stamp + " link_up - - ok 0ms",
		"agent: " + stamp + " tool_call process.start 0f8e7d6c failed 35ms job_table_full",
		"agent: " + stamp + " tool_call other - ok 1.25s",
		"agent: " + stamp + " link_end remote_close - failed 1m30s",
	}
	if len(lines) != len(want) {
		t.Fatalf("echoed %d lines, want %d (a successful launch phase is not echoed):\n%s", len(lines), len(want), strings.Join(lines, "\n"))
	}
	for i, l := range lines {
		if got := strings.Join(strings.Fields(l), " "); got != want[i] {
			t.Errorf("line %d: %q, want %q", i, got, want[i])
		}
	}
	j.Echo(nil, "")
	j.LinkUp()
	j.flush()
	if n := strings.Count(out.String(), "\n"); n != len(want) {
		t.Errorf("after Echo(nil) the journal still printed (%d lines)", n)
	}
}

type lockedBuffer struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (l lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// An agent started beside one frozen inside a write (SIGSTOP, a debugger)
// opens its journal without waiting for that lock, and what it records
// meanwhile is written once the lock is gone.
func TestOpenDoesNotWaitForAnotherWriter(t *testing.T) {
	path := dbPath(t)
	first := openT(t, path, options{})
	first.Close()

	other, err := sql.Open("sqlite", dsn(path, url.Values{"_txlock": {"immediate"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	held, err := other.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := held.Exec(`INSERT INTO events (ts, kind) VALUES (1, 'agent_start')`); err != nil {
		t.Fatal(err)
	}

	opened := make(chan *Journal, 1)
	go func() {
		j, err := openJournal(path, options{})
		if err != nil {
			t.Error(err)
		}
		opened <- j
	}()
	var j *Journal
	select {
	case j = <-opened:
	case <-time.After(busyTimeoutMS * time.Millisecond / 2):
		held.Rollback()
		t.Fatalf("Open waited on another connection's write lock")
	}
	j.Record(Event{Kind: KindAgentStart})
	held.Rollback()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if st := j.Stats(); st.Recorded != 1 {
		t.Fatalf("stats %+v: the event recorded while the lock was held is lost", st)
	}
}
