// Package proclist lists host processes for process.list, read through
// prometheus/procfs with the proc root as a parameter so tests can point it
// at fixture trees.
//
// Filters are literal (no regex, no glob) and every filter given narrows
// the result (they combine with AND):
//
//   - name: a substring of the process name (comm, at most 15 bytes, as the
//     kernel keeps it) or of the base name of argv[0]; case-sensitive.
//   - user: a user name or a numeric UID, compared exactly with the
//     process's effective UID (the USER column of ps). All digits means a
//     UID. An unknown user name is an invalid argument.
//   - pid, ppid: exact process and parent process IDs (ppid 0 selects the
//     kernel's own threads and init).
//   - state: the kernel's one-letter state, case-sensitive as in
//     /proc/<pid>/stat (R S D Z T t X I P W K), or its word (running,
//     sleeping, disk_sleep, zombie, stopped, tracing_stop, dead, idle,
//     parked, waking, wakekill).
//   - cgroup: a substring of the process's cgroup path (the one reported:
//     the unified hierarchy's, else systemd's named v1 hierarchy, else the
//     first listed).
//   - managed: true keeps only the processes of this agent's jobs (those of
//     its state directory, Agent), false only the others — another agent's
//     jobs included. A process is managed when it runs in a job's transient
//     unit that carries this agent's device ID (a cgroup path segment
//     commandcore-job-<device>-<job>.service, the systemd path), or — for
//     shared-cgroup fallback jobs, which have no cgroup marker — when it is
//     a `commandcore supervise <job dir>` process whose job directory is in
//     this agent's, or descends from one by its parent chain. A fallback
//     job's descendant that daemonised (was reparented away from its
//     supervisor) is therefore not recognised; on the systemd path the
//     cgroup keeps it.
//
// Results are in ascending PID order, at most limit (default DefaultLimit,
// at most MaxLimit); total_matched counts every match and truncated says
// when the list stopped at the limit. Processes that end during the scan
// are skipped, never an error.
//
// Arguments (args) are shown, as ps shows them, only for the owner's
// processes: those whose effective UID is the agent's own, whose
// arguments the owner's client may see. They are the command line joined
// by spaces, control characters and invalid UTF-8 shown as '?', cut to
// limits.ProcessArgsMaxBytes (args_truncated says so). Another user's
// process shows its name and argv[0]'s base name only. Arguments are
// never matched by a filter, and never logged or journaled.
package proclist

import (
	"context"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/prometheus/procfs"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/roles"
)

const (
	// DefaultLimit is the number of processes returned without a limit.
	DefaultLimit = 200
	// MaxLimit is the largest limit accepted.
	MaxLimit = 2000
	// maxFilterBytes bounds the name and user filters.
	maxFilterBytes = 256
	// maxCgroupFilterBytes bounds the cgroup filter (a path).
	maxCgroupFilterBytes = 4096
	// maxArgv0Bytes bounds the reported argv[0] base name.
	maxArgv0Bytes = 256
	// maxAncestry bounds the parent-chain walk of the managed test.
	maxAncestry = 256
	// userHZ is the clock-tick rate of /proc/<pid>/stat times; procfs
	// makes the same assumption (USER_HZ is 100 on every Linux port Go
	// supports).
	userHZ = 100
)

// UnitPrefix and UnitSuffix frame a managed job's transient unit name
// (launcher.UnitName: commandcore-job-<device-uuid>-<job-uuid>.service).
const (
	UnitPrefix = jobmeta.UnitPrefix
	UnitSuffix = ".service"
)

// Request is the input of process.list. Absent fields do not filter.
type Request struct {
	Name    string `json:"name,omitempty" jsonschema:"literal substring of the process name (comm) or of argv[0]'s base name; case-sensitive, no regex or glob"`
	User    string `json:"user,omitempty" jsonschema:"user name or numeric UID, matched exactly against the effective UID"`
	PID     *int   `json:"pid,omitempty" jsonschema:"exact process ID (at least 1)"`
	PPID    *int   `json:"ppid,omitempty" jsonschema:"exact parent process ID (0 for kernel threads and init)"`
	State   string `json:"state,omitempty" jsonschema:"process state: a kernel letter (R S D Z T t X I P W K) or a word (running sleeping disk_sleep zombie stopped tracing_stop dead idle parked waking wakekill)"`
	Cgroup  string `json:"cgroup,omitempty" jsonschema:"literal substring of the process's cgroup path"`
	Managed *bool  `json:"managed,omitempty" jsonschema:"true: only the processes of this agent's jobs; false: every other process (other agents' jobs included)"`
	Limit   int    `json:"limit,omitempty" jsonschema:"most processes returned, 1-2000 (default 200); ascending PID order"`
}

// Process is one listed process.
type Process struct {
	PID  int `json:"pid"`
	PPID int `json:"ppid"`
	// User is the effective UID's name; absent when it has none.
	User string `json:"user,omitempty"`
	UID  uint64 `json:"uid"`
	// Name is the kernel's process name (comm).
	Name string `json:"name"`
	// Argv0 is the base name of argv[0]; absent for kernel threads and
	// zombies.
	Argv0 string `json:"argv0,omitempty"`
	// Args is the command line, for the owner's processes only (package
	// comment); ArgsTruncated says it was cut.
	Args          string `json:"args,omitempty"`
	ArgsTruncated bool   `json:"args_truncated,omitempty"`
	State         string `json:"state"`
	StateName     string `json:"state_name"`
	// StartTime is derived from the boot time and StartTicks.
	StartTime  *time.Time `json:"start_time,omitempty"`
	StartTicks uint64     `json:"start_ticks"`
	Threads    int        `json:"threads"`
	RSSBytes   uint64     `json:"rss_bytes"`
	CPUSeconds float64    `json:"cpu_seconds"`
	Cgroup     string     `json:"cgroup,omitempty"`
	Managed    bool       `json:"managed"`
	// ProcessID is the managed job's process_id when it can be read from
	// the unit name or the supervisor's job directory.
	ProcessID string `json:"process_id,omitempty"`
}

// Result is the output of process.list.
type Result struct {
	Processes    []Process `json:"processes"`
	TotalMatched int       `json:"total_matched"`
	Truncated    bool      `json:"truncated"`
	Limit        int       `json:"limit"`
}

// stateNames maps the kernel's state letters (proc(5)) to words.
var stateNames = map[string]string{
	"R": "running", "S": "sleeping", "D": "disk_sleep", "Z": "zombie",
	"T": "stopped", "t": "tracing_stop", "X": "dead", "x": "dead",
	"I": "idle", "P": "parked", "W": "waking", "K": "wakekill",
}

// stateLetter resolves a state filter to a letter; ok false when unknown.
func stateLetter(s string) (string, bool) {
	if _, ok := stateNames[s]; ok {
		return s, true
	}
	for letter, word := range stateNames {
		if word == s && letter != "x" {
			return letter, true
		}
	}
	return "", false
}

func invalid(format string, args ...any) error {
	return errcode.New(errcode.InvalidArgument, format, args...)
}

// Validate checks the filters' syntax. Messages never repeat the values.
func (r *Request) Validate() error {
	switch {
	case len(r.Name) > maxFilterBytes:
		return invalid("name must be at most %d bytes", maxFilterBytes)
	case strings.ContainsRune(r.Name, 0):
		return invalid("name must not contain NUL")
	case len(r.User) > maxFilterBytes:
		return invalid("user must be at most %d bytes", maxFilterBytes)
	case strings.ContainsRune(r.User, 0):
		return invalid("user must not contain NUL")
	case r.PID != nil && *r.PID < 1:
		return invalid("pid must be at least 1")
	case r.PPID != nil && *r.PPID < 0:
		return invalid("ppid must not be negative")
	case len(r.Cgroup) > maxCgroupFilterBytes:
		return invalid("cgroup must be at most %d bytes", maxCgroupFilterBytes)
	case strings.ContainsRune(r.Cgroup, 0):
		return invalid("cgroup must not contain NUL")
	case r.Limit < 0 || r.Limit > MaxLimit:
		return invalid("limit must be between 1 and %d (default %d)", MaxLimit, DefaultLimit)
	}
	if r.State != "" {
		if _, ok := stateLetter(r.State); !ok {
			return invalid("state must be one of R S D Z T t X I P W K or running, sleeping, disk_sleep, zombie, stopped, tracing_stop, dead, idle, parked, waking, wakekill")
		}
	}
	return nil
}

// Agent names this agent's jobs, the only ones managed selects: their
// transient units carry DeviceID (launcher.UnitName), and their fallback
// supervisors run `commandcore supervise <JobsDir>/<process_id>`.
type Agent struct {
	DeviceID string
	JobsDir  string
}

// Lister lists the processes of one proc file system.
type Lister struct {
	fs    procfs.FS
	agent Agent
	// owner is the effective UID whose processes' arguments are shown.
	owner uint64
	// userByName resolves a user name to a UID; userByID a UID to a name.
	// os/user unless a test replaces them.
	userByName func(name string) (uint64, error)
	userByID   func(uid uint64) (string, error)
}

// New returns a Lister over the proc file system at procRoot for agent,
// run by this process's effective user.
func New(procRoot string, agent Agent) (*Lister, error) {
	pfs, err := procfs.NewFS(procRoot)
	if err != nil {
		return nil, err
	}
	agent.JobsDir = filepath.Clean(agent.JobsDir)
	return &Lister{fs: pfs, agent: agent, owner: uint64(os.Geteuid()), userByName: lookupUser, userByID: lookupUID}, nil
}

func lookupUser(name string) (uint64, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(u.Uid, 10, 32)
}

func lookupUID(uid uint64) (string, error) {
	u, err := user.LookupId(strconv.FormatUint(uid, 10))
	if err != nil {
		return "", err
	}
	return u.Username, nil
}

// filter is a validated, resolved request.
type filter struct {
	Request
	uid   *uint64
	state string
}

// List returns the processes matching every filter of req. sees tells
// whether the caller may see one of this agent's jobs (nil: every job, as
// the owner does): another principal's job processes are listed as plain
// host processes, with neither process_id, arguments nor cgroup, and
// managed false, so that nothing leads from them to the job.
func (l *Lister) List(ctx context.Context, req Request, sees func(jobID string) bool) (*Result, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	f := filter{Request: req}
	if f.Limit == 0 {
		f.Limit = DefaultLimit
	}
	if f.State != "" {
		f.state, _ = stateLetter(f.State)
	}
	if f.User != "" {
		uid, err := l.resolveUser(f.User)
		if err != nil {
			return nil, err
		}
		f.uid = &uid
	}

	var pids []int
	if f.PID != nil {
		pids = []int{*f.PID}
	} else {
		procs, err := l.fs.AllProcs()
		if err != nil {
			return nil, errcode.Wrap(errcode.Internal, err, "could not read the process table")
		}
		for _, p := range procs {
			pids = append(pids, p.PID)
		}
		slices.Sort(pids)
	}

	sc := &scan{l: l, procs: map[int]*proc{}, names: map[uint64]string{}, sees: sees, seen: map[string]bool{}}
	if st, err := l.fs.Stat(); err == nil {
		sc.btime = st.BootTime
	}
	res := &Result{Processes: []Process{}, Limit: f.Limit}
	for i, pid := range pids {
		if i%64 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		p := sc.get(pid)
		if p == nil || !sc.matches(p, &f) {
			continue
		}
		res.TotalMatched++
		if len(res.Processes) < f.Limit {
			res.Processes = append(res.Processes, sc.report(p))
		} else {
			res.Truncated = true
		}
	}
	return res, nil
}

// JobPIDs returns the PIDs of the processes of this agent's job id, as
// managed selects them (package comment), in ascending order.
func (l *Lister) JobPIDs(ctx context.Context, id string) ([]int, error) {
	procs, err := l.fs.AllProcs()
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "could not read the process table")
	}
	sc := &scan{l: l, procs: map[int]*proc{}, names: map[uint64]string{}, seen: map[string]bool{}}
	var pids []int
	for i, pp := range procs {
		if i%64 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		p := sc.get(pp.PID)
		if p == nil {
			continue
		}
		if managed, job := sc.isManaged(p); managed && job == id {
			pids = append(pids, pp.PID)
		}
	}
	slices.Sort(pids)
	return pids, nil
}

func (l *Lister) resolveUser(s string) (uint64, error) {
	if isDigits(s) {
		uid, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return 0, invalid("user is not a valid UID")
		}
		return uid, nil
	}
	uid, err := l.userByName(s)
	if err != nil {
		return 0, invalid("user is not a known user name or numeric UID")
	}
	return uid, nil
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// proc is one process's lazily read files. Every field is read at most
// once per List.
type proc struct {
	p    procfs.Proc
	stat procfs.ProcStat

	argv     []string
	argvRead bool

	uid        uint64
	uidOK      bool
	statusRead bool

	cgroups     []procfs.Cgroup
	cgroupsRead bool

	// managed is resolved once: 0 unknown, 1 no, 2 yes.
	managed int
	jobID   string
}

type scan struct {
	l     *Lister
	procs map[int]*proc // nil entries: gone or unreadable
	names map[uint64]string
	btime uint64
	// sees decides which jobs the caller may see; seen remembers its
	// answers for this List.
	sees func(jobID string) bool
	seen map[string]bool
}

// job is isManaged as the caller may see it: hidden when the process is
// one of a job the caller may not see, which is then not managed for it.
func (sc *scan) job(p *proc) (managed bool, id string, hidden bool) {
	m, id := sc.isManaged(p)
	if !m || sc.sees == nil {
		return m, id, false
	}
	visible, ok := sc.seen[id]
	if !ok {
		visible = sc.sees(id)
		sc.seen[id] = visible
	}
	if !visible {
		return false, "", true
	}
	return true, id, false
}

// get reads a process's stat; nil when it is gone (or unreadable).
func (sc *scan) get(pid int) *proc {
	if p, ok := sc.procs[pid]; ok {
		return p
	}
	var out *proc
	if pp, err := sc.l.fs.Proc(pid); err == nil {
		if st, err := pp.Stat(); err == nil {
			out = &proc{p: pp, stat: st}
		}
	}
	sc.procs[pid] = out
	return out
}

func (sc *scan) argvOf(p *proc) []string {
	if !p.argvRead {
		p.argvRead = true
		if a, err := p.p.CmdLine(); err == nil {
			p.argv = a
		}
	}
	return p.argv
}

func (sc *scan) argv0(p *proc) string {
	a := sc.argvOf(p)
	if len(a) == 0 || a[0] == "" {
		return ""
	}
	b := filepath.Base(a[0])
	if len(b) > maxArgv0Bytes {
		b = b[:maxArgv0Bytes]
	}
	return b
}

func (sc *scan) uidOf(p *proc) (uint64, bool) {
	if !p.statusRead {
		p.statusRead = true
		if st, err := p.p.NewStatus(); err == nil {
			// UIDs: real, effective, saved, filesystem.
			p.uid, p.uidOK = st.UIDs[1], true
		}
	}
	return p.uid, p.uidOK
}

func (sc *scan) cgroupsOf(p *proc) []procfs.Cgroup {
	if !p.cgroupsRead {
		p.cgroupsRead = true
		if cg, err := p.p.Cgroups(); err == nil {
			p.cgroups = cg
		}
	}
	return p.cgroups
}

// cgroupPath is the reported path: the unified hierarchy's, else systemd's
// named v1 hierarchy, else the first.
func (sc *scan) cgroupPath(p *proc) (string, bool) {
	cgs := sc.cgroupsOf(p)
	if len(cgs) == 0 {
		return "", false
	}
	for _, c := range cgs {
		if c.HierarchyID == 0 {
			return c.Path, true
		}
	}
	for _, c := range cgs {
		if slices.Contains(c.Controllers, "name=systemd") {
			return c.Path, true
		}
	}
	return cgs[0].Path, true
}

// isManaged applies the managed rule of the package comment.
func (sc *scan) isManaged(p *proc) (bool, string) {
	if p.managed != 0 {
		return p.managed == 2, p.jobID
	}
	p.managed = 1
	// The systemd path: the job's transient unit in any hierarchy.
	for _, c := range sc.cgroupsOf(p) {
		if device, id, ok := unitJob(c.Path); ok {
			if device == "" || device != sc.l.agent.DeviceID {
				return false, ""
			}
			p.managed, p.jobID = 2, id
			return true, id
		}
	}
	// The fallback: a supervisor or one of its descendants.
	cur := p
	for range maxAncestry {
		if id, ok := sc.supervisor(cur); ok {
			p.managed, p.jobID = 2, id
			return true, id
		}
		ppid := cur.stat.PPID
		if ppid <= 0 || ppid == cur.stat.PID {
			break
		}
		parent := sc.get(ppid)
		if parent == nil {
			break
		}
		if parent.managed != 0 {
			// Only the fallback verdict is inherited: a parent in a job's
			// unit whose child left it is not proof of anything.
			if parent.managed == 2 && !inUnit(sc.cgroupsOf(parent)) {
				p.managed, p.jobID = 2, parent.jobID
				return true, parent.jobID
			}
			if parent.managed == 1 {
				break
			}
		}
		cur = parent
	}
	return false, ""
}

func inUnit(cgs []procfs.Cgroup) bool {
	for _, c := range cgs {
		if _, _, ok := unitJob(c.Path); ok {
			return true
		}
	}
	return false
}

// unitJob finds a job unit segment in a cgroup path and, when the unit name
// has the launcher's shape, the device ID and the job's process_id.
func unitJob(path string) (device, id string, ok bool) {
	for seg := range strings.SplitSeq(path, "/") {
		if !strings.HasPrefix(seg, UnitPrefix) || !strings.HasSuffix(seg, UnitSuffix) {
			continue
		}
		ids := strings.TrimSuffix(strings.TrimPrefix(seg, UnitPrefix), UnitSuffix)
		const n = 36 // a UUID's text form
		if len(ids) == 2*n+1 && ids[n] == '-' && uuid.Validate(ids[:n]) == nil && uuid.Validate(ids[n+1:]) == nil {
			return ids[:n], ids[n+1:], true
		}
		return "", "", true
	}
	return "", "", false
}

// supervisor reports whether p is a fallback `commandcore supervise <jobdir>`
// process of this agent (its job directory in the agent's), and the job's
// process_id when its directory is named by one.
func (sc *scan) supervisor(p *proc) (string, bool) {
	a := sc.argvOf(p)
	if len(a) != 3 || a[1] != roles.Supervise || !strings.HasPrefix(filepath.Base(a[0]), "commandcore") {
		return "", false
	}
	if filepath.Dir(filepath.Clean(a[2])) != sc.l.agent.JobsDir {
		return "", false
	}
	if id := filepath.Base(a[2]); uuid.Validate(id) == nil {
		return id, true
	}
	return "", true
}

// args is p's command line as the package comment describes it.
func (sc *scan) args(p *proc) (string, bool) { return formatArgs(sc.argvOf(p)) }

// formatArgs joins argv as ps prints it: control characters and invalid
// UTF-8 as '?', cut at limits.ProcessArgsMaxBytes; truncated says it was.
func formatArgs(argv []string) (line string, truncated bool) {
	line = strings.Join(argv, " ")
	var b strings.Builder
	for i, r := range line {
		if r == utf8.RuneError && !strings.HasPrefix(line[i:], "\uFFFD") || unicode.IsControl(r) {
			r = '?'
		}
		if b.Len()+utf8.RuneLen(r) > limits.ProcessArgsMaxBytes {
			return b.String(), true
		}
		b.WriteRune(r)
	}
	return b.String(), false
}

func (sc *scan) matches(p *proc, f *filter) bool {
	st := &p.stat
	if f.PID != nil && st.PID != *f.PID {
		return false
	}
	if f.PPID != nil && st.PPID != *f.PPID {
		return false
	}
	if f.state != "" && st.State != f.state {
		return false
	}
	if f.Name != "" && !strings.Contains(st.Comm, f.Name) && !strings.Contains(sc.argv0(p), f.Name) {
		return false
	}
	if f.uid != nil {
		if uid, ok := sc.uidOf(p); !ok || uid != *f.uid {
			return false
		}
	}
	if f.Cgroup != "" {
		// A hidden job's cgroup names the job: it matches no filter.
		if path, ok := sc.cgroupPath(p); !ok || !strings.Contains(path, f.Cgroup) {
			return false
		}
		if _, _, hidden := sc.job(p); hidden {
			return false
		}
	}
	if f.Managed != nil {
		if m, _, _ := sc.job(p); m != *f.Managed {
			return false
		}
	}
	// A process whose status cannot be read ended during the scan.
	_, ok := sc.uidOf(p)
	return ok
}

func (sc *scan) report(p *proc) Process {
	st := &p.stat
	out := Process{
		PID: st.PID, PPID: st.PPID, Name: st.Comm, Argv0: sc.argv0(p),
		State: st.State, StateName: stateNames[st.State],
		StartTicks: st.Starttime, Threads: st.NumThreads,
		CPUSeconds: float64(st.UTime+st.STime) / userHZ,
	}
	if rss := st.ResidentMemory(); rss > 0 {
		out.RSSBytes = uint64(rss)
	}
	if out.StateName == "" {
		out.StateName = "unknown"
	}
	if sc.btime > 0 {
		t := time.Unix(int64(sc.btime), 0).Add(time.Duration(st.Starttime) * (time.Second / userHZ)).UTC()
		out.StartTime = &t
	}
	var hidden bool
	out.Managed, out.ProcessID, hidden = sc.job(p)
	if uid, ok := sc.uidOf(p); ok {
		if uid == sc.l.owner && !hidden {
			out.Args, out.ArgsTruncated = sc.args(p)
		}
		out.UID = uid
		name, seen := sc.names[uid]
		if !seen {
			name, _ = sc.l.userByID(uid)
			sc.names[uid] = name
		}
		out.User = name
	}
	if !hidden {
		out.Cgroup, _ = sc.cgroupPath(p)
	}
	return out
}
