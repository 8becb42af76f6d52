package jobstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/atomicfile"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobstore"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/procid"
)

// fixture is a store over a temporary state directory with a clock the
// test moves.
type fixture struct {
	t      testing.TB
	st     *jobstore.Store
	state  string
	root   string
	now    time.Time
	base   time.Time
	procs  *procid.Source
	self   procid.Identity
	bootID string
}

func newFixture(t testing.TB) *fixture {
	return newFixtureWith(t, procid.Default())
}

func newFixtureWith(t testing.TB, procs *procid.Source) *fixture {
	t.Helper()
	real := procid.Default()
	self, err := real.Self()
	if err != nil {
		t.Fatal(err)
	}
	boot, err := real.BootID()
	if err != nil || boot == "" {
		t.Fatalf("boot id: %q, %v", boot, err)
	}
	state := t.TempDir()
	st, err := jobstore.Open(state, procs)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, st: st, state: state, root: filepath.Join(state, "jobs"), procs: procs, self: self, bootID: boot}
	f.base = time.Now().UTC().Truncate(time.Second)
	f.now = f.base
	st.Now = func() time.Time { return f.now }
	// The tests read the index after each admission.
	st.IndexEvery = 1
	fi, err := os.Stat(f.root)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("jobs root: %v, %v; want a 0700 directory", fi, err)
	}
	return f
}

// lettered is a valid ID with hex letters, for upper-case variants.
const lettered = "0f8fad5b-d9cb-469f-a165-70867728950e"

// id returns the n-th test job ID.
func id(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012x", n) }

func (f *fixture) write(id, name string, v any) {
	f.t.Helper()
	if err := atomicfile.WriteJSON(filepath.Join(f.st.Dir(id), name), v); err != nil {
		f.t.Fatal(err)
	}
}

// job creates the directory and job.json of id.
func (f *fixture) job(id string, created time.Time) {
	f.t.Helper()
	if err := os.Mkdir(f.st.Dir(id), 0o700); err != nil {
		f.t.Fatal(err)
	}
	f.write(id, jobmeta.JobFile, &jobmeta.Job{Schema: jobmeta.SchemaVersion, ID: id, Name: "job " + id[len(id)-4:],
		FailureDomain: jobmeta.DomainSharedParentCgroup, CreatedAt: created})
}

// terminal creates an exited job that completed at completed.
func (f *fixture) terminal(id string, created, completed time.Time, read bool) {
	f.t.Helper()
	f.job(id, created)
	code := 0
	f.write(id, jobmeta.ResultFile, &jobmeta.Result{Schema: jobmeta.SchemaVersion, ExitCode: &code, CompletedAt: completed})
	if read {
		f.write(id, jobmeta.ReadMarkFile, &jobmeta.ReadMark{Schema: jobmeta.SchemaVersion, ReadAt: completed})
	}
}

// running creates a job whose supervisor is this test process.
func (f *fixture) running(id string, created time.Time) {
	f.t.Helper()
	f.job(id, created)
	f.identity(id, f.self, f.bootID)
}

func (f *fixture) identity(id string, sup procid.Identity, boot string) {
	f.t.Helper()
	started := f.now
	f.write(id, jobmeta.ClaimFile, &jobmeta.Claim{Schema: jobmeta.SchemaVersion, Supervisor: sup,
		BootID: boot, ClaimedAt: f.now, StartedAt: &started})
}

// newJob is a fallback job to admit, whose supervisor the launcher
// recorded and which is gone: whatever end its directory holds counts.
func (f *fixture) newJob(id string) *jobmeta.Job {
	return &jobmeta.Job{Schema: jobmeta.SchemaVersion, ID: id, FailureDomain: jobmeta.DomainSharedParentCgroup, CreatedAt: f.now,
		Supervisor: &procid.Identity{PID: f.self.PID, StartTicks: f.self.StartTicks + 1}}
}

// dirs lists the entries of the jobs root, sorted, without the lock file
// and the admission index.
func (f *fixture) dirs() []string {
	f.t.Helper()
	f.st.Settle()
	entries, err := os.ReadDir(f.root)
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.Name() != ".admission.lock" && e.Name() != ".index.json" {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

func (f *fixture) get(id string) *jobmeta.Record {
	f.t.Helper()
	r, err := f.st.Get(id)
	if err != nil {
		f.t.Fatalf("Get(%s): %v", id, err)
	}
	return r
}

func sorted(ids ...string) []string {
	out := append([]string(nil), ids...)
	sort.Strings(out)
	return out
}

func without(all []string, drop ...string) []string {
	gone := map[string]bool{}
	for _, d := range drop {
		gone[d] = true
	}
	var out []string
	for _, s := range all {
		if !gone[s] {
			out = append(out, s)
		}
	}
	return sorted(out...)
}

func wantCode(t *testing.T, err error, code errcode.Code) *errcode.Error {
	t.Helper()
	var e *errcode.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("err = %v, want code %s", err, code)
	}
	return e
}

func sameDirs(t *testing.T, label string, got, want []string) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: job directories\n got %v\nwant %v", label, got, want)
	}
}

// supervised admits job jid as the launcher does a fallback job, its
// supervisor a real process on record and claimed, and returns the
// process; kill it to end the job's supervisor.
func (f *fixture) supervised(jid string) *exec.Cmd {
	f.t.Helper()
	return f.supervisedJob(f.newJob(jid))
}

// supervisedJob is supervised of the job j.
func (f *fixture) supervisedJob(j *jobmeta.Job) *exec.Cmd {
	f.t.Helper()
	sup := exec.Command("sleep", "60")
	if err := sup.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { sup.Process.Kill(); sup.Wait() })
	ident, _, err := f.procs.Lookup(sup.Process.Pid)
	if err != nil {
		f.t.Fatal(err)
	}
	j.Supervisor = &ident
	if err := f.st.Admit(j); err != nil {
		f.t.Fatal(err)
	}
	f.identity(j.ID, ident, f.bootID)
	return sup
}

func TestAdmissionLimit(t *testing.T) {
	f := newFixture(t)
	var live []string
	var fifth *exec.Cmd
	for i := 0; i < limits.MaxLiveJobs-1; i++ {
		if i == 5 {
			fifth = f.supervised(id(i))
			live = append(live, id(i))
			continue
		}
		f.running(id(i), f.base.Add(-time.Duration(i)*time.Minute))
		live = append(live, id(i))
	}
	// A stop was requested for one of them: stopping is still live.
	f.write(id(0), jobmeta.StopFile, &jobmeta.StopRequest{Schema: jobmeta.SchemaVersion, RequestedAt: f.now})
	// Terminal jobs do not take a live slot.
	for i := 100; i < 110; i++ {
		f.terminal(id(i), f.base.Add(-time.Hour), f.base.Add(-time.Hour), false)
	}
	// The 32nd live job is admitted and starts out as starting.
	if err := f.st.Admit(f.newJob(id(200))); err != nil {
		t.Fatalf("32nd live job: %v", err)
	}
	if r := f.get(id(200)); r.State != jobmeta.Starting || r.Terminal {
		t.Errorf("admitted job: state %s terminal %v, want starting", r.State, r.Terminal)
	}
	fi, err := os.Stat(f.st.Dir(id(200)))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("admitted job directory: %v, %v; want 0700", fi, err)
	}
	fi, err = os.Stat(filepath.Join(f.st.Dir(id(200)), jobmeta.JobFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("admitted job.json: %v, %v; want 0600", fi, err)
	}
	if r := f.get(id(0)); r.State != jobmeta.Stopping {
		t.Errorf("job with a stop request: state %s, want stopping", r.State)
	}
	if r := f.get(id(1)); r.State != jobmeta.Running {
		t.Errorf("job with a live supervisor: state %s, want running", r.State)
	}

	before := f.dirs()
	err = f.st.Admit(f.newJob(id(201)))
	e := wantCode(t, err, errcode.JobTableFull)
	if !strings.Contains(e.Message, "32") || !strings.Contains(e.Message, "process.stop") {
		t.Errorf("job_table_full message %q does not give the limit and the remedy", e.Message)
	}
	sameDirs(t, "after refusal", f.dirs(), before)
	if _, err := os.Stat(f.st.Dir(id(201))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused job has a directory: %v", err)
	}

	// A terminal record in a job's directory while its supervisor runs
	// is what the job wrote, not its end: it still counts.
	code := 0
	f.write(id(5), jobmeta.ResultFile, &jobmeta.Result{Schema: jobmeta.SchemaVersion, ExitCode: &code, CompletedAt: f.now})
	wantCode(t, f.st.Admit(f.newJob(id(201))), errcode.JobTableFull)
	if r := f.get(id(5)); r.State != jobmeta.Running || r.Terminal {
		t.Fatalf("a job that wrote its own result.json: %s, want running", r.State)
	}
	// Its supervisor ends: the record is believed and the slot is free.
	fifth.Process.Kill()
	fifth.Wait()
	if err := f.st.Admit(f.newJob(id(201))); err != nil {
		t.Fatalf("admission after a job ended: %v", err)
	}
	// And the table is full again.
	wantCode(t, f.st.Admit(f.newJob(id(202))), errcode.JobTableFull)
}

func TestAdmitRejectsInvalidID(t *testing.T) {
	f := newFixture(t)
	for _, bad := range []string{"", "../x", "x", strings.ToUpper(lettered), id(1) + "\n"} {
		j := f.newJob(bad)
		if err := f.st.Admit(j); err == nil {
			t.Errorf("Admit(%q) succeeded", bad)
		}
	}
	sameDirs(t, "after invalid admissions", f.dirs(), nil)
	if _, err := os.Stat(filepath.Join(f.state, "x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Admit(../x) created something outside the store: %v", err)
	}
}

func TestRetentionExpiry(t *testing.T) {
	f := newFixture(t)
	day := 24 * time.Hour
	f.terminal(id(1), f.base.Add(-2*time.Hour), f.base.Add(-time.Hour), false)  // unread
	f.terminal(id(2), f.base.Add(-3*time.Hour), f.base.Add(-2*time.Hour), true) // read
	f.terminal(id(3), f.base.Add(-time.Hour), f.base, false)                    // ends last
	f.running(id(4), f.base.Add(-30*day))                                       // old but live
	// A worker_lost job created long ago whose end is only known from
	// reconciliation: its retention runs from reconciled_at.
	f.job(id(5), f.base.Add(-30*day))
	f.identity(id(5), f.self, f.bootID)
	f.write(id(5), jobmeta.ReconciledFile, &jobmeta.Reconciled{Schema: jobmeta.SchemaVersion,
		State: jobmeta.WorkerLost, ReconciledAt: f.base.Add(-30 * time.Minute), Evidence: "supervisor_gone"})
	all := sorted(id(1), id(2), id(3), id(4), id(5))

	if err := f.st.Admit(f.newJob(id(10))); err != nil {
		t.Fatal(err)
	}
	sameDirs(t, "nothing expired yet", f.dirs(), sorted(append(all, id(10))...))
	// Make the admitted job terminal so the clock move does not affect it.
	f.write(id(10), jobmeta.ReadMarkFile, &jobmeta.ReadMark{Schema: 1, ReadAt: f.now})
	code := 0
	f.write(id(10), jobmeta.ResultFile, &jobmeta.Result{Schema: 1, ExitCode: &code, CompletedAt: f.now})

	// Exactly 7 days after id(1) ended: not yet expired.
	f.now = f.base.Add(-time.Hour + limits.TerminalJobRetention)
	if err := f.st.Admit(f.newJob(id(11))); err != nil {
		t.Fatal(err)
	}
	sameDirs(t, "at the retention boundary", f.dirs(), without(append(all, id(10), id(11)), id(2)))
	f.write(id(11), jobmeta.ResultFile, &jobmeta.Result{Schema: 1, ExitCode: &code, CompletedAt: f.now})

	// One second later id(1) (unread) is expired too; id(3), id(10) and id(11) are not.
	f.now = f.now.Add(time.Second)
	if err := f.st.Admit(f.newJob(id(12))); err != nil {
		t.Fatal(err)
	}
	sameDirs(t, "after expiry", f.dirs(), sorted(id(3), id(4), id(5), id(10), id(11), id(12)))
	if r := f.get(id(4)); r.State != jobmeta.Running {
		t.Errorf("old live job: state %s, want running", r.State)
	}
}

func TestRetentionFullOfUnread(t *testing.T) {
	f := newFixture(t)
	var all []string
	for i := 0; i < limits.MaxRetainedTerminalJobs-1; i++ {
		created := f.base.Add(-time.Duration(i+1) * time.Minute)
		f.terminal(id(i), created, created.Add(time.Second), false)
		all = append(all, id(i))
	}
	f.running(id(500), f.base)
	all = append(all, id(500))
	// 99 unread terminal jobs leave room for one more.
	if err := f.st.Admit(f.newJob(id(600))); err != nil {
		t.Fatalf("with 99 unread terminal jobs: %v", err)
	}
	all = append(all, id(600))
	sameDirs(t, "99 unread", f.dirs(), sorted(all...))

	// The 100th unread terminal job fills retention.
	f.terminal(id(99), f.base.Add(-200*time.Minute), f.base.Add(-200*time.Minute), false)
	all = append(all, id(99))
	before := f.dirs()
	e := wantCode(t, f.st.Admit(f.newJob(id(601))), errcode.RetentionFull)
	if !strings.Contains(e.Message, "process.output") || !strings.Contains(e.Message, "process.forget") {
		t.Errorf("retention_full message %q does not name process.output and process.forget", e.Message)
	}
	sameDirs(t, "after retention_full", f.dirs(), before)
	sameDirs(t, "after retention_full", f.dirs(), sorted(all...))

	// More unread jobs (none expired) are still never pruned to make room.
	for i := 700; i < 750; i++ {
		at := f.base.Add(-time.Duration(i) * time.Minute)
		f.terminal(id(i), at, at, false)
		all = append(all, id(i))
	}
	wantCode(t, f.st.Admit(f.newJob(id(601))), errcode.RetentionFull)
	sameDirs(t, "150 unread", f.dirs(), sorted(all...))
}

func TestRetentionExpiryFreesUnread(t *testing.T) {
	f := newFixture(t)
	var recent, old []string
	for i := 0; i < 70; i++ {
		at := f.base.Add(-time.Duration(i+1) * time.Minute)
		f.terminal(id(i), at, at, false)
		recent = append(recent, id(i))
	}
	for i := 100; i < 150; i++ {
		at := f.base.Add(-24*time.Hour - time.Duration(i)*time.Minute)
		f.terminal(id(i), at, at, false)
		old = append(old, id(i))
	}
	all := append(append([]string{}, recent...), old...)
	wantCode(t, f.st.Admit(f.newJob(id(900))), errcode.RetentionFull)
	sameDirs(t, "120 unread", f.dirs(), sorted(all...))

	// Six days later the older 50 are past 7 days; the 70 others are not.
	f.now = f.base.Add(6*24*time.Hour + 101*time.Minute)
	if err := f.st.Admit(f.newJob(id(900))); err != nil {
		t.Fatalf("after expiry: %v", err)
	}
	sameDirs(t, "after expiry", f.dirs(), sorted(append(recent, id(900))...))
}

func TestRetentionPrunesOldestRead(t *testing.T) {
	cases := []struct {
		name    string
		total   int
		read    []int // indices of read jobs; 0 is the newest
		removed []int
		full    bool // admission refused with retention_full
	}{
		{"100 with the two oldest read", 100, []int{98, 99}, []int{99}, false},
		{"100 with scattered reads", 100, []int{3, 50, 97}, []int{97}, false},
		{"103 with scattered reads", 103, []int{5, 40, 60, 98, 101}, []int{101, 98, 60, 40}, false},
		{"104 needs the newest read one too", 104, []int{2, 50, 80, 90, 103}, []int{103, 90, 80, 50, 2}, false},
		{"100 with only the newest read", 100, []int{0}, []int{0}, false},
		{"99 with reads: nothing to prune", 99, []int{10, 98}, nil, false},
		{"100 unread", 100, nil, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			var all []string
			isRead := map[int]bool{}
			for _, i := range c.read {
				isRead[i] = true
			}
			for i := 0; i < c.total; i++ {
				created := f.base.Add(-time.Duration(i+1) * time.Minute)
				f.terminal(id(i), created, created.Add(30*time.Second), isRead[i])
				all = append(all, id(i))
			}
			// A live job, older than all of them, is not part of retention.
			f.running(id(500), f.base.Add(-48*time.Hour))
			all = append(all, id(500))
			var removed []string
			for _, i := range c.removed {
				removed = append(removed, id(i))
			}
			err := f.st.Admit(f.newJob(id(600)))
			if c.full {
				wantCode(t, err, errcode.RetentionFull)
			} else if err != nil {
				t.Fatalf("Admit: %v", err)
			} else {
				all = append(all, id(600))
			}
			sameDirs(t, c.name, f.dirs(), without(all, removed...))
		})
	}
}

func TestCorruptJob(t *testing.T) {
	f := newFixture(t)
	garbage := []byte("{\"schema\":1,\"id\":\"not json")
	if err := os.Mkdir(f.st.Dir(id(1)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.st.Dir(id(1)), jobmeta.JobFile), garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	// A valid job.json with a corrupt result.json is corrupt too.
	f.job(id(2), f.base.Add(-time.Hour))
	if err := os.WriteFile(filepath.Join(f.st.Dir(id(2)), jobmeta.ResultFile), []byte(`{"schema":9}`), 0o600); err != nil {
		t.Fatal(err)
	}
	f.running(id(3), f.base.Add(-time.Minute))
	code := 7
	f.job(id(4), f.base.Add(-2*time.Minute))
	f.write(id(4), jobmeta.ResultFile, &jobmeta.Result{Schema: 1, ExitCode: &code, CompletedAt: f.base.Add(-time.Minute)})

	recs, err := f.st.List()
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*jobmeta.Record{}
	for _, r := range recs {
		byID[r.ProcessID] = r
	}
	if len(recs) != 4 || len(byID) != 4 {
		t.Fatalf("List returned %d records (%d distinct), want 4", len(recs), len(byID))
	}
	for _, c := range []string{id(1), id(2)} {
		r := byID[c]
		if r.State != jobmeta.Corrupt || r.Terminal || r.State.Live() || r.Error != "metadata_corrupt" {
			t.Errorf("%s: state %s terminal %v error %q, want corrupt, not terminal, metadata_corrupt", c, r.State, r.Terminal, r.Error)
		}
	}
	if r := byID[id(3)]; r.State != jobmeta.Running {
		t.Errorf("running job next to corrupt ones: %s", r.State)
	}
	if r := byID[id(4)]; r.State != jobmeta.Exited || r.ExitCode == nil || *r.ExitCode != 7 {
		t.Errorf("exited job next to corrupt ones: %s %v", r.State, r.ExitCode)
	}
	if r, err := f.st.Get(id(1)); err != nil || r.State != jobmeta.Corrupt {
		t.Errorf("Get(corrupt) = %+v, %v", r, err)
	}
	wantCode(t, func() error { _, err := f.st.Forget(id(1)); return err }(), errcode.InvalidArgument)

	// Corrupt jobs are neither live nor terminal: 31 live + 2 corrupt leave
	// a slot, and 98 unread terminal + 2 corrupt leave retention room.
	for i := 10; i < 10+limits.MaxLiveJobs-2; i++ {
		f.running(id(i), f.base.Add(-time.Hour))
	}
	for i := 100; i < 100+limits.MaxRetainedTerminalJobs-2; i++ {
		f.terminal(id(i), f.base.Add(-time.Hour), f.base.Add(-time.Hour), false)
	}
	if err := f.st.Admit(f.newJob(id(900))); err != nil {
		t.Fatalf("Admit with corrupt jobs around: %v", err)
	}
	// Now 99 terminal (98 + id(4)) and 32 live.
	wantCode(t, f.st.Admit(f.newJob(id(901))), errcode.JobTableFull)
	f.write(id(900), jobmeta.ResultFile, &jobmeta.Result{Schema: 1, ExitCode: &code, CompletedAt: f.now})
	wantCode(t, f.st.Admit(f.newJob(id(901))), errcode.RetentionFull)

	// A month later every terminal job has expired; the corrupt ones stay,
	// byte for byte.
	f.now = f.base.Add(30 * 24 * time.Hour)
	if err := f.st.Admit(f.newJob(id(901))); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{id(1), id(2)} {
		if r := f.get(c); r.State != jobmeta.Corrupt {
			t.Errorf("%s after pruning: %s, want corrupt", c, r.State)
		}
	}
	got, err := os.ReadFile(filepath.Join(f.st.Dir(id(1)), jobmeta.JobFile))
	if err != nil || !bytes.Equal(got, garbage) {
		t.Errorf("corrupt job.json changed: %q, %v", got, err)
	}
	if _, err := os.Stat(f.st.Dir(id(4))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("expired terminal job survived: %v", err)
	}
}

func TestDirectoryWithoutJobFile(t *testing.T) {
	f := newFixture(t)
	if err := os.Mkdir(f.st.Dir(id(1)), 0o700); err != nil {
		t.Fatal(err)
	}
	// Fresh: it is being created under the admission lock; not listed.
	recs, err := f.st.List()
	if err != nil || len(recs) != 0 {
		t.Fatalf("List = %v, %v; want nothing", recs, err)
	}
	wantCode(t, func() error { _, err := f.st.Get(id(1)); return err }(), errcode.NotFound)
	// Long after: damaged, listed as corrupt and never pruned.
	f.now = f.base.Add(30 * 24 * time.Hour)
	recs, err = f.st.List()
	if err != nil || len(recs) != 1 || recs[0].State != jobmeta.Corrupt {
		t.Fatalf("List = %v, %v; want one corrupt record", recs, err)
	}
	if err := f.st.Admit(f.newJob(id(2))); err != nil {
		t.Fatal(err)
	}
	sameDirs(t, "after admission", f.dirs(), sorted(id(1), id(2)))
}

func TestGetMalformedIDTouchesNothing(t *testing.T) {
	f := newFixture(t)
	// Job-like directories at the places a malformed ID would reach; each
	// names a dead supervisor, so reading it would write reconciled.json.
	dead := procid.Identity{PID: f.self.PID, StartTicks: f.self.StartTicks + 1}
	upper := strings.ToUpper(lettered)
	targets := map[string]string{
		"../x":                 filepath.Join(f.state, "x"),
		"x":                    filepath.Join(f.root, "x"),
		upper:                  filepath.Join(f.root, upper),
		id(7) + "/../" + upper: filepath.Join(f.root, upper),
	}
	for _, dir := range targets {
		os.MkdirAll(dir, 0o700)
		atomicfile.WriteJSON(filepath.Join(dir, jobmeta.JobFile), &jobmeta.Job{Schema: 1, ID: id(7),
			FailureDomain: jobmeta.DomainSharedParentCgroup, CreatedAt: f.base.Add(-time.Hour)})
		atomicfile.WriteJSON(filepath.Join(dir, jobmeta.ClaimFile), &jobmeta.Claim{Schema: 1, Supervisor: dead, BootID: f.bootID})
	}
	for bad, dir := range targets {
		r, err := f.st.Get(bad)
		if r != nil {
			t.Errorf("Get(%q) returned a record", bad)
		}
		wantCode(t, err, errcode.InvalidArgument)
		_, err = f.st.Forget(bad)
		wantCode(t, err, errcode.InvalidArgument)
		if _, err := os.Stat(filepath.Join(dir, jobmeta.ReconciledFile)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Get(%q) wrote into %s", bad, dir)
		}
		if _, err := os.Stat(filepath.Join(dir, jobmeta.JobFile)); err != nil {
			t.Errorf("Forget(%q) removed %s: %v", bad, dir, err)
		}
	}
	for _, bad := range []string{"", "..", ".", "/", id(7) + "\n", " " + id(7)} {
		_, err := f.st.Get(bad)
		wantCode(t, err, errcode.InvalidArgument)
	}
	// A missing but valid ID is not_found.
	_, err := f.st.Get(id(8))
	wantCode(t, err, errcode.NotFound)
	_, err = f.st.Forget(id(8))
	wantCode(t, err, errcode.NotFound)
	if _, err := os.Stat(f.st.Dir(id(8))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Get of a missing job created it: %v", err)
	}
}

func TestRecordFromFiles(t *testing.T) {
	f := newFixture(t)
	n3 := int64(3)
	tr := false
	// Exited, read, with an identity and capture counters.
	f.job(id(1), f.base.Add(-3*time.Hour))
	f.identity(id(1), procid.Identity{PID: 1 << 22, StartTicks: 5}, f.bootID)
	code := 2
	res := &jobmeta.Result{Schema: 1, ExitCode: &code, CompletedAt: f.base.Add(-2 * time.Hour),
		Capture: jobmeta.Capture{Stdout: jobmeta.StreamCapture{ObservedBytes: &n3, RetainedBytes: &n3, Truncated: &tr, Complete: true}}}
	f.write(id(1), jobmeta.ResultFile, res)
	f.write(id(1), jobmeta.ReadMarkFile, &jobmeta.ReadMark{Schema: 1, ReadAt: f.base})
	// Stopped on request, by signal.
	f.job(id(2), f.base.Add(-2*time.Hour))
	f.write(id(2), jobmeta.StopFile, &jobmeta.StopRequest{Schema: 1, RequestedAt: f.base.Add(-90 * time.Minute)})
	f.write(id(2), jobmeta.ResultFile, &jobmeta.Result{Schema: 1, Signal: "SIGTERM", StopRequested: true, CompletedAt: f.base.Add(-time.Hour)})
	// The shell never started.
	f.job(id(3), f.base.Add(-time.Hour))
	f.write(id(3), jobmeta.ResultFile, &jobmeta.Result{Schema: 1, StartError: "shell_start_failed", CompletedAt: f.base})

	r := f.get(id(1))
	if r.State != jobmeta.Exited || !r.Terminal || !r.Read || r.ExitCode == nil || *r.ExitCode != 2 ||
		r.CompletedAt == nil || !r.CompletedAt.Equal(res.CompletedAt) || r.ReconciledAt != nil {
		t.Errorf("exited record: %+v", r)
	}
	if r.Claim == nil || r.Claim.Supervisor.PID != 1<<22 || r.Claim.BootID != f.bootID {
		t.Errorf("exited record identity: %+v", r.Claim)
	}
	if r.Capture == nil || !reflect.DeepEqual(*r.Capture, res.Capture) {
		t.Errorf("exited record capture: %+v, want the sealed counters %+v", r.Capture, res.Capture)
	}
	if _, err := os.Stat(filepath.Join(f.st.Dir(id(1)), jobmeta.ReconciledFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a job with a terminal record was reconciled: %v", err)
	}
	r = f.get(id(2))
	if r.State != jobmeta.StoppedByRequest || r.Signal != "SIGTERM" || r.ExitCode != nil || r.Read ||
		r.StopRequestAt == nil || !r.StopRequestAt.Equal(f.base.Add(-90*time.Minute)) {
		t.Errorf("stopped record: %+v", r)
	}
	r = f.get(id(3))
	if r.State != jobmeta.LaunchFailed || !r.Terminal || r.Error != "shell_start_failed" {
		t.Errorf("start-error record: %+v", r)
	}
	recs, err := f.st.List()
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, r := range recs {
		order = append(order, r.ProcessID)
	}
	if !reflect.DeepEqual(order, []string{id(3), id(2), id(1)}) {
		t.Errorf("List order %v, want newest first", order)
	}
}

func TestWorkerLost(t *testing.T) {
	f := newFixture(t)
	// A supervisor that has exited: PID gone.
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	gone, _, err := f.procs.Lookup(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Process.Kill()
	cmd.Wait()

	cases := map[string]procid.Identity{
		id(1): gone,
		// The PID is alive but belongs to another incarnation.
		id(2): {PID: f.self.PID, StartTicks: f.self.StartTicks + 1},
	}
	for jid, sup := range cases {
		f.job(jid, f.base.Add(-time.Hour))
		f.identity(jid, sup, f.bootID)
	}
	for jid := range cases {
		r := f.get(jid)
		if r.State != jobmeta.WorkerLost || !r.Terminal || r.CompletedAt != nil ||
			r.ReconciledAt == nil || !r.ReconciledAt.Equal(f.base) {
			t.Fatalf("%s: state %s terminal %v completed %v reconciled %v; want worker_lost reconciled at %v",
				jid, r.State, r.Terminal, r.CompletedAt, r.ReconciledAt, f.base)
		}
		path := filepath.Join(f.st.Dir(jid), jobmeta.ReconciledFile)
		rc, err := jobmeta.Read[jobmeta.Reconciled](path)
		if err != nil {
			t.Fatalf("%s: reconciled.json: %v", jid, err)
		}
		if rc.State != jobmeta.WorkerLost || !rc.ReconciledAt.Equal(f.base) || rc.Evidence != "supervisor_gone" {
			t.Errorf("%s: reconciled.json = %+v", jid, rc)
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: reconciled.json mode %v", jid, fi.Mode().Perm())
		}
	}
	// Later, even with evidence that would now say otherwise (the identity
	// rewritten to this live process), the conclusion stands.
	f.now = f.base.Add(time.Hour)
	f.identity(id(2), f.self, f.bootID)
	for jid := range cases {
		r := f.get(jid)
		if r.State != jobmeta.WorkerLost || r.ReconciledAt == nil || !r.ReconciledAt.Equal(f.base) {
			t.Errorf("%s re-read: state %s reconciled %v; want worker_lost at %v", jid, r.State, r.ReconciledAt, f.base)
		}
	}
	recs, err := f.st.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.State != jobmeta.WorkerLost {
			t.Errorf("List: %s is %s, want worker_lost", r.ProcessID, r.State)
		}
	}
}

func TestUserManagerLost(t *testing.T) {
	f := newFixture(t)
	deadSelf := procid.Identity{PID: f.self.PID, StartTicks: f.self.StartTicks + 1}
	f.job(id(1), f.base.Add(-time.Hour))
	f.write(id(1), jobmeta.ClaimFile, &jobmeta.Claim{Schema: 1, Supervisor: deadSelf, BootID: f.bootID, Manager: &deadSelf})
	f.job(id(2), f.base.Add(-time.Hour))
	f.write(id(2), jobmeta.ClaimFile, &jobmeta.Claim{Schema: 1, Supervisor: deadSelf, BootID: f.bootID, Manager: &f.self})
	if r := f.get(id(1)); r.State != jobmeta.UserManagerLost {
		t.Errorf("manager gone: %s, want user_manager_lost", r.State)
	}
	if r := f.get(id(2)); r.State != jobmeta.WorkerLost {
		t.Errorf("manager alive, supervisor gone: %s, want worker_lost", r.State)
	}
}

func TestHostRebooted(t *testing.T) {
	src, err := procid.NewSource("/proc")
	if err != nil {
		t.Fatal(err)
	}
	realBoot := src.BootIDFunc
	src.BootIDFunc = func() (string, error) { return "11111111-2222-4333-8444-555555555555", nil }
	f := newFixtureWith(t, src)
	// The supervisor PID and start ticks match this live process, but the
	// claim is from another boot.
	f.running(id(1), f.base.Add(-time.Hour))
	r := f.get(id(1))
	if r.State != jobmeta.HostRebooted || !r.Terminal || r.ReconciledAt == nil || !r.ReconciledAt.Equal(f.base) {
		t.Fatalf("state %s terminal %v reconciled %v; want host_rebooted at %v", r.State, r.Terminal, r.ReconciledAt, f.base)
	}
	if r.Claim == nil || r.Claim.BootID != f.bootID {
		t.Errorf("identity not kept: %+v", r.Claim)
	}
	rc, err := jobmeta.Read[jobmeta.Reconciled](filepath.Join(f.st.Dir(id(1)), jobmeta.ReconciledFile))
	if err != nil || rc.State != jobmeta.HostRebooted || rc.Evidence != "boot_id_changed" || !rc.ReconciledAt.Equal(f.base) {
		t.Fatalf("reconciled.json = %+v, %v", rc, err)
	}
	// Never resumed: back on the recorded boot, the job stays rebooted.
	src.BootIDFunc = realBoot
	f.now = f.base.Add(time.Minute)
	if r := f.get(id(1)); r.State != jobmeta.HostRebooted || !r.ReconciledAt.Equal(f.base) {
		t.Errorf("re-read: %s at %v, want host_rebooted at %v", r.State, r.ReconciledAt, f.base)
	}
	// A job claimed on the current (real) boot is running.
	f.running(id(2), f.now)
	if r := f.get(id(2)); r.State != jobmeta.Running {
		t.Errorf("job on the current boot: %s, want running", r.State)
	}
}

func TestForget(t *testing.T) {
	f := newFixture(t)
	f.running(id(1), f.base.Add(-time.Hour))
	if err := f.st.Admit(f.newJob(id(2))); err != nil { // starting
		t.Fatal(err)
	}
	f.terminal(id(3), f.base.Add(-time.Hour), f.base.Add(-time.Minute), false)
	for _, live := range []string{id(1), id(2)} {
		r, err := f.st.Forget(live)
		if r != nil {
			t.Errorf("Forget(%s) returned a record", live)
		}
		e := wantCode(t, err, errcode.InvalidArgument)
		if !strings.Contains(e.Message, "process.stop") {
			t.Errorf("Forget(%s) message %q does not say how to stop it", live, e.Message)
		}
	}
	sameDirs(t, "after refused forgets", f.dirs(), sorted(id(1), id(2), id(3)))

	r, err := f.st.Forget(id(3))
	if err != nil {
		t.Fatal(err)
	}
	if r.ProcessID != id(3) || r.State != jobmeta.Exited {
		t.Errorf("Forget returned %+v", r)
	}
	sameDirs(t, "after forget", f.dirs(), sorted(id(1), id(2)))
	_, err = f.st.Get(id(3))
	wantCode(t, err, errcode.NotFound)
	_, err = f.st.Forget(id(3))
	wantCode(t, err, errcode.NotFound)
}

func TestMarkLaunchFailed(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < limits.MaxLiveJobs-1; i++ {
		f.running(id(i), f.base)
	}
	if err := f.st.Admit(f.newJob(id(100))); err != nil {
		t.Fatal(err)
	}
	wantCode(t, f.st.Admit(f.newJob(id(101))), errcode.JobTableFull)

	f.now = f.base.Add(time.Second)
	if err := f.st.MarkLaunchFailed(id(100), jobmeta.LaunchErrClaimTimeout); err != nil {
		t.Fatal(err)
	}
	r := f.get(id(100))
	if r.State != jobmeta.LaunchFailed || !r.Terminal || !r.Read || r.Error != jobmeta.LaunchErrClaimTimeout {
		t.Errorf("record: state %s terminal %v read %v error %q; want launch_failed, read, %s",
			r.State, r.Terminal, r.Read, r.Error, jobmeta.LaunchErrClaimTimeout)
	}
	j, err := f.st.Launch(id(100))
	if err != nil || !j.LaunchFailed || j.FailedAt == nil || !j.FailedAt.Equal(f.now) || !j.CreatedAt.Equal(f.base) {
		t.Errorf("launch record = %+v, %v", j, err)
	}
	// Its live slot is free.
	if err := f.st.Admit(f.newJob(id(101))); err != nil {
		t.Fatalf("admission after a failed launch: %v", err)
	}
	// A launch-failed job can be forgotten.
	if _, err := f.st.Forget(id(100)); err != nil {
		t.Errorf("Forget(launch_failed): %v", err)
	}
	// Marking a job that does not exist fails without creating it.
	if err := f.st.MarkLaunchFailed(id(555), jobmeta.LaunchErrInternal); err == nil {
		t.Error("MarkLaunchFailed of a missing job succeeded")
	}
	if _, err := os.Stat(f.st.Dir(id(555))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("MarkLaunchFailed created a directory: %v", err)
	}
}

func TestOrphanedLaunchConcluded(t *testing.T) {
	f := newFixture(t)
	if err := f.st.Admit(f.newJob(id(1))); err != nil {
		t.Fatal(err)
	}
	// Within the claim window the job is starting; long after it without a
	// claim, its launcher died: launch_failed, persisted.
	f.now = f.base.Add(limits.ClaimTimeout)
	if r := f.get(id(1)); r.State != jobmeta.Starting {
		t.Errorf("at the claim timeout: %s, want starting", r.State)
	}
	if _, err := os.Stat(filepath.Join(f.st.Dir(id(1)), jobmeta.ReconciledFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a starting job was reconciled: %v", err)
	}
	f.now = f.base.Add(2*limits.ClaimTimeout + time.Second)
	r := f.get(id(1))
	if r.State != jobmeta.LaunchFailed || r.ReconciledAt == nil || !r.ReconciledAt.Equal(f.now) {
		t.Fatalf("orphan: %s reconciled %v", r.State, r.ReconciledAt)
	}
	rc, err := jobmeta.Read[jobmeta.Reconciled](filepath.Join(f.st.Dir(id(1)), jobmeta.ReconciledFile))
	if err != nil || rc.State != jobmeta.LaunchFailed || rc.Evidence != "no_identity_claim" {
		t.Errorf("reconciled.json = %+v, %v", rc, err)
	}
}

// keyed is a job of owner started with the key whose digest is key.
func (f *fixture) keyed(jid, owner, key string) *jobmeta.Job {
	j := f.newJob(jid)
	j.Owner = owner
	j.Idempotency = &jobmeta.Idempotency{Key: key, Request: strings.Repeat("b", 64)}
	return j
}

// TestIdempotencyKeyAdmitsOnce: a second job of the same owner with the
// same key digest is not admitted (Admit answers with the job that holds
// the key), while another owner's or another key's job is; the key holds
// once the job has ended and sits in the admission index, across a new
// Store on the same directory, and is free again once the job is
// forgotten.
func TestIdempotencyKeyAdmitsOnce(t *testing.T) {
	f := newFixture(t)
	keyA, keyB := strings.Repeat("a", 64), strings.Repeat("c", 64)
	if err := f.st.Admit(f.keyed(id(1), "tok_alice", keyA)); err != nil {
		t.Fatal(err)
	}
	taken := func(st *jobstore.Store, label string, err error) {
		t.Helper()
		var k *jobstore.KeyTaken
		if !errors.As(err, &k) || k.ID != id(1) || k.Request != strings.Repeat("b", 64) {
			t.Fatalf("%s: Admit = %v, want the key taken by %s", label, err, id(1))
		}
		if got, err := st.Keyed("tok_alice", keyA); err != nil || got == nil || *got != *k {
			t.Fatalf("%s: Keyed = %+v, %v, want %+v", label, got, err, k)
		}
	}
	taken(f.st, "live", f.st.Admit(f.keyed(id(2), "tok_alice", keyA)))
	if _, err := os.Stat(f.st.Dir(id(2))); !os.IsNotExist(err) {
		t.Fatalf("the refused job's directory: %v, want none", err)
	}
	if err := f.st.Admit(f.keyed(id(3), "tok_bob", keyA)); err != nil {
		t.Fatalf("another owner's same key: %v", err)
	}
	if err := f.st.Admit(f.keyed(id(4), "tok_alice", keyB)); err != nil {
		t.Fatalf("another key: %v", err)
	}
	if got, _ := f.st.Keyed("tok_carol", keyA); got != nil {
		t.Fatalf("Keyed finds %+v for an owner without the key", got)
	}
	// Ended: admission indexes it, and the index keeps its key.
	f.write(id(1), jobmeta.ResultFile, &jobmeta.Result{Schema: jobmeta.SchemaVersion, CompletedAt: f.now})
	if err := f.st.Admit(f.newJob(id(5))); err != nil {
		t.Fatal(err)
	}
	if ids := indexedIDs(t, f); !slices.Contains(ids, id(1)) {
		t.Fatalf("index holds %v, want the ended job", ids)
	}
	// The index alone answers: neither the launch record nor job.json
	// says any more.
	os.Remove(filepath.Join(f.state, "launches", id(1)+".json"))
	f.write(id(1), jobmeta.JobFile, f.newJob(id(1)))
	again, err := jobstore.Open(f.state, f.procs)
	if err != nil {
		t.Fatal(err)
	}
	taken(again, "ended", again.Admit(f.keyed(id(6), "tok_alice", keyA)))
	if _, err := again.Forget(id(1)); err != nil {
		t.Fatal(err)
	}
	if got, _ := again.Keyed("tok_alice", keyA); got != nil {
		t.Fatalf("Keyed after forget = %+v, want none", got)
	}
	if err := again.Admit(f.keyed(id(7), "tok_alice", keyA)); err != nil {
		t.Fatalf("the key after forget: %v", err)
	}
}
