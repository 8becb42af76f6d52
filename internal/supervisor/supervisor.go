// Package supervisor is the per-job supervisor: the main process of a job's
// transient unit (or, without a user manager, an independent session). It
// reads the private envelope from stdin, claims its identity (claim.go),
// runs the shell in its own process group, captures its output
// (capture.go), carries out stop requests and the job's time limit
// (stop.go) and publishes the terminal record. It speaks no network, MCP or SQLite.
package supervisor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/atomicfile"
	"github.com/commandcore/commandcore/internal/capture"
	"github.com/commandcore/commandcore/internal/cmdpipe"
	"github.com/commandcore/commandcore/internal/envelope"
	"github.com/commandcore/commandcore/internal/exitstatus"
	"github.com/commandcore/commandcore/internal/jobinput"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/procgroup"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/secretmask"
	"github.com/commandcore/commandcore/internal/termscreen"
)

// Start errors recorded in the terminal record when no shell ran.
const (
	StartErrEnvelope = "envelope_invalid"
	StartErrShell    = "shell_start_failed"
	StartErrInput    = "input_channel_failed"
)

// Run supervises the job in jobDir, reading the envelope from stdin.
func Run(jobDir string, stdin io.Reader, procs *procid.Source) error {
	if !filepath.IsAbs(jobDir) {
		return errors.New("job directory must be absolute")
	}
	// A directory without job.json is a spare's: its supervisor was started
	// before its job, and is up once it waits for the envelope. Its job is
	// admitted (job.json written) before the envelope is sent; a spare the
	// agent dismisses gets no envelope and exits with nothing to record.
	jobFile := filepath.Join(jobDir, jobmeta.JobFile)
	_, err := jobmeta.Read[jobmeta.Job](jobFile)
	spare := errors.Is(err, os.ErrNotExist)
	if err != nil && !spare {
		return fmt.Errorf("read job metadata: %w", err)
	}
	if spare {
		daemon.SdNotify(false, daemon.SdNotifyReady)
	}
	env, envErr := envelope.Decode(stdin)
	if spare {
		if _, err := jobmeta.Read[jobmeta.Job](jobFile); errors.Is(err, os.ErrNotExist) {
			return nil
		} else if err != nil {
			return fmt.Errorf("read job metadata: %w", err)
		}
	}

	s := &sup{dir: jobDir, procs: procs}
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

	// The input channel exists before the claim, so it is there as soon
	// as process.start answers.
	var input *jobinput.Listener
	var inputErr error
	if envErr == nil && env.Interactive() {
		input, inputErr = jobinput.Listen(jobDir)
		if inputErr == nil {
			defer input.Close()
		}
	}
	if err := s.claim(); err != nil {
		return fmt.Errorf("claim identity: %w", err)
	}
	if envErr != nil {
		return s.finishUnstarted(StartErrEnvelope, nil)
	}
	if inputErr != nil {
		return s.finishUnstarted(StartErrInput, inputErr)
	}
	// A stop requested before the claim was visible found nothing to
	// signal; honour it here, before anything runs.
	if s.stopRecorded() {
		s.stdout.Seal()
		s.stderr.Seal()
		return s.publish(jobmeta.Result{StopRequested: true, CompletedAt: time.Now().UTC()})
	}
	return s.supervise(env, input, sigs)
}

type sup struct {
	dir            string
	procs          *procid.Source
	stdout, stderr *capture.Writer
	claimed        jobmeta.Claim
}

func (s *sup) path(name string) string { return filepath.Join(s.dir, name) }

// offsets reports how much of each stream has been captured.
func (s *sup) offsets() (stdout, stderr int64) {
	return s.stdout.Meta().ObservedBytes, s.stderr.Meta().ObservedBytes
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
	if err := atomicfile.WriteJSON(s.path(jobmeta.ResultFile), &r); err != nil {
		return fmt.Errorf("publish result: %w", err)
	}
	return nil
}

// followScreen starts rendering a pty job's screen from its stdout
// capture; nil for other jobs, or when the capture cannot be followed
// (the job runs on, process.screen is refused).
func (s *sup) followScreen(env *envelope.Envelope) *termscreen.Follower {
	if env.PTY == nil {
		return nil
	}
	fl, err := termscreen.Follow(s.path(jobmeta.StdoutFile), *env.PTY)
	if err != nil {
		return nil
	}
	return fl
}

func (s *sup) supervise(env *envelope.Envelope, input *jobinput.Listener, sigs <-chan os.Signal) error {
	std, err := openStdio(env)
	if err != nil {
		return err
	}
	command, err := cmdpipe.New()
	if err != nil {
		std.closeAll()
		return fmt.Errorf("command pipe: %w", err)
	}
	defer command.Close()
	proc, startErr := os.StartProcess(env.Shell, cmdpipe.Argv(env.Shell), &os.ProcAttr{
		Dir:   env.Cwd,
		Env:   env.Env,
		Files: append(std.child[:], command.Reader()),
		Sys:   std.procAttr(),
	})
	std.closeChildEnds()
	if startErr != nil {
		std.closeAll()
		return s.finishUnstarted(StartErrShell, startErr)
	}
	if sn := openSessionNice(proc.Pid, std.pty); sn != nil {
		go sn.apply()
	}
	screen := s.followScreen(env)
	if input != nil {
		// The job's secrets, in this process's memory only: the screen
		// is drawn from the capture, so it never holds them either.
		secrets := &secretmask.Set{}
		std.out.mask(secrets)
		sink := jobinput.Sink{W: std.input, Terminal: env.PTY != nil, Offsets: s.offsets, Secrets: secrets}
		if screen != nil {
			sink.Resized = screen.Resize
			sink.Screen = func() error { return screen.Publish(s.path(jobmeta.ScreenFile)) }
		}
		input.Serve(sink)
	}
	command.Send(env.Command)
	writers := [2]*capture.Writer{s.stdout, s.stderr}
	std.out.drain(writers)

	// The child is ours and unreaped until we call Wait, so its PID and
	// process group cannot be reused while we look it up or signal it.
	group, err := procgroup.Of(s.procs, proc.Pid)
	if err != nil {
		return fmt.Errorf("look up child: %w", err)
	}
	if err := s.recordChild(group.Leader()); err != nil {
		return err
	}
	// The limit counts from the recorded start, so completed_at minus
	// started_at is never below it for a job it stopped.
	var deadline time.Time
	if limit := env.Timeout(); limit > 0 {
		deadline = s.claimed.StartedAt.Add(limit)
	}
	end, err := s.await(proc, group, sigs, deadline)
	if err != nil {
		return err
	}
	// No input after the end; a terminal's master is closed with its
	// capture, after the channel stops writing to it.
	if input != nil {
		input.Close()
	}
	std.out.finish(writers)
	if screen != nil {
		// The last screen is on disk before the job reads as ended.
		screen.Publish(s.path(jobmeta.ScreenFile))
		screen.Close()
	}

	r := jobmeta.Result{CompletedAt: end.completedAt, StopRequested: end.stopRequested, StoppedByManager: end.byManager, TimedOut: end.timedOut}
	r.ExitCode, r.Signal = exitstatus.Of(end.status)
	return s.publish(r)
}
