// Package supervisor is the per-job supervisor: the main process of a job's
// transient unit (or, without a user manager, an independent session). It
// reads the private envelope from stdin, claims its identity, runs the shell
// in its own process group, captures its output, carries out stop requests
// and publishes the terminal record. It speaks no network, MCP or SQLite.
package supervisor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/capture"
	"github.com/commandcore/commandcore/internal/cmdpipe"
	"github.com/commandcore/commandcore/internal/envelope"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/procid"
)

// Start errors recorded in the terminal record when no shell ran.
const (
	StartErrEnvelope = "envelope_invalid"
	StartErrShell    = "shell_start_failed"
)

// captureGrace is how long capture keeps draining after the shell exits, for
// descendants that still hold its pipes. After it the capture is finalised
// as incomplete; the unit's cleanup ends such descendants.
const captureGrace = time.Second

// managerSignalGrace is how long a child killed by SIGTERM waits for the
// supervisor's own SIGTERM, sent by the service manager at the same time.
const managerSignalGrace = 200 * time.Millisecond

// pipeSize is the capacity asked for the job's output pipes (the default
// maximum an unprivileged process may set).
const pipeSize = 1 << 20

// groupPoll is how often a stopping supervisor checks whether the job's
// process group has emptied before the SIGKILL deadline.
const groupPoll = 20 * time.Millisecond

// Run supervises the job in jobDir, reading the envelope from stdin.
func Run(jobDir string, stdin io.Reader, procs *procid.Source) error {
	if !filepath.IsAbs(jobDir) {
		return errors.New("job directory must be absolute")
	}
	if _, err := jobmeta.Read[jobmeta.Job](filepath.Join(jobDir, jobmeta.JobFile)); err != nil {
		return fmt.Errorf("read job metadata: %w", err)
	}
	env, envErr := envelope.Decode(stdin)

	s := &sup{dir: jobDir, procs: procs}
	var err error
	if s.stdout, err = capture.Create(filepath.Join(jobDir, jobmeta.StdoutFile)); err != nil {
		return fmt.Errorf("create stdout capture: %w", err)
	}
	defer s.stdout.Close()
	if s.stderr, err = capture.Create(filepath.Join(jobDir, jobmeta.StderrFile)); err != nil {
		return fmt.Errorf("create stderr capture: %w", err)
	}
	defer s.stderr.Close()

	// Stop requests may arrive as soon as the claim is visible.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP)
	defer signal.Stop(sigs)

	if err := s.claim(); err != nil {
		return fmt.Errorf("claim identity: %w", err)
	}
	if envErr != nil {
		return s.finishUnstarted(StartErrEnvelope, nil)
	}
	// A stop requested before the claim was visible found nothing to
	// signal; honour it here, before anything runs.
	if s.stopRecorded() {
		s.stdout.Seal()
		s.stderr.Seal()
		return s.publish(jobmeta.Result{StopRequested: true, CompletedAt: time.Now().UTC()})
	}
	return s.supervise(env, sigs)
}

type sup struct {
	dir            string
	procs          *procid.Source
	stdout, stderr *capture.Writer
	ident          jobmeta.Identity
}

func (s *sup) path(name string) string { return filepath.Join(s.dir, name) }

// claim records who this supervisor is, atomically, before any shell runs.
func (s *sup) claim() error {
	self, err := s.procs.Self()
	if err != nil {
		return err
	}
	boot, err := s.procs.BootID()
	if err != nil {
		return err
	}
	s.ident = jobmeta.Identity{
		Schema:       jobmeta.SchemaVersion,
		Supervisor:   self,
		BootID:       boot,
		InvocationID: os.Getenv("INVOCATION_ID"),
		ClaimedAt:    time.Now().UTC(),
	}
	// systemd tells its services the manager's PID; record its incarnation
	// so its later disappearance can be recognised.
	if pid, err := strconv.Atoi(os.Getenv("MANAGERPID")); err == nil && pid > 0 {
		if m, _, err := s.procs.Lookup(pid); err == nil {
			s.ident.Manager = &m
		}
	}
	if err := jobmeta.WriteAtomic(s.path(jobmeta.IdentityFile), &s.ident); err != nil {
		return err
	}
	// The unit is Type=notify: its start job completes exactly when the
	// claim is on disk, so the launcher need not poll for it. Without
	// $NOTIFY_SOCKET (the fallback) this does nothing.
	daemon.SdNotify(false, daemon.SdNotifyReady)
	return nil
}

// finishUnstarted publishes a terminal record for a job whose shell never ran.
func (s *sup) finishUnstarted(reason string, cause error) error {
	if cause != nil {
		// The job's own stderr is private to its owner; the reason may name
		// the working directory or shell the owner asked for.
		fmt.Fprintf(s.stderr, "commandcore: the shell could not be started: %v\n", cause)
	}
	s.stdout.Seal()
	s.stderr.Seal()
	return s.publish(jobmeta.Result{StartError: reason, CompletedAt: time.Now().UTC()})
}

func (s *sup) publish(r jobmeta.Result) error {
	r.Schema = jobmeta.SchemaVersion
	r.Capture = jobmeta.Capture{Stdout: jobmeta.StreamCaptureOf(s.stdout.Meta()), Stderr: jobmeta.StreamCaptureOf(s.stderr.Meta())}
	if err := jobmeta.WriteAtomic(s.path(jobmeta.ResultFile), &r); err != nil {
		return fmt.Errorf("publish result: %w", err)
	}
	return nil
}

func (s *sup) supervise(env *envelope.Envelope, sigs <-chan os.Signal) error {
	outR, outW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("stderr pipe: %w", err)
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return fmt.Errorf("open null device: %w", err)
	}
	command, err := cmdpipe.New()
	if err != nil {
		return fmt.Errorf("command pipe: %w", err)
	}
	defer command.Close()
	proc, startErr := os.StartProcess(env.Shell, cmdpipe.Argv(env.Shell), &os.ProcAttr{
		Dir:   env.Cwd,
		Env:   env.Env,
		Files: []*os.File{devnull, outW, errW, command.Reader()},
		Sys:   &unix.SysProcAttr{Setpgid: true},
	})
	devnull.Close()
	outW.Close()
	errW.Close()
	if startErr != nil {
		outR.Close()
		errR.Close()
		return s.finishUnstarted(StartErrShell, startErr)
	}
	command.Send(env.Command)

	// A larger pipe lets a fast writer run ahead between our reads,
	// halving wake-ups; failure only costs throughput.
	growPipe(outR)
	growPipe(errR)
	outDone := drain(s.stdout, outR)
	errDone := drain(s.stderr, errR)

	// The child is ours and unreaped until we call Wait, so its PID and
	// process group cannot be reused while we look it up or signal it.
	child, _, err := s.procs.Lookup(proc.Pid)
	if err != nil {
		return fmt.Errorf("look up child: %w", err)
	}
	started := time.Now().UTC()
	s.ident.Child = &child
	s.ident.StartedAt = &started
	if err := jobmeta.WriteAtomic(s.path(jobmeta.IdentityFile), &s.ident); err != nil {
		return fmt.Errorf("record child identity: %w", err)
	}

	exited := make(chan time.Time, 1)
	go func() {
		// WNOWAIT leaves the child a zombie, keeping its PID and group
		// reserved until escalation is over.
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, proc.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if err != unix.EINTR {
				break
			}
		}
		exited <- time.Now().UTC()
	}()

	var (
		stopping      bool
		stopRequested bool
		byManager     bool
		killAt        <-chan time.Time
		completedAt   time.Time
	)
loop:
	for {
		select {
		case <-sigs:
			if stopping {
				continue
			}
			stopping = true
			stopRequested = s.stopRecorded()
			// A SIGTERM without stop.json comes from the service manager
			// itself (a shutdown, say): carried out the same way, and
			// recorded as such so the end can be classified honestly.
			byManager = !stopRequested
			s.signalGroup(child, unix.SIGTERM)
			killAt = time.After(limits.StopEscalation)
		case <-killAt:
			s.signalGroup(child, unix.SIGKILL)
			killAt = nil
		case completedAt = <-exited:
			break loop
		}
	}
	if killAt != nil {
		// Members of the group that ignore SIGTERM get SIGKILL at the
		// deadline, while the zombie leader still pins the group ID.
		s.awaitGroupOrDeadline(child, killAt)
	}
	st, err := proc.Wait()
	if err != nil {
		return fmt.Errorf("reap child: %w", err)
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && !stopping && ws.Signaled() && ws.Signal() == unix.SIGTERM {
		// The service manager signals the whole unit at once, so the
		// child's death can be seen before our own SIGTERM is: wait for it
		// briefly, or the manager's stop would pass for an unexplained end.
		select {
		case <-sigs:
			stopRequested = s.stopRecorded()
			byManager = !stopRequested
		case <-time.After(managerSignalGrace):
		}
	}

	graceEnd := time.Now().Add(captureGrace)
	finishCapture(outR, outDone, s.stdout, graceEnd)
	finishCapture(errR, errDone, s.stderr, graceEnd)

	r := jobmeta.Result{CompletedAt: completedAt, StopRequested: stopRequested, StoppedByManager: byManager}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		r.Signal = unix.SignalName(unix.Signal(ws.Signal()))
	} else {
		code := st.ExitCode()
		r.ExitCode = &code
	}
	return s.publish(r)
}

// stopRecorded reports whether a client asked for the stop (stop.json).
func (s *sup) stopRecorded() bool {
	_, err := os.Stat(s.path(jobmeta.StopFile))
	return err == nil
}

// signalGroup signals the child's process group after checking that the
// group leader is still the child we started.
func (s *sup) signalGroup(child procid.Identity, sig unix.Signal) {
	cur, _, err := s.procs.Lookup(child.PID)
	if err != nil || cur.StartTicks != child.StartTicks {
		return
	}
	unix.Kill(-child.PID, sig)
}

func (s *sup) awaitGroupOrDeadline(child procid.Identity, killAt <-chan time.Time) {
	tick := time.NewTicker(groupPoll)
	defer tick.Stop()
	for {
		select {
		case <-killAt:
			s.signalGroup(child, unix.SIGKILL)
			return
		case <-tick.C:
			if !groupHasLiveMembers(child.PID) {
				return
			}
		}
	}
}

// groupHasLiveMembers reports whether the process group has members other
// than the zombie leader. Signal 0 succeeds for zombies too, so members are
// counted through /proc.
func groupHasLiveMembers(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pgid {
			continue
		}
		if g, err := unix.Getpgid(pid); err == nil && g == pgid {
			return true
		}
	}
	return false
}

// growPipe asks for a larger pipe buffer. It goes through SyscallConn:
// File.Fd would switch the descriptor to blocking mode, and a blocking
// read could then not be interrupted when capture has to give up on EOF.
func growPipe(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize) })
	}
}

func drain(w *capture.Writer, r *os.File) <-chan error {
	done := make(chan error, 1)
	go func() { done <- capture.Drain(w, r) }()
	return done
}

// finishCapture waits for the stream's EOF until grace ends, then seals it
// (EOF reached) or leaves it finalised as incomplete.
func finishCapture(r *os.File, done <-chan error, w *capture.Writer, graceEnd time.Time) {
	t := time.NewTimer(time.Until(graceEnd))
	defer t.Stop()
	select {
	case err := <-done:
		r.Close()
		if err == nil {
			w.Seal()
		}
		return
	case <-t.C:
	}
	r.Close()
	<-done
}
