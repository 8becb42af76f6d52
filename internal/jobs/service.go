// Package jobs is the managed-job core: it launches, observes, pages, stops
// and forgets jobs over the job store and the launcher. The MCP tools and
// the local CLI are thin layers over it. It knows no network.
package jobs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/activity"
	"github.com/commandcore/commandcore/internal/atomicfile"
	"github.com/commandcore/commandcore/internal/envelope"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/hideexec"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobresources"
	"github.com/commandcore/commandcore/internal/jobstore"
	"github.com/commandcore/commandcore/internal/launcher"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/metrics"
	"github.com/commandcore/commandcore/internal/namechars"
	"github.com/commandcore/commandcore/internal/principal"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/terminal"
)

// maxNameBytes bounds a job's display name.
const maxNameBytes = 256

// pollInterval is how often waits re-read a job's files.
const pollInterval = 20 * time.Millisecond

// shellPoll is how often process.start looks for its shell's start: the
// supervisor records it within a millisecond or so of READY.
const shellPoll = time.Millisecond

// Service is the job core of one agent (or `commandcore mcp`) process.
type Service struct {
	store    *jobstore.Store
	launcher *launcher.Launcher
	procs    *procid.Source
	stateDir string
	deviceID string
	// shell runs each command, which it reads from a pipe (cmdpipe).
	shell string
	// baseEnv is the environment a job starts from; requests add to it.
	baseEnv []string
	// hostHealth, when set, returns the snapshot process.start reports.
	hostHealth func() *metrics.HostHealth
	// journal records content-free launch phases; nil records nothing.
	journal *activity.Journal
	// claimTimeout bounds the wait for the supervisor's identity claim;
	// zero means limits.ClaimTimeout.
	claimTimeout time.Duration
	// runHide starts process.run's shells; nil until HideOwnDirs found
	// that it works.
	runHide *hideexec.Hider
	// ownerCut says, at each launch, whether the owner cuts it off the
	// user manager; set by HideOwnDirs.
	ownerCut func() (bool, error)
	// keys serialises the keyed starts of one principal and key.
	keys keyLocks
	// spares is the spare supervisor kept for the next job (spare.go).
	spares spares
	// slowSpareStart, in tests, stands in for a user manager slow to start
	// a spare's unit: it runs before each spare is started.
	slowSpareStart func()
	// recording counts the supervisors' identities still being recorded
	// after their launch answered; Close waits for them.
	recording sync.WaitGroup
}

// serviceVars are variables of the launching process's own service that
// must not leak into a job's environment.
var serviceVars = []string{"INVOCATION_ID", "JOURNAL_STREAM", "NOTIFY_SOCKET", "WATCHDOG_PID",
	"WATCHDOG_USEC", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "MANAGERPID", "SYSTEMD_EXEC_PID"}

// BaseEnvironment returns env without the launching service's variables.
func BaseEnvironment(env []string) []string {
	out := make([]string, 0, len(env))
next:
	for _, kv := range env {
		for _, v := range serviceVars {
			if strings.HasPrefix(kv, v+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

// DefaultShell is bash where it exists, else the POSIX shell.
func DefaultShell() string {
	if _, err := os.Stat("/bin/bash"); err == nil {
		return "/bin/bash"
	}
	return "/bin/sh"
}

// Close releases the bus connection and flushes the journal.
func (s *Service) Close() {
	s.closeSpares()
	s.recording.Wait()
	s.store.Settle()
	s.launcher.Close()
	s.journal.Close()
}

// Journal is the activity journal this service records into, for the
// agent's and the tools' own events; nil records nothing.
func (s *Service) Journal() *activity.Journal { return s.journal }

// Procs is how this service identifies processes.
func (s *Service) Procs() *procid.Source { return s.procs }

// CommandBase is the shell and base environment every job starts from;
// process.run starts its commands from them too, so both run a command
// alike.
func (s *Service) CommandBase() (shell string, baseEnv []string) { return s.shell, s.baseEnv }

// StartRequest is process.start's input.
type StartRequest struct {
	Command string            `json:"command" jsonschema:"the shell command to run"`
	Cwd     string            `json:"cwd,omitempty" jsonschema:"absolute working directory (default: the agent user's home)"`
	Env     map[string]string `json:"env,omitempty" jsonschema:"environment variables added to the agent's environment"`
	Name    string            `json:"name,omitempty" jsonschema:"a label shown in listings"`
	WaitMS  int               `json:"wait_ms,omitempty" jsonschema:"0-30000: wait up to this long for the job to end; if it does, the terminal record and first output page are returned too"`
	// TimeoutS is validated by timeLimit.
	TimeoutS int           `json:"timeout_s,omitempty" jsonschema:"1-2592000: wall-clock limit in seconds, then the job is stopped as by process.stop and ends timed_out (default: none)"`
	Stdin    bool          `json:"stdin,omitempty" jsonschema:"true: the job's stdin is a pipe fed by process.input (default: /dev/null)"`
	PTY      *TerminalSize `json:"pty,omitempty" jsonschema:"run the job on a terminal of this size: stdin, stdout and stderr are the terminal, its output is the stdout stream; input through process.input, size through process.resize"`
	// IdempotencyKey is checked by checkKey.
	IdempotencyKey string `json:"idempotency_key,omitempty" jsonschema:"1-128 printable ASCII, e.g. a fresh UUID: the same key again returns the job it started (reused: true), so a retry never launches twice; with a changed request it is a conflict"`
}

// TerminalSize is a pty job's window size.
type TerminalSize struct {
	Cols int `json:"cols" jsonschema:"1-1000: width in columns"`
	Rows int `json:"rows" jsonschema:"1-1000: height in rows"`
}

// size checks a requested terminal size.
func (t *TerminalSize) size() (*terminal.Size, error) {
	s := &terminal.Size{Cols: t.Cols, Rows: t.Rows}
	if !s.Valid() {
		return nil, errcode.New(errcode.InvalidArgument, "cols and rows must each be between 1 and %d", limits.TerminalDimensionMax)
	}
	return s, nil
}

// StartResult is process.start's result. Each fact appears once: a job
// that ended within wait_ms adds how it ended and its first output page,
// not its whole record (process.status has that).
type StartResult struct {
	ProcessID     string              `json:"process_id" jsonschema:"the job's ID, for every other process tool"`
	State         jobmeta.State       `json:"state" jsonschema:"the job's state (docs/states.md)"`
	Terminal      bool                `json:"terminal" jsonschema:"true once the job has ended"`
	Unit          string              `json:"unit,omitempty" jsonschema:"the job's transient systemd unit, when it has one"`
	FailureDomain string              `json:"failure_domain" jsonschema:"systemd_unit, or shared_parent_cgroup without a user manager"`
	StartedAt     *time.Time          `json:"started_at" jsonschema:"when the shell started"`
	HostHealth    *metrics.HostHealth `json:"host_health,omitempty" jsonschema:"the host's health at launch: its verdict only, unless it is not ok"`
	Reused        bool                `json:"reused" jsonschema:"true: the idempotency_key had started this job already; nothing was launched"`
	// How a job that ended within wait_ms ended.
	ExitCode    *int       `json:"exit_code,omitempty" jsonschema:"the exit code of a job that ended within wait_ms and exited"`
	Signal      string     `json:"signal,omitempty" jsonschema:"the signal that ended a job that ended within wait_ms"`
	CompletedAt *time.Time `json:"completed_at,omitempty" jsonschema:"when a job that ended within wait_ms ended"`
	StoppedBy   string     `json:"stopped_by,omitempty" jsonschema:"request, timeout or service_manager, for a stopped job"`
	Error       string     `json:"error,omitempty" jsonschema:"why the launch failed, for a launch_failed job"`
	// Output is the ended job's first page of each stream.
	Output *Pages `json:"output,omitempty" jsonschema:"the first page of each stream of a job that ended within wait_ms"`
}

// Pages is one page of each stream.
type Pages struct {
	Stdout StreamPage `json:"stdout" jsonschema:"the stdout page"`
	Stderr StreamPage `json:"stderr" jsonschema:"the stderr page"`
}

func waitDuration(ms int) (time.Duration, error) {
	d := time.Duration(ms) * time.Millisecond
	if ms < 0 || d > limits.MaxWait {
		return 0, errcode.New(errcode.InvalidArgument, "wait_ms must be between 0 and %d", limits.MaxWait.Milliseconds())
	}
	return d, nil
}

// timeLimit checks process.start's timeout_s: 0 is no limit.
func timeLimit(secs int) error {
	if max := int(limits.JobTimeoutMax / time.Second); secs < 0 || secs > max {
		return errcode.New(errcode.InvalidArgument, "timeout_s must be between 1 and %d (0 or absent: no limit)", max)
	}
	return nil
}

func (s *Service) validateStart(req *StartRequest) (*envelope.Envelope, error) {
	if !namechars.Printable(req.Name, maxNameBytes) {
		if err := checkCommand(req.Command); err != nil {
			return nil, err
		}
		return nil, errcode.New(errcode.InvalidArgument, "name must be printable UTF-8 of at most %d bytes", maxNameBytes)
	}
	cwd, env, err := Prepare(req.Command, req.Cwd, req.Env, s.baseEnv)
	if err != nil {
		return nil, err
	}
	if err := timeLimit(req.TimeoutS); err != nil {
		return nil, err
	}
	e := &envelope.Envelope{Version: envelope.Version, Command: req.Command, Env: env, Cwd: cwd, Shell: s.shell, TimeoutS: req.TimeoutS, Stdin: req.Stdin}
	if req.PTY != nil {
		if e.PTY, err = req.PTY.size(); err != nil {
			return nil, err
		}
		// The terminal is the job's stdin.
		e.Stdin = false
	}
	return e, nil
}

// printable reports whether s is at most max bytes of UTF-8 without
// control characters: text a caller gives for people to read, which must
// show as what it says.
func checkCommand(command string) error {
	if strings.TrimSpace(command) == "" {
		return errcode.New(errcode.InvalidArgument, "command must not be empty")
	}
	if strings.ContainsRune(command, 0) {
		return errcode.New(errcode.InvalidArgument, "command must not contain NUL bytes")
	}
	return nil
}

// Prepare validates a command, working directory and environment additions
// the way process.start does, and returns the resolved working directory
// (the home directory when cwd is empty) and the command's environment: base
// followed by the additions. Errors are content-free invalid_argument errors.
// process.run shares it so both tools accept exactly the same inputs.
func Prepare(command, cwd string, add map[string]string, base []string) (string, []string, error) {
	if err := checkCommand(command); err != nil {
		return "", nil, err
	}
	if cwd == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = "/"
		}
		cwd = home
	}
	if !filepath.IsAbs(cwd) || strings.ContainsRune(cwd, 0) {
		return "", nil, errcode.New(errcode.InvalidArgument, "cwd must be an absolute path")
	}
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		return "", nil, errcode.New(errcode.InvalidArgument, "cwd is not an existing directory")
	}
	env := append([]string(nil), base...)
	for k, v := range add {
		if envelope.ValidEnvKey(k) != nil || strings.ContainsRune(v, 0) {
			return "", nil, errcode.New(errcode.InvalidArgument, "env names must be non-empty without '=' or NUL, values without NUL")
		}
		if len(k)+1+len(v) > limits.MaxEnvEntryBytes {
			return "", nil, errcode.New(errcode.InvalidArgument, "an env entry (NAME=value) must be at most %d bytes", limits.MaxEnvEntryBytes)
		}
		env = append(env, k+"="+v)
	}
	return cwd, env, nil
}

// Start launches a managed job and answers once its supervisor has claimed
// its identity (or the launch failed).
func (s *Service) Start(ctx context.Context, who principal.Principal, req StartRequest) (*StartResult, error) {
	if _, err := waitDuration(req.WaitMS); err != nil {
		return nil, err
	}
	// What retention discarded to admit this job is removed once the
	// launch has answered, off its path.
	defer s.store.Sweep()
	if key := req.IdempotencyKey; key != "" {
		if err := checkKey(key); err != nil {
			return nil, err
		}
		defer s.keys.lock(string(who) + "\x00" + key)()
		k, err := s.store.Keyed(string(who), keyDigest(key))
		if err != nil {
			return nil, err
		}
		if k != nil {
			return s.reuse(ctx, who, &req, k, req.WaitMS)
		}
	}
	env, err := s.validateStart(&req)
	if err != nil {
		return nil, err
	}
	caps, err := jobresources.Load(s.stateDir)
	if err != nil {
		return nil, errcode.Wrap(errcode.PolicyInvalid, err, "the owner's job-resources.json is invalid (%v); launches are refused until it is fixed",
			strings.TrimPrefix(err.Error(), jobresources.ErrInvalid.Error()+": "))
	}
	domain, err := s.launcher.Domain(ctx)
	if err != nil {
		return nil, err
	}
	cut, err := s.cutOff()
	if err != nil {
		return nil, err
	}
	if can, _ := s.CanCutOff(domain); cut && !can {
		return nil, errCannotCut("jobs")
	}
	id, err := s.launch(ctx, env, caps, domain, cut, who, &req)
	if domain == jobmeta.DomainSystemdUnit {
		s.refillSpare(caps, cut)
	}
	var k *jobstore.KeyTaken
	if errors.As(err, &k) {
		// Another process started the key's job meanwhile.
		return s.reuse(ctx, who, &req, k, req.WaitMS)
	}
	if err != nil {
		return nil, err
	}
	return s.started(ctx, who, id, req.WaitMS)
}

// started is process.start's answer for job id: its record once the
// launch is settled, and how it ended when it ends within waitMS.
func (s *Service) started(ctx context.Context, who principal.Principal, id string, waitMS int) (*StartResult, error) {
	wait := time.Duration(waitMS) * time.Millisecond
	// A running job has a start time: the claim gets it a moment after
	// READY, once the shell runs (a job no supervisor claimed has none
	// to wait for).
	rec, err := s.await(ctx, id, limits.ClaimTimeout, shellPoll, func(r *jobmeta.Record) bool { return r.Terminal || r.StartedAt != nil || r.Claim == nil })
	if err != nil {
		return nil, err
	}
	if wait > 0 && !rec.Terminal {
		rec, err = s.awaitTerminal(ctx, id, wait)
		if err != nil {
			return nil, err
		}
	}
	res := &StartResult{
		ProcessID: id, State: rec.State, Terminal: rec.Terminal, Unit: rec.Unit,
		FailureDomain: rec.FailureDomain, StartedAt: rec.StartedAt,
	}
	if s.hostHealth != nil {
		res.HostHealth = s.hostHealth()
	}
	if wait > 0 && rec.Terminal {
		res.ExitCode, res.Signal, res.CompletedAt, res.StoppedBy, res.Error = rec.ExitCode, rec.Signal, rec.CompletedAt, rec.StoppedBy, rec.Error
		out, err := s.Output(ctx, who, OutputRequest{ProcessID: id})
		if err != nil {
			return nil, err
		}
		res.Output = &Pages{Stdout: out.Stdout, Stderr: out.Stderr}
	}
	return res, nil
}

// newJob is the record of a job about to be admitted.
func (s *Service) newJob(id string, env *envelope.Envelope, domain string, who principal.Principal, req *StartRequest) *jobmeta.Job {
	job := &jobmeta.Job{
		Schema: jobmeta.SchemaVersion, ID: id, DeviceID: s.deviceID, Name: req.Name, Owner: string(who),
		FailureDomain: domain, CreatedAt: s.store.Now(), TimeoutS: env.TimeoutS,
		Stdin: env.Stdin, PTY: env.PTY, Idempotency: idempotency(id, req),
	}
	if domain == jobmeta.DomainSystemdUnit {
		job.Unit = launcher.UnitName(s.deviceID, id)
	}
	return job
}

// sendEnvelope writes env to w and closes it, returning the outcome on
// the channel. The supervisor reads the envelope to EOF while the
// launcher waits for its claim; a large envelope does not fit the pipe
// buffer, so it is written concurrently, closed to signal the end, and
// bounded by timeout so a dead reader cannot hold the launch.
func sendEnvelope(w *os.File, env *envelope.Envelope, timeout time.Duration) <-chan error {
	w.SetWriteDeadline(time.Now().Add(timeout))
	wrote := make(chan error, 1)
	go func() {
		err := envelope.Encode(w, env)
		w.Close()
		wrote <- err
	}()
	return wrote
}

// launch runs the launch sequence with its ledger and returns the job ID.
// A launch that fails after admission leaves a launch_failed record and
// returns its ID with no error, so the client can see what happened; a
// key another job holds is a *jobstore.KeyTaken.
func (s *Service) launch(ctx context.Context, env *envelope.Envelope, caps jobresources.Caps, domain string, cut bool, who principal.Principal, req *StartRequest) (string, error) {
	// The launch finishes or fails cleanly even if the request is cancelled.
	timeout := s.claimTimeout
	if timeout == 0 {
		timeout = limits.ClaimTimeout
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()

	sp := s.takeSpare(ctx, domain, caps, cut, env.Timeout())
	id := uuid.NewString()
	if sp != nil {
		id = sp.id
	}
	job := s.newJob(id, env, domain, who, req)
	if sp != nil {
		job.Supervisor = sp.sup
	}
	l := &launchRun{s: s, id: id, phase: s.phaseClock(id)}
	if err := l.admit(job, sp); err != nil {
		return "", err
	}

	var started *launcher.Started
	var wrote <-chan error
	poll := time.Duration(0)
	var r *os.File
	if sp != nil {
		// The spare's unit runs: the job starts with its envelope.
		l.led.add("unit", func() { sp.w.Close(); sp.started.Stop(context.WithoutCancel(ctx)) })
		started, wrote = sp.handOver(env, timeout)
		l.phase(activity.PhaseSpareHandOver, "")
		poll = handOverPoll
	} else {
		var ok bool
		if started, wrote, r, ok = l.startUnit(ctx, env, launcher.Spec{Unit: job.Unit, JobDir: s.store.Dir(id), Resources: caps, Timeout: env.Timeout(), CutOff: cut}, domain, timeout); !ok {
			return id, nil
		}
	}

	// The claim on disk decides, not the start job: a READY that went
	// astray or a start-job reply that was lost must not fail (and stop)
	// a job whose supervisor runs.
	if err := s.awaitClaim(ctx, id, started, poll); err != nil {
		code := jobmeta.LaunchErrSupervisor
		if errors.Is(err, context.DeadlineExceeded) {
			code = jobmeta.LaunchErrClaimTimeout
		}
		l.fail(activity.PhaseIdentityClaim, code)
		return id, nil
	}
	l.phase(activity.PhaseIdentityClaim, "")
	if r != nil {
		r.Close()
	}
	if job.Unit != "" && job.Supervisor == nil {
		s.recordUnitSupervisor(id, job.Unit)
	}
	<-wrote
	return id, nil
}

// launchRun is one launch after its job is known: the ledger of what to
// undo and the phases journaled.
type launchRun struct {
	s        *Service
	id       string
	led      ledger
	phase    func(activity.Phase, string)
	failCode string
}

// admit admits the job, into the spare's directory when there is one.
func (l *launchRun) admit(job *jobmeta.Job, sp *spare) error {
	var err error
	if sp != nil {
		err = l.s.store.AdmitSpare(job, sp.lock)
	} else {
		err = l.s.store.Admit(job)
	}
	if err != nil {
		if sp != nil {
			l.s.returnSpare(sp)
		}
		// A key found taken launches nothing: no phase to record.
		if k := (*jobstore.KeyTaken)(nil); !errors.As(err, &k) {
			l.phase(activity.PhaseAdmission, string(errcode.From(err).Code))
		}
		return err
	}
	l.phase(activity.PhaseAdmission, "")
	l.failCode = jobmeta.LaunchErrInternal
	l.led.add("admission slot", func() { l.s.store.MarkLaunchFailed(l.id, l.failCode) })
	return nil
}

// fail journals phase as failed with code and undoes the launch.
func (l *launchRun) fail(phase activity.Phase, code string) {
	l.failCode = code
	l.phase(phase, code)
	l.phase = l.s.phaseClock(l.id)
	l.led.releaseAll()
	l.phase(activity.PhaseRollback, code)
}

// startUnit starts the job's own unit with the envelope on a pipe; ok is
// false once it failed and was undone. r is the pipe's read end, closed
// once the supervisor has claimed.
func (l *launchRun) startUnit(ctx context.Context, env *envelope.Envelope, spec launcher.Spec, domain string, timeout time.Duration) (started *launcher.Started, wrote <-chan error, r *os.File, ok bool) {
	r, w, err := os.Pipe()
	if err != nil {
		l.fail(activity.PhasePipe, jobmeta.LaunchErrPipe)
		return nil, nil, nil, false
	}
	l.phase(activity.PhasePipe, "")
	l.led.add("pipe", func() { r.Close(); w.Close() })
	wrote = sendEnvelope(w, env, timeout)
	spec.Stdin = r
	if started, err = l.s.launcher.Start(ctx, domain, spec); err != nil {
		l.fail(activity.PhaseUnitStart, jobmeta.LaunchErrUnit)
		return nil, nil, nil, false
	}
	l.phase(activity.PhaseUnitStart, "")
	l.led.add("unit", func() { started.Stop(context.WithoutCancel(ctx)) })
	if started.PID > 0 {
		// A fallback supervisor has no unit to ask about: its identity,
		// read here, not from its claim, is what says it runs.
		if sup, _, err := l.s.procs.Lookup(started.PID); err == nil {
			l.s.store.RecordSupervisor(l.id, sup)
		}
	}
	return started, wrote, r, true
}

// recordUnitSupervisor records the unit's main process as job id's
// supervisor, after the answer: until it is on record the manager is
// asked about the unit.
func (s *Service) recordUnitSupervisor(id, unit string) {
	s.recording.Add(1)
	go func() {
		defer s.recording.Done()
		ctx, cancel := context.WithTimeout(context.Background(), unitQueryTimeout)
		defer cancel()
		if sup := s.unitSupervisor(ctx, unit); sup != nil {
			s.store.RecordSupervisor(id, *sup)
		}
	}()
}

// unitSupervisor identifies unit's main process, the job's supervisor, as
// the user manager names it: what says the job runs when the manager can
// no longer be asked. Nil when it cannot be told.
func (s *Service) unitSupervisor(ctx context.Context, unit string) *procid.Identity {
	pid, err := s.launcher.MainPID(ctx, unit)
	if err != nil {
		return nil
	}
	sup, _, err := s.procs.Lookup(pid)
	if err != nil {
		return nil
	}
	return &sup
}

// phaseClock returns a function that records the phase that just ended
// (with a failure code, or "" for success) and restarts the clock.
func (s *Service) phaseClock(id string) func(activity.Phase, string) {
	began := time.Now()
	return func(p activity.Phase, code string) {
		s.journal.Record(activity.LaunchPhaseEvent(p, id, time.Since(began), code))
		began = time.Now()
	}
}

// readyGrace is how long a launch whose claim is on disk waits for its
// unit's READY, so that the unit is active when process.start answers
// (READY comes about a millisecond after the claim). A READY that went
// astray costs the first launch on that manager this much, never the job:
// later launches do not wait for READY until one arrives again.
const readyGrace = 250 * time.Millisecond

// claimPollFine is the longest pause between looks for a claim that no
// READY will announce.
const claimPollFine = 2 * time.Millisecond

// awaitClaim waits until the supervisor's identity claim is on disk. The
// start job's completion (READY, sent after the claim) ends the wait at
// once; its failure ends it unless the claim is there after all. A poll
// other than zero looks for the claim at that steady interval.
func (s *Service) awaitClaim(ctx context.Context, id string, started *launcher.Started, poll time.Duration) error {
	dir := s.store.Dir(id)
	claimed := func() bool { return jobmeta.Claimed(dir) }
	ready := started.Ready
	// Claims normally land within a few milliseconds: poll finely first.
	// Without a READY to end the wait early (the fallback, a manager that
	// lost READY) only the poll notices the claim, so it stays fine.
	interval, most := 500*time.Microsecond, pollInterval
	if ready == nil {
		most = claimPollFine
	}
	if poll > 0 {
		interval, most = poll, poll
	}
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		if claimed() {
			if ready != nil {
				grace := time.NewTimer(readyGrace)
				select {
				case <-ready:
				case <-started.Failed:
				case <-grace.C:
					started.MissedReady()
				case <-ctx.Done():
				}
				grace.Stop()
			}
			return nil
		}
		select {
		case <-ctx.Done():
			if claimed() {
				return nil
			}
			return ctx.Err()
		case <-started.Failed:
			if claimed() {
				return nil
			}
			return errors.New("supervisor ended before claiming its identity")
		case <-ready:
			// Checked at the top; keep polling should it not be visible.
			ready = nil
		case <-t.C:
			if interval < most {
				interval *= 2
			}
			t.Reset(interval)
		}
	}
}

// awaitTerminal polls a job until it is terminal or d passes.
func (s *Service) awaitTerminal(ctx context.Context, id string, d time.Duration) (*jobmeta.Record, error) {
	return s.await(ctx, id, d, pollInterval, func(r *jobmeta.Record) bool { return r.Terminal })
}

// await polls job id's record every poll until done says so, for at most
// d or until ctx ends, and returns the last record read.
func (s *Service) await(ctx context.Context, id string, d, poll time.Duration, done func(*jobmeta.Record) bool) (*jobmeta.Record, error) {
	deadline := time.Now().Add(d)
	for {
		rec, err := s.store.Get(id)
		if err != nil || done(rec) || time.Now().After(deadline) {
			return rec, err
		}
		select {
		case <-ctx.Done():
			return rec, nil
		case <-time.After(poll):
		}
	}
}

// get returns one job's record if who may see it. Another principal's job
// answers exactly as a job that does not exist.
func (s *Service) get(who principal.Principal, id string) (*jobmeta.Record, error) {
	rec, err := s.store.Get(id)
	if err != nil {
		return nil, err
	}
	if !who.Sees(rec.Owner) {
		return nil, jobstore.ErrNotFound()
	}
	return rec, nil
}

// Status returns one job's record.
func (s *Service) Status(who principal.Principal, id string) (*jobmeta.Record, error) {
	return s.get(who, id)
}

// List returns the jobs who may see, newest first.
func (s *Service) List(who principal.Principal) ([]*jobmeta.Record, error) {
	recs, err := s.store.List()
	if err != nil {
		return nil, err
	}
	mine := recs[:0]
	for _, r := range recs {
		if who.Sees(r.Owner) {
			mine = append(mine, r)
		}
	}
	return mine, nil
}

// Summaries lists the summaries of who's jobs, newest first (process.jobs):
// unlike List it does not derive the jobs that have ended for good.
func (s *Service) Summaries(who principal.Principal) ([]jobmeta.Summary, error) {
	all, err := s.store.Summaries()
	if err != nil {
		return nil, err
	}
	mine := all[:0]
	for _, sum := range all {
		if who.Sees(sum.Owner) {
			mine = append(mine, sum)
		}
	}
	return mine, nil
}

// Forget deletes a terminal job.
func (s *Service) Forget(who principal.Principal, id string) (*jobmeta.Record, error) {
	if _, err := s.get(who, id); err != nil {
		return nil, err
	}
	return s.store.Forget(id)
}

// Stop asks a live job's supervisor to stop the job. It verifies the
// supervisor's identity first and claims nothing when it does not match.
func (s *Service) Stop(who principal.Principal, id string) (*jobmeta.Record, error) {
	rec, err := s.get(who, id)
	if err != nil {
		return nil, err
	}
	if rec.Terminal || rec.State == jobmeta.Corrupt {
		if err := s.checkReused(rec); err != nil {
			return nil, err
		}
		return rec, nil
	}
	dir := s.store.Dir(id)
	if rec.StopRequestAt == nil {
		req := &jobmeta.StopRequest{Schema: jobmeta.SchemaVersion, RequestedAt: s.store.Now()}
		if err := atomicfile.WriteJSON(filepath.Join(dir, jobmeta.StopFile), req); err != nil {
			return nil, fmt.Errorf("record stop request: %w", err)
		}
	}
	// A supervisor that has not claimed yet finds stop.json right after
	// its claim (it handles SIGTERM only from then); one that has, or
	// should have by now, gets a signal.
	if rec.Claim == nil && s.store.Now().Sub(rec.CreatedAt) < limits.ClaimTimeout {
		return s.store.Get(id)
	}
	if err := s.signalSupervisor(id, dir); err != nil {
		return nil, err
	}
	return s.store.Get(id)
}

// signalSupervisor sends SIGTERM to job id's supervisor, found from what
// the job cannot forge: its unit's main process, asked of the user
// manager, or else the supervisor the launcher recorded (the unit's main
// process when it started, or the fallback's fork), identity-checked. Only
// a job of an earlier build with neither is found by its claim.
func (s *Service) signalSupervisor(id, dir string) error {
	launch, err := s.store.Launch(id)
	if err != nil {
		return err
	}
	var sup procid.Identity
	if launch.Unit != "" {
		ctx, cancel := context.WithTimeout(context.Background(), unitQueryTimeout)
		defer cancel()
		err := s.launcher.SignalMain(ctx, launch.Unit, unix.SIGTERM)
		switch {
		case err == nil || errors.Is(err, launcher.ErrNotRunning):
			return nil
		case launch.Supervisor == nil:
			return errcode.Wrap(errcode.Internal, err, "could not signal the job's supervisor")
		}
		// The manager is gone, the supervisor may not be.
	}
	switch {
	case launch.Supervisor != nil:
		sup = *launch.Supervisor
	default:
		claim, err := jobmeta.ReadClaim(dir)
		if err != nil {
			return nil
		}
		if boot, _ := s.procs.BootID(); claim.BootID != boot {
			return nil
		}
		sup = claim.Supervisor
	}
	switch err := s.procs.Signal(sup, unix.SIGTERM); {
	case errors.Is(err, procid.ErrMismatch):
		return errcode.New(errcode.IdentityMismatch, "the job's recorded supervisor PID now belongs to another process; no signal was sent")
	case err != nil && !errors.Is(err, procid.ErrGone):
		return errcode.Wrap(errcode.Internal, err, "could not signal the job's supervisor")
	}
	return nil
}

// checkReused reports identity_mismatch for a job whose supervisor is gone
// but whose PID now belongs to another process: a stop must not pretend
// it reached the job.
func (s *Service) checkReused(rec *jobmeta.Record) error {
	if rec.Claim == nil || rec.CompletedAt != nil {
		return nil
	}
	cur, _, err := s.procs.Lookup(rec.Claim.Supervisor.PID)
	if err == nil && cur.StartTicks != rec.Claim.Supervisor.StartTicks {
		return errcode.New(errcode.IdentityMismatch, "the job's recorded supervisor PID now belongs to another process; no signal was sent")
	}
	return nil
}

// KillSurvivors ends the surviving processes of a terminal fallback job,
// each signalled only after its identity is verified. It is for the
// machine's owner (`commandcore jobs reconcile --kill`), not remote clients.
func (s *Service) KillSurvivors(id string) ([]procid.Identity, error) {
	rec, err := s.store.Get(id)
	if err != nil {
		return nil, err
	}
	if !rec.Terminal {
		return nil, errcode.New(errcode.InvalidArgument, "the job is still %s; stop it first", rec.State)
	}
	var killed []procid.Identity
	for _, p := range rec.Survivors {
		if err := s.procs.Signal(p, unix.SIGKILL); err == nil {
			killed = append(killed, p)
		}
	}
	return killed, nil
}
