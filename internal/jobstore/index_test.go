package jobstore_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/limits"
)

// TestAdmissionIndexDecidesAsAFullScan: whatever state the admission index
// is in (built by earlier launches, then left stale by jobs that ended,
// were read or forgotten behind its back, deleted, or corrupted, as a
// SIGKILLed agent or another process leaves it), admission and retention
// decide exactly as a store without an index: the same error code and the
// same job directories left. A property test over random job sets.
func TestAdmissionIndexDecidesAsAFullScan(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 40; round++ {
		f := newFixture(t)
		n := 0
		next := func() string { n++; return id(n) }
		// A random table: live jobs, terminal jobs read or not, of any age
		// (some past the retention), corrupt ones.
		var terminals []string
		for i, k := 0, rng.Intn(40); i < k; i++ {
			f.running(next(), f.base.Add(-time.Duration(rng.Intn(100))*time.Minute))
		}
		for i, k := 0, 60+rng.Intn(60); i < k; i++ {
			age := time.Duration(rng.Intn(10*24)) * time.Hour
			j := next()
			f.terminal(j, f.base.Add(-age-time.Minute), f.base.Add(-age), rng.Intn(3) == 0)
			terminals = append(terminals, j)
		}
		if rng.Intn(2) == 0 {
			f.job(next(), f.base)
			os.WriteFile(filepath.Join(f.st.Dir(id(n)), jobmeta.ResultFile), []byte("{bad"), 0o600)
		}
		// Earlier launches built the index.
		f.st.Admit(f.newJob(next()))
		// Then it goes stale: reads, forgets and ends behind its back.
		for _, j := range terminals {
			if _, err := os.Stat(f.st.Dir(j)); err != nil {
				continue // pruned by that launch
			}
			switch rng.Intn(6) {
			case 0:
				f.write(j, jobmeta.ReadMarkFile, &jobmeta.ReadMark{Schema: jobmeta.SchemaVersion, ReadAt: f.now})
			case 1:
				os.RemoveAll(f.st.Dir(j))
			}
		}
		for i, k := 0, rng.Intn(5); i < k; i++ {
			f.terminal(next(), f.base, f.base, rng.Intn(2) == 0)
		}
		index := filepath.Join(f.root, ".index.json")
		switch rng.Intn(4) {
		case 0:
			os.Remove(index)
		case 1:
			os.WriteFile(index, []byte(`{"schema":1,"jobs":{"`+id(1)+`":{"state":"exited"`), 0o600)
		}
		f.now = f.base.Add(time.Duration(rng.Intn(48)) * time.Hour)

		// The same table without an index decides by a full scan (once the
		// files of the jobs retention discarded are gone).
		f.st.Settle()
		scan := newFixture(t)
		scan.now = f.now
		if out, err := exec.Command("cp", "-a", f.root+"/.", scan.root).CombinedOutput(); err != nil {
			t.Fatalf("copy the table: %v %s", err, out)
		}
		os.Remove(filepath.Join(scan.root, ".index.json"))

		newID := next()
		got, want := f.st.Admit(f.newJob(newID)), scan.st.Admit(scan.newJob(newID))
		if code(got) != code(want) {
			t.Fatalf("round %d: with the index %v, by a full scan %v", round, got, want)
		}
		sameDirs(t, "after admission", f.dirs(), scan.dirs())

		// Listings from the index say what a full derivation says.
		if rng.Intn(2) == 0 {
			for _, j := range terminals {
				if _, err := os.Stat(f.st.Dir(j)); err == nil && rng.Intn(4) == 0 {
					f.write(j, jobmeta.ReadMarkFile, &jobmeta.ReadMark{Schema: jobmeta.SchemaVersion, ReadAt: f.now})
				}
			}
		}
		sums, err := f.st.Summaries()
		if err != nil {
			t.Fatal(err)
		}
		recs, err := f.st.List()
		if err != nil {
			t.Fatal(err)
		}
		if len(sums) != len(recs) {
			t.Fatalf("round %d: %d summaries, %d records", round, len(sums), len(recs))
		}
		for i, r := range recs {
			if want := r.Summary(); !reflect.DeepEqual(sums[i], want) {
				t.Fatalf("round %d: summary %+v, derived %+v", round, sums[i], want)
			}
		}
	}
}

func code(err error) errcode.Code {
	if err == nil {
		return ""
	}
	return errcode.From(err).Code
}

// plantIndex writes an admission index claiming that job jid exited long
// ago (past retention) and was read, mutated by edit, as raw JSON padded
// with spaces to pad bytes when pad is set.
func (f *fixture) plantIndex(jid string, edit func(entry, doc map[string]any), pad int) {
	f.t.Helper()
	ended := f.base.Add(-limits.TerminalJobRetention - time.Hour)
	entry := map[string]any{"process_id": jid, "state": "exited", "terminal": true, "created_at": ended,
		"completed_at": ended, "exit_code": 0, "read": true, "ended_at": ended}
	doc := map[string]any{"schema": 3, "jobs": map[string]any{jid: entry}}
	if edit != nil {
		edit(entry, doc)
	}
	data, err := json.Marshal(doc)
	if err != nil {
		f.t.Fatal(err)
	}
	if pad > 0 {
		// Inside the object, so that a read short of the end is not JSON.
		body := data[:len(data)-1]
		data = append(append(body, bytes.Repeat([]byte(" "), pad-len(data))...), '}')
	}
	// Replaced by a rename, as the store does, so the file is a new one.
	tmp := filepath.Join(f.state, "index.tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(f.root, ".index.json")); err != nil {
		f.t.Fatal(err)
	}
}

// TestAdmissionTrustsOnlyASoundIndex: a launch takes the final jobs from
// the admission index instead of deriving them (an index that lies about
// a running job is believed: the job is listed as exited and pruned as
// expired), and an index that is unsound in any way (another schema, no
// job table, an entry that is not a final job under its own valid ID,
// unknown fields, over its 4 MiB bound) is not used at all: the running
// job is derived from its files and kept.
func TestAdmissionTrustsOnlyASoundIndex(t *testing.T) {
	const bound = 4 << 20
	cases := []struct {
		name    string
		edit    func(entry, doc map[string]any)
		pad     int
		trusted bool
	}{
		{name: "sound", trusted: true},
		{name: "exactly at the bound", pad: bound, trusted: true},
		{name: "one byte over the bound", pad: bound + 1},
		{name: "another schema", edit: func(_, doc map[string]any) { doc["schema"] = 2 }},
		{name: "no job table", edit: func(_, doc map[string]any) { doc["jobs"] = nil }},
		{name: "unknown field", edit: func(_, doc map[string]any) { doc["extra"] = true }},
		{name: "entry under another ID", edit: func(e, _ map[string]any) { e["process_id"] = id(9) }},
		{name: "entry not final", edit: func(e, _ map[string]any) { e["state"] = "running" }},
		{name: "entry not marked terminal", edit: func(e, _ map[string]any) { e["terminal"] = false }},
		{name: "invalid ID beside it", edit: func(_, doc map[string]any) {
			doc["jobs"].(map[string]any)["x"] = map[string]any{"process_id": "x", "state": "exited", "terminal": true}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			f.running(id(1), f.base)
			f.plantIndex(id(1), c.edit, c.pad)

			sums, err := f.st.Summaries()
			if err != nil || len(sums) != 1 {
				t.Fatalf("summaries %+v, %v", sums, err)
			}
			if want := map[bool]jobmeta.State{true: jobmeta.Exited, false: jobmeta.Running}[c.trusted]; sums[0].State != want {
				t.Errorf("listed as %s, want %s (index trusted: %v)", sums[0].State, want, c.trusted)
			}
			if err := f.st.Admit(f.newJob(id(2))); err != nil {
				t.Fatal(err)
			}
			want := []string{id(1), id(2)}
			if c.trusted {
				want = []string{id(2)}
			}
			sameDirs(t, "after admission", f.dirs(), want)
		})
	}
}

// TestIndexFollowsItsFile: a listing after the index was replaced uses
// the new one, not the one it decoded before.
func TestIndexFollowsItsFile(t *testing.T) {
	f := newFixture(t)
	f.running(id(1), f.base)
	f.plantIndex(id(1), nil, 0)
	if sums, _ := f.st.Summaries(); len(sums) != 1 || sums[0].State != jobmeta.Exited {
		t.Fatalf("first listing %+v, want the index's exited", sums)
	}
	f.plantIndex(id(1), func(e, _ map[string]any) { e["state"] = "timed_out" }, 0)
	if sums, _ := f.st.Summaries(); len(sums) != 1 || sums[0].State != jobmeta.TimedOut {
		t.Fatalf("listing after the index changed %+v, want the new index's timed_out", sums)
	}
	os.Remove(filepath.Join(f.root, ".index.json"))
	if sums, _ := f.st.Summaries(); len(sums) != 1 || sums[0].State != jobmeta.Running {
		t.Fatalf("listing without an index %+v, want the derived running", sums)
	}
}

// TestIndexHoldsOnlyFinalJobs: a launch indexes exactly the jobs whose end
// is on disk; a job that is terminal without it (a launch given up on)
// stays derived, so when its supervisor's result appears after all the
// listing tells its real end.
func TestIndexHoldsOnlyFinalJobs(t *testing.T) {
	f := newFixture(t)
	f.running(id(1), f.base)
	f.terminal(id(2), f.base, f.base, false)
	if err := f.st.Admit(f.newJob(id(3))); err != nil {
		t.Fatal(err)
	}
	if err := f.st.MarkLaunchFailed(id(3), jobmeta.LaunchErrSupervisor); err != nil {
		t.Fatal(err)
	}
	if err := f.st.Admit(f.newJob(id(4))); err != nil {
		t.Fatal(err)
	}
	if got := indexedIDs(t, f); !reflect.DeepEqual(got, []string{id(2)}) {
		t.Fatalf("index holds %v, want only the exited job %s", got, id(2))
	}
	seven := 7
	f.write(id(3), jobmeta.ResultFile, &jobmeta.Result{Schema: jobmeta.SchemaVersion, ExitCode: &seven, CompletedAt: f.now})
	if r := f.get(id(3)); r.State != jobmeta.Exited {
		t.Fatalf("derived %s", r.State)
	}
	sums, err := f.st.Summaries()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sums {
		if s.ProcessID == id(3) && (s.State != jobmeta.Exited || s.ExitCode == nil || *s.ExitCode != 7) {
			t.Errorf("listed %+v, want exited 7", s)
		}
	}
	if err := f.st.Admit(f.newJob(id(5))); err != nil {
		t.Fatal(err)
	}
	if got := indexedIDs(t, f); !reflect.DeepEqual(got, []string{id(2), id(3)}) {
		t.Fatalf("index holds %v, want the two ended jobs", got)
	}
}

// TestIndexRewrittenOnlyForNewFinalJobs: a launch that learns nothing
// new, a read mark or a forgotten job leaves the index file as it was
// (an unset read mark is checked on disk, an entry counts only while its
// directory exists); IndexEvery new final jobs replace it, and until then
// the process answers for them from memory.
func TestIndexRewrittenOnlyForNewFinalJobs(t *testing.T) {
	f := newFixture(t)
	f.st.IndexEvery = 2
	f.terminal(id(1), f.base, f.base, true)
	f.terminal(id(2), f.base, f.base, false)
	f.terminal(id(3), f.base, f.base, false)
	n := 10
	admit := func() {
		t.Helper()
		n++
		if err := f.st.Admit(f.newJob(id(n))); err != nil {
			t.Fatal(err)
		}
	}
	inode := func() uint64 {
		t.Helper()
		fi, err := os.Stat(filepath.Join(f.root, ".index.json"))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	admit()
	before := inode()
	admit()
	if inode() != before {
		t.Errorf("a launch that learned nothing rewrote the index")
	}
	for _, s := range []struct {
		what string
		do   func()
	}{
		{"a read mark", func() {
			f.write(id(2), jobmeta.ReadMarkFile, &jobmeta.ReadMark{Schema: jobmeta.SchemaVersion, ReadAt: f.now})
		}},
		{"a forgotten job", func() { os.RemoveAll(f.st.Dir(id(3))) }},
		{"one new final job of two", func() { f.terminal(id(4), f.base, f.base, false) }},
	} {
		s.do()
		before = inode()
		admit()
		if inode() != before {
			t.Errorf("a launch that learned of %s rewrote the index", s.what)
		}
	}
	f.terminal(id(5), f.base, f.base, false)
	before = inode()
	admit()
	if inode() == before {
		t.Error("a launch that learned of the second new final job kept the old index")
	}
	if got := indexedIDs(t, f); !reflect.DeepEqual(got, []string{id(1), id(2), id(4), id(5)}) {
		t.Errorf("index holds %v", got)
	}
}

// indexedIDs is the sorted job IDs of the index on disk.
func indexedIDs(t *testing.T, f *fixture) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(f.root, ".index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx struct {
		Jobs map[string]json.RawMessage `json:"jobs"`
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for k := range idx.Jobs {
		ids = append(ids, k)
	}
	return sorted(ids...)
}

// TestAJobReadAfterItsEndIsNotDerivedAgain: a final job a reader has seen
// end (Get) is kept for the index at once, so the next launch takes it from
// memory instead of deriving it (a launch record made unreadable meanwhile
// is not read), and counts toward the index's rewrite; a live one is not
// kept.
func TestAJobReadAfterItsEndIsNotDerivedAgain(t *testing.T) {
	f := newFixture(t)
	f.st.IndexEvery = 2
	f.terminal(id(1), f.base, f.base, false)
	f.running(id(2), f.base)
	for _, jid := range []string{id(1), id(2)} {
		if _, err := f.st.Get(jid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(f.launchFile(id(1)), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.st.Admit(f.newJob(id(10))); err != nil {
		t.Fatal(err)
	}
	sums, err := f.st.Summaries()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sums {
		if s.ProcessID == id(1) && s.State != jobmeta.Exited {
			t.Errorf("the job read after its end was derived again: %s", s.State)
		}
	}
	if _, err := os.Stat(filepath.Join(f.root, ".index.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("one final job of two wrote the index: %v", err)
	}
	f.terminal(id(3), f.base, f.base, false)
	if _, err := f.st.Get(id(3)); err != nil {
		t.Fatal(err)
	}
	if err := f.st.Admit(f.newJob(id(11))); err != nil {
		t.Fatal(err)
	}
	if got := indexedIDs(t, f); !reflect.DeepEqual(got, []string{id(1), id(3)}) {
		t.Errorf("index holds %v, want the two jobs read after their end", got)
	}
}

// TestIndexRewrittenEverySixteenFinalJobs: as shipped (IndexEvery unset),
// a process keeps up to 15 newly ended jobs to itself and rewrites the
// index when the 16th is waiting.
func TestIndexRewrittenEverySixteenFinalJobs(t *testing.T) {
	f := newFixture(t)
	f.st.IndexEvery = 0
	for i := 1; i <= 15; i++ {
		f.terminal(id(i), f.base, f.base, false)
	}
	if err := f.st.Admit(f.newJob(id(100))); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(f.root, ".index.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("15 new final jobs wrote the index: %v", err)
	}
	f.terminal(id(16), f.base, f.base, false)
	if err := f.st.Admit(f.newJob(id(101))); err != nil {
		t.Fatal(err)
	}
	if got := indexedIDs(t, f); len(got) != 16 || got[0] != id(1) || got[15] != id(16) {
		t.Errorf("after the 16th new final job the index holds %v", got)
	}
}
