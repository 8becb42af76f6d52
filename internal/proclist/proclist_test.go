package proclist

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/testkit"
)

// sleeperEnv makes the test binary, copied under a distinctive name, sleep
// until killed: a real host process the tests can find by every filter.
const sleeperEnv = "CC_PROCLIST_SLEEPER"

// sleeperName has a dot, to show that a filter is matched literally, and
// is longer than the 15 bytes the kernel keeps in comm.
const sleeperName = "cc-test-sleeper.x"

func TestMain(m *testing.M) {
	if os.Getenv(sleeperEnv) == "1" {
		signal.Ignore(syscall.SIGHUP)
		time.Sleep(time.Hour)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func ptr[T any](v T) *T { return &v }

// fixtureAgent is the agent whose jobs the fixture's processes 110-112
// (systemd path) and 200-202 (fallback) run; 120 (systemd path) and
// 210-211 (fallback) are jobs of another agent's state directory.
var fixtureAgent = Agent{DeviceID: "11111111-2222-4333-8444-555555555555", JobsDir: "/home/alice/.local/state/commandcore/jobs/"}

func fixture(t *testing.T) *Lister {
	t.Helper()
	l, err := New("testdata/proc", fixtureAgent)
	if err != nil {
		t.Fatal(err)
	}
	l.owner = 1000
	users := map[uint64]string{0: "root", 1000: "alice"}
	l.userByID = func(uid uint64) (string, error) {
		if n, ok := users[uid]; ok {
			return n, nil
		}
		return "", errors.New("unknown")
	}
	l.userByName = func(name string) (uint64, error) {
		for uid, n := range users {
			if n == name {
				return uid, nil
			}
		}
		return 0, errors.New("unknown")
	}
	return l
}

func pidsOf(r *Result) []int {
	var out []int
	for _, p := range r.Processes {
		out = append(out, p.PID)
	}
	return out
}

func list(t *testing.T, l *Lister, req Request) *Result {
	t.Helper()
	r, err := l.List(context.Background(), req, nil)
	if err != nil {
		t.Fatalf("%+v: %v", req, err)
	}
	return r
}

func TestFixtureFilters(t *testing.T) {
	l := fixture(t)
	all := []int{1, 2, 50, 100, 110, 111, 112, 120, 200, 201, 202, 210, 211, 300, 301, 302, 303, 400, 600}
	for _, c := range []struct {
		name string
		req  Request
		want []int
	}{
		{"everything, the vanished 500 skipped", Request{}, all},
		{"name in comm", Request{Name: "systemd"}, []int{1, 100}},
		{"name in argv0 base only", Request{Name: "server-daemon"}, []int{302}},
		{"argv0 base, not its directory", Request{Name: "/usr/local"}, nil},
		{"name is literal, not a regex", Request{Name: "cc.test"}, []int{301}},
		{"name is literal, not a glob", Request{Name: "cc*"}, nil},
		{"name is case-sensitive", Request{Name: "Make"}, nil},
		{"arguments are never matched", Request{Name: "train.py"}, nil},
		{"user by name (effective UID)", Request{User: "root"}, []int{1, 2, 50, 301}},
		{"user by UID", Request{User: "1001"}, []int{600}},
		{"pid", Request{PID: ptr(112)}, []int{112}},
		{"pid that does not exist", Request{PID: ptr(99999)}, nil},
		{"pid whose files vanished", Request{PID: ptr(500)}, nil},
		{"ppid", Request{PPID: ptr(1)}, []int{100, 200, 210, 300, 301, 302, 303, 400, 600}},
		{"ppid 0", Request{PPID: ptr(0)}, []int{1, 2}},
		{"state letter", Request{State: "R"}, []int{112, 201}},
		{"state word", Request{State: "disk_sleep"}, []int{202}},
		{"state zombie", Request{State: "zombie"}, []int{400}},
		{"state idle", Request{State: "I"}, []int{50}},
		{"state letters are case-sensitive", Request{State: "t"}, nil},
		{"cgroup substring", Request{Cgroup: "session-2"}, []int{200, 201, 202, 210, 211, 300, 301, 302, 303, 400}},
		{"cgroup of a v1-only process (name=systemd)", Request{Cgroup: "legacy.scope"}, []int{600}},
		{"cgroup of another v1 hierarchy is not the reported one", Request{Cgroup: "/foo"}, nil},
		{"managed: this agent's unit members and fallback descendants", Request{Managed: ptr(true)}, []int{110, 111, 112, 200, 201, 202}},
		{"not managed, another agent's jobs included", Request{Managed: ptr(false)}, []int{1, 2, 50, 100, 120, 210, 211, 300, 301, 302, 303, 400, 600}},
		// Combinations narrow.
		{"name + user", Request{Name: "commandcore", User: "alice"}, []int{110, 120, 200, 210}},
		{"name + ppid", Request{Name: "commandcore", PPID: ptr(1)}, []int{200, 210}},
		{"name + wrong ppid", Request{Name: "python3", PPID: ptr(1)}, nil},
		{"name + pid", Request{Name: "sh", PID: ptr(111)}, []int{111}},
		{"name + wrong pid", Request{Name: "sh", PID: ptr(112)}, nil},
		{"managed + state", Request{Managed: ptr(true), State: "R"}, []int{112, 201}},
		{"managed + cgroup", Request{Managed: ptr(true), Cgroup: "app.slice"}, []int{110, 111, 112}},
		{"user + state + cgroup", Request{User: "alice", State: "S", Cgroup: "user@1000.service"}, []int{100, 110, 111, 120}},
		{"managed + user root", Request{Managed: ptr(true), User: "root"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := list(t, l, c.req)
			if got := pidsOf(r); !slices.Equal(got, c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
			if r.TotalMatched != len(c.want) || r.Truncated || r.Limit != DefaultLimit {
				t.Fatalf("total %d truncated %v limit %d", r.TotalMatched, r.Truncated, r.Limit)
			}
		})
	}
}

func TestFixtureRecord(t *testing.T) {
	l := fixture(t)
	r := list(t, l, Request{PID: ptr(112)})
	p := r.Processes[0]
	start := time.Unix(1700000000, 0).Add(10020 * time.Millisecond).UTC()
	want := Process{
		PID: 112, PPID: 111, User: "alice", UID: 1000, Name: "python3", Argv0: "python3", Args: "python3 train.py --token=s3cret",
		State: "R", StateName: "running", StartTime: &start, StartTicks: 1002, Threads: 8,
		RSSBytes: 100000 * uint64(os.Getpagesize()), CPUSeconds: 130.23,
		Cgroup:    "/user.slice/user-1000.slice/user@1000.service/app.slice/commandcore-job-11111111-2222-4333-8444-555555555555-aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee.service",
		Managed:   true,
		ProcessID: "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee",
	}
	if p.StartTime == nil || !p.StartTime.Equal(start) {
		t.Fatalf("start %v, want %v", p.StartTime, start)
	}
	p.StartTime = &start
	if fmt.Sprintf("%+v", p) != fmt.Sprintf("%+v", want) {
		t.Fatalf("record\n got %+v\nwant %+v", p, want)
	}

	// Fallback jobs: the supervisor's job directory names the process_id,
	// inherited down the parent chain.
	r = list(t, l, Request{Managed: ptr(true), Cgroup: "session-2"})
	for _, p := range r.Processes {
		if p.ProcessID != "12345678-9abc-4def-8123-456789abcdef" {
			t.Fatalf("fallback job process %d: process_id %q", p.PID, p.ProcessID)
		}
	}

	// Another agent's jobs are not managed and carry no process_id.
	for _, pid := range []int{120, 210, 211} {
		if p := list(t, l, Request{PID: ptr(pid)}).Processes[0]; p.Managed || p.ProcessID != "" {
			t.Errorf("another agent's job process %d: managed %v, process_id %q", pid, p.Managed, p.ProcessID)
		}
	}

	// The owner's processes show their arguments, as ps does; another
	// user's (root's, a setuid process's, 1001's) never do, and kernel
	// threads have no argv0.
	r = list(t, l, Request{})
	args := map[int]string{}
	for _, p := range r.Processes {
		if p.Args != "" {
			args[p.PID] = p.Args
		}
	}
	for pid, want := range map[int]string{
		100: "/lib/systemd/systemd --user", 202: "make -j8", 211: "sleep 100",
		111: "/bin/sh -c curl -H 'Authorization: Bearer s3cret' https://example.invalid",
	} {
		if args[pid] != want {
			t.Errorf("process %d: args %q, want %q", pid, args[pid], want)
		}
	}
	for _, pid := range []int{1, 2, 50, 301, 400, 600} {
		if a, ok := args[pid]; ok {
			t.Errorf("process %d of another user (or without argv) shows args %q", pid, a)
		}
	}
	// A long command line is cut at the bound, control characters shown as '?'.
	long := list(t, l, Request{PID: ptr(303)}).Processes[0]
	if len(long.Args) != 4096 || !long.ArgsTruncated || !strings.HasPrefix(long.Args, "/usr/bin/long tab?here esc?[2J xxx") {
		t.Errorf("a 5 KiB command line: %d bytes, truncated %v, %.40q", len(long.Args), long.ArgsTruncated, long.Args)
	}
	if p := list(t, l, Request{PID: ptr(202)}).Processes[0]; p.ArgsTruncated {
		t.Error("a short command line is marked truncated")
	}
	for _, p := range r.Processes {
		if (p.PID == 2 || p.PID == 400) && p.Argv0 != "" {
			t.Fatalf("process %d has argv0 %q", p.PID, p.Argv0)
		}
		if p.PID == 301 && (p.UID != 0 || p.User != "root") {
			t.Fatalf("setuid process reports uid %d user %q", p.UID, p.User)
		}
	}
}

func TestFixtureLimit(t *testing.T) {
	l := fixture(t)
	r := list(t, l, Request{Limit: 3})
	if got := pidsOf(r); !slices.Equal(got, []int{1, 2, 50}) || !r.Truncated || r.TotalMatched != 19 || r.Limit != 3 {
		t.Fatalf("limit 3: %v truncated %v total %d", got, r.Truncated, r.TotalMatched)
	}
	r = list(t, l, Request{Limit: 19})
	if len(r.Processes) != 19 || r.Truncated {
		t.Fatalf("limit 19: %d truncated %v", len(r.Processes), r.Truncated)
	}
	// Deterministic: the same answer twice.
	a, b := list(t, l, Request{}), list(t, l, Request{})
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Fatal("two listings differ")
	}
}

func TestInvalidRequests(t *testing.T) {
	l := fixture(t)
	for _, c := range []struct {
		name string
		req  Request
	}{
		{"pid 0", Request{PID: ptr(0)}},
		{"negative pid", Request{PID: ptr(-5)}},
		{"negative ppid", Request{PPID: ptr(-1)}},
		{"unknown state letter", Request{State: "Q"}},
		{"lower-case state word variant", Request{State: "Sleeping"}},
		{"state prefix", Request{State: "sleep"}},
		{"limit too large", Request{Limit: MaxLimit + 1}},
		{"negative limit", Request{Limit: -1}},
		{"unknown user", Request{User: "nosuch-user-xyz"}},
		{"uid out of range", Request{User: "99999999999"}},
		{"NUL in name", Request{Name: "a\x00b"}},
		{"long name", Request{Name: strings.Repeat("x", maxFilterBytes+1)}},
		{"long cgroup", Request{Cgroup: strings.Repeat("x", maxCgroupFilterBytes+1)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := l.List(context.Background(), c.req, nil)
			var e *errcode.Error
			if !errors.As(err, &e) || e.Code != errcode.InvalidArgument {
				t.Fatalf("error %v", err)
			}
			if c.req.User == "" && c.req.Validate() == nil {
				t.Fatal("Validate accepted it")
			}
		})
	}
	if err := (&Request{State: "T", Limit: MaxLimit, PPID: ptr(0)}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// startSleeper runs a copy of the test binary named sleeperName.
func startSleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, sleeperName)
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, "-test.run=^$")
	cmd.Env = append(os.Environ(), sleeperEnv+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

func TestThisHost(t *testing.T) {
	cmd := startSleeper(t)
	pid := cmd.Process.Pid
	l, err := New("/proc", Agent{})
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the sleeper sleeps (a Go program starts runnable).
	var me Process
	testkit.Eventually(t, 10*time.Second, func() error {
		r := list(t, l, Request{PID: ptr(pid)})
		if len(r.Processes) != 1 || r.Processes[0].State != "S" {
			return fmt.Errorf("sleeper never slept: %+v", r.Processes)
		}
		me = r.Processes[0]
		return nil
	})
	if me.Name != sleeperName[:15] || me.Argv0 != sleeperName || me.PPID != os.Getpid() ||
		me.UID != uint64(os.Geteuid()) || me.Managed || me.StartTime == nil || me.RSSBytes == 0 {
		t.Fatalf("sleeper %+v", me)
	}
	if want := cmd.Path + " -test.run=^$"; me.Args != want || me.ArgsTruncated {
		t.Fatalf("the owner's process shows args %q, want %q", me.Args, want)
	}
	if time.Since(*me.StartTime) > time.Minute || time.Until(*me.StartTime) > 2*time.Second {
		t.Fatalf("start time %v", me.StartTime)
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	if me.User != u.Username {
		t.Fatalf("user %q, want %q", me.User, u.Username)
	}

	found := func(req Request) bool {
		t.Helper()
		if req.Limit == 0 {
			req.Limit = MaxLimit
		}
		r := list(t, l, req)
		if r.Truncated {
			t.Fatalf("%+v truncated", req)
		}
		return slices.Contains(pidsOf(r), pid)
	}
	// Each filter alone finds it.
	for _, req := range []Request{
		{Name: sleeperName},       // via argv0 (comm is cut at 15 bytes)
		{Name: "sleeper.x"},       // argv0 only
		{Name: "cc-test-sleeper"}, // comm and argv0
		{User: u.Username},
		{User: strconv.Itoa(os.Geteuid())},
		{PID: ptr(pid)},
		{PPID: ptr(os.Getpid())},
		{State: "S"},
		{State: "sleeping"},
		{Cgroup: me.Cgroup},
		{Managed: ptr(false)},
	} {
		if !found(req) {
			t.Errorf("%+v did not find the sleeper", req)
		}
	}
	// Each filter narrows.
	for _, req := range []Request{
		{Name: "cc.test"}, // a regex would match
		{Name: "cc-test-*"},
		{Name: "^cc-test"},
		{Name: "CC-TEST-SLEEPER"},
		{Name: sleeperName, PPID: ptr(1)},
		{Name: sleeperName, PID: ptr(os.Getpid())},
		{Name: sleeperName, State: "R"},
		{Name: sleeperName, State: "zombie"},
		{Name: sleeperName, Managed: ptr(true)},
		{Name: sleeperName, Cgroup: "/no-such-cgroup/"},
		{Name: sleeperName, User: strconv.Itoa(os.Geteuid() + 4242)},
	} {
		if found(req) {
			t.Errorf("%+v found the sleeper", req)
		}
	}
	// Combined filters that all hold find exactly it.
	r := list(t, l, Request{Name: sleeperName, User: u.Username, PPID: ptr(os.Getpid()), State: "S", Cgroup: me.Cgroup, Managed: ptr(false)})
	if got := pidsOf(r); !slices.Equal(got, []int{pid}) {
		t.Fatalf("all filters: %v", got)
	}

	// The full listing is in PID order and bounded.
	r = list(t, l, Request{Limit: 1})
	if len(r.Processes) != 1 || (r.TotalMatched > 1) != r.Truncated {
		t.Fatalf("limit 1: %+v", r)
	}
	r = list(t, l, Request{Limit: MaxLimit})
	if !slices.IsSorted(pidsOf(r)) || !slices.Contains(pidsOf(r), os.Getpid()) {
		t.Fatalf("full listing not sorted or lacks this test")
	}

	// A process that has ended is simply absent.
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if found(Request{PID: ptr(pid)}) {
		t.Fatal("an ended process is listed")
	}
}

func TestRequestSchema(t *testing.T) {
	s, err := jsonschema.For[Request](nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"name", "user", "pid", "ppid", "state", "cgroup", "managed", "limit"} {
		p, ok := s.Properties[f]
		if !ok || p.Description == "" {
			t.Errorf("schema property %s: %+v", f, p)
		}
	}
	if len(s.Required) != 0 {
		t.Errorf("required %v", s.Required)
	}
}

// TestAnotherPrincipalsJobIsAPlainProcess: the processes of a job the
// caller may not see are listed as any host process: not managed, with no
// process_id, arguments or cgroup, and no filter on the cgroup (which
// names the job) finds them; the caller's own job is listed in full.
func TestAnotherPrincipalsJobIsAPlainProcess(t *testing.T) {
	l := fixture(t)
	const hiddenJob = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
	asked := map[string]int{}
	sees := func(id string) bool {
		asked[id]++
		return id != hiddenJob
	}
	lists := 0
	run := func(req Request) *Result {
		lists++
		r, err := l.List(context.Background(), req, sees)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if got := pidsOf(run(Request{Managed: ptr(true)})); !slices.Equal(got, []int{200, 201, 202}) {
		t.Errorf("managed lists %v, want only the visible fallback job's 200 201 202", got)
	}
	if got := pidsOf(run(Request{Managed: ptr(false), PID: ptr(111)})); !slices.Equal(got, []int{111}) {
		t.Errorf("a hidden job's process is not among the unmanaged: %v", got)
	}
	for _, filter := range []string{hiddenJob, "commandcore-job", "app.slice"} {
		for _, p := range run(Request{Cgroup: filter}).Processes {
			if p.PID >= 110 && p.PID <= 112 {
				t.Errorf("cgroup filter %q finds the hidden job's process %d", filter, p.PID)
			}
		}
	}
	for _, p := range run(Request{}).Processes {
		switch {
		case p.PID >= 110 && p.PID <= 112:
			if p.Managed || p.ProcessID != "" || p.Args != "" || p.ArgsTruncated || p.Cgroup != "" {
				t.Errorf("hidden job's process %d shows %+v", p.PID, p)
			}
			if p.Name == "" {
				t.Errorf("hidden job's process %d lost its name", p.PID)
			}
		case p.PID == 202:
			if !p.Managed || p.ProcessID == "" || p.Args != "make -j8" {
				t.Errorf("the caller's own job process 202 shows %+v", p)
			}
		}
	}
	// Once a List, however many of its processes are the job's.
	for id, n := range asked {
		if n > lists {
			t.Errorf("job %s asked about %d times in %d lists", id, n, lists)
		}
	}
}

// TestJobPIDs: a job's processes are its unit's members (systemd path) or
// its supervisor and the supervisor's descendants (fallback), never
// another job's or another agent's.
func TestJobPIDs(t *testing.T) {
	l := fixture(t)
	for id, want := range map[string][]int{
		"aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee": {110, 111, 112},
		"12345678-9abc-4def-8123-456789abcdef": {200, 201, 202},
		"ffffffff-bbbb-4ccc-8ddd-eeeeeeeeeeee": nil,
	} {
		got, err := l.JobPIDs(context.Background(), id)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("job %s: %v, %v; want %v", id, got, err, want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.JobPIDs(ctx, "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled look: %v", err)
	}
}
