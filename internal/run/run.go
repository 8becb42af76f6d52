// Package run is process.run (docs/tools.md): a short foreground command whose
// output streams live, in chunks of at most limits.LiveChunkBytes through a
// bounded queue of limits.LiveQueueFrames frames, and whose result carries a
// bounded capture of both streams. A full queue blocks the readers, so a
// stalled transport stalls the command on its pipe instead of growing
// memory. The command is cancelled when the request is cancelled, the
// transport fails or the timeout passes.
package run

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/commandcore/commandcore/internal/cmdpipe"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/exitstatus"
	"github.com/commandcore/commandcore/internal/hideexec"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/procgroup"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/textenc"
)

// Stream names.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// Request is process.run's input.
type Request struct {
	Command   string            `json:"command" jsonschema:"the shell command to run"`
	Cwd       string            `json:"cwd,omitempty" jsonschema:"absolute working directory (default: the agent user's home)"`
	Env       map[string]string `json:"env,omitempty" jsonschema:"environment variables added to the agent's environment"`
	TimeoutMS int               `json:"timeout_ms,omitempty" jsonschema:"1-600000: the command is stopped (SIGTERM, then SIGKILL) after this long; default 60000"`
	MaxBytes  int               `json:"max_bytes,omitempty" jsonschema:"1-1048576, default 65536: output bytes kept, both streams together"`
}

// StreamOutput is one stream's retained output.
type StreamOutput struct {
	// Data is the retained output, as UTF-8 text when it is valid UTF-8,
	// else base64: the whole stream, or its first bytes and, past Gap, its
	// last ones.
	Data     string `json:"data"`
	Encoding string `json:"encoding"`
	// ObservedBytes counts every byte read from the stream.
	ObservedBytes int64 `json:"observed_bytes"`
	// Truncated reports that Data is not the whole stream.
	Truncated bool `json:"truncated"`
	// Gap is the middle of the stream Data leaves out, as in a
	// process.output page; nil when Data is the whole stream.
	Gap *jobs.Gap `json:"gap,omitempty" jsonschema:"the middle of the stream left out: data is the bytes before it, then those after it"`
}

// Capture describes how much output was seen, kept and delivered.
type Capture struct {
	// LimitBytes is the combined stdout+stderr retention cap: max_bytes.
	LimitBytes int64 `json:"limit_bytes"`
	// ObservedBytes counts every byte read from both streams.
	ObservedBytes int64 `json:"observed_bytes"`
	// RetainedBytes counts the bytes carried in stdout.data and stderr.data
	// (before encoding).
	RetainedBytes int64 `json:"retained_bytes"`
	Truncated     bool  `json:"truncated"`
	// TransportComplete is true only when live output was requested, every
	// observed byte was delivered as a chunk, the request was not cancelled
	// and no output was left unread.
	TransportComplete bool `json:"transport_complete"`
}

// Result is process.run's result.
type Result struct {
	// ExitCode is nil when the command was ended by a signal.
	ExitCode *int `json:"exit_code"`
	// Signal names the signal that ended the command, e.g. "SIGKILL".
	Signal        string       `json:"signal,omitempty"`
	TimedOut      bool         `json:"timed_out"`
	Cancelled     bool         `json:"cancelled"`
	Stdout        StreamOutput `json:"stdout"`
	Stderr        StreamOutput `json:"stderr"`
	OutputCapture Capture      `json:"output_capture"`
	DurationMS    int64        `json:"duration_ms"`
}

// Chunk is one piece of live output: Data (at most limits.LiveChunkBytes)
// starts at byte Offset of Stream. Chunks of one stream arrive in order
// without gaps.
type Chunk struct {
	Stream string
	Offset int64
	Data   []byte
}

// Options configure Run.
type Options struct {
	// Shell runs the command (handed over by cmdpipe, never in its
	// argv); empty means jobs.DefaultShell().
	Shell string
	// BaseEnv is the environment the command starts from; Request.Env adds
	// to it.
	BaseEnv []string
	// Progress, when set, receives live output chunks, in order, from one
	// goroutine. It must honour ctx. An error means the transport failed:
	// no further chunk is sent and the command is cancelled.
	Progress func(ctx context.Context, c Chunk) error
	// Procs verifies the child's identity before each signal; nil means
	// procid.Default().
	Procs *procid.Source
	// Hide, when set, starts the shell through the hide-exec role, out of
	// sight of the agent's own directories (README); nil starts it in the
	// agent's own namespaces, where the host refuses them.
	Hide *hideexec.Hider
	// CutOff, with Hide, covers the user manager's sockets too (the
	// owner's permissions.json).
	CutOff bool
}

// errTransport marks a Progress failure.
var errTransport = errors.New("live output transport failed")

// testOnEnqueue, when set by tests, is called after each frame is queued
// with the queue's length and the total bytes read so far.
var testOnEnqueue func(queued int, read int64)

// timeout validates timeout_ms.
func timeout(ms int) (time.Duration, error) {
	if ms == 0 {
		return limits.RunTimeoutDefault, nil
	}
	d := time.Duration(ms) * time.Millisecond
	if ms < 0 || d > limits.RunTimeoutMax {
		return 0, errcode.New(errcode.InvalidArgument, "timeout_ms must be between 1 and %d", limits.RunTimeoutMax.Milliseconds())
	}
	return d, nil
}

// maxBytes validates max_bytes.
func maxBytes(n int) (int64, error) {
	if n == 0 {
		return limits.RunOutputDefaultBytes, nil
	}
	if n < 0 || n > limits.RunOutputCapBytes {
		return 0, errcode.New(errcode.InvalidArgument, "max_bytes must be between 1 and %d", limits.RunOutputCapBytes)
	}
	return int64(n), nil
}

// capture retains what the result carries of a combined budget: its first
// half as a head, the first bytes of both streams in arrival order, and of
// each stream the last bytes past its head, from which retain takes the
// other half.
type capture struct {
	mu       sync.Mutex
	budget   int64
	headRoom int64
	observed [2]int64
	head     [2][]byte
	tail     [2]tail
}

func newCapture(budget int64) *capture {
	return &capture{budget: budget, headRoom: budget / 2}
}

func (c *capture) add(i int, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.observed[i] += int64(len(b))
	n := min(int64(len(b)), c.headRoom)
	c.head[i] = append(c.head[i], b[:n]...)
	c.headRoom -= n
	if rest := b[n:]; len(rest) > 0 {
		// Either stream may take the whole other half.
		c.tail[i].write(rest, int(c.budget-c.budget/2))
	}
}

// retain returns each stream's head and the part of its tail the budget
// keeps: when both tails do not fit, each gets half of what is left, and
// a short one leaves the rest to the other.
func (c *capture) retain() (head, tail [2][]byte) {
	left := c.budget - int64(len(c.head[0])+len(c.head[1]))
	var rest [2]int64
	for i := range rest {
		rest[i] = c.observed[i] - int64(len(c.head[i]))
	}
	var keep [2]int64
	keep[0] = min(rest[0], left/2)
	keep[1] = min(rest[1], left-keep[0])
	keep[0] = min(rest[0], left-keep[1])
	for i := range head {
		t := c.tail[i].bytes()
		head[i], tail[i] = c.head[i], t[int64(len(t))-keep[i]:]
	}
	return head, tail
}

// tail keeps the last bytes written to it, in a ring of the size its
// first write names.
type tail struct {
	buf     []byte
	next    int
	written int64
}

func (t *tail) write(b []byte, size int) {
	if t.buf == nil {
		t.buf = make([]byte, size)
	}
	t.written += int64(len(b))
	if len(b) > len(t.buf) {
		b = b[len(b)-len(t.buf):]
	}
	n := copy(t.buf[t.next:], b)
	copy(t.buf, b[n:])
	t.next = (t.next + len(b)) % len(t.buf)
}

// bytes returns what the ring holds, oldest first.
func (t *tail) bytes() []byte {
	if t.written < int64(len(t.buf)) {
		return t.buf[:t.written]
	}
	return append(slices.Clone(t.buf[t.next:]), t.buf[:t.next]...)
}

func (c *capture) total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.observed[0] + c.observed[1]
}

// Run runs req and returns its result. Invalid input is an invalid_argument
// error; a command that cannot be started is an internal error. Anything
// that happens to a started command is reported in the Result.
func Run(ctx context.Context, req Request, opts Options) (*Result, error) {
	limit, err := timeout(req.TimeoutMS)
	if err != nil {
		return nil, err
	}
	cwd, env, err := jobs.Prepare(req.Command, req.Cwd, req.Env, opts.BaseEnv)
	if err != nil {
		return nil, err
	}
	budget, err := maxBytes(req.MaxBytes)
	if err != nil {
		return nil, err
	}
	c, err := start(req.Command, cwd, env, opts)
	if err != nil {
		return nil, err
	}
	defer c.release()
	r := &runner{
		ctx: ctx, progress: opts.Progress, capt: newCapture(budget),
		queue:       make(chan Chunk, limits.LiveQueueFrames),
		senderStop:  make(chan struct{}),
		transportKO: make(chan struct{}),
	}
	res, abandoned := c.supervise(ctx, r, limit)
	werr := c.cmd.Wait()
	closeAll(c.rs[:], nil)
	res.DurationMS = time.Since(c.began).Milliseconds()
	if c.cmd.ProcessState == nil {
		return nil, errcode.Wrap(errcode.Internal, werr, "could not reap the command")
	}
	res.ExitCode, res.Signal = exitstatus.Of(c.cmd.ProcessState)
	r.collect(res, abandoned)
	return res, nil
}

// child is a started command: the read ends of its output pipes, its
// process group, and what holds the group's ID until it is reaped.
type child struct {
	cmd     *exec.Cmd
	rs      [2]*os.File
	command *cmdpipe.Pipe
	life    *procgroup.Lifeline
	group   *procgroup.Group
	reaped  chan struct{}
	began   time.Time
}

// start starts the shell in its own process group, with a lifeline in
// place, and sends it command.
func start(command, cwd string, env []string, opts Options) (*child, error) {
	shell := opts.Shell
	if shell == "" {
		shell = jobs.DefaultShell()
	}
	procs := opts.Procs
	if procs == nil {
		procs = procid.Default()
	}
	var ws [2]*os.File
	c := &child{reaped: make(chan struct{})}
	var err error
	for i := range c.rs {
		if c.rs[i], ws[i], err = os.Pipe(); err != nil {
			closeAll(c.rs[:], ws[:])
			return nil, errcode.Wrap(errcode.Internal, err, "could not create output pipes")
		}
	}
	if c.command, err = cmdpipe.New(); err != nil {
		closeAll(c.rs[:], ws[:])
		return nil, errcode.Wrap(errcode.Internal, err, "could not create the command pipe")
	}
	c.cmd = exec.Command(shell)
	c.cmd.Args = cmdpipe.Argv(shell)
	c.cmd.ExtraFiles = []*os.File{c.command.Reader()}
	c.cmd.Dir, c.cmd.Env = cwd, env
	c.cmd.Stdin = nil // /dev/null
	c.cmd.Stdout, c.cmd.Stderr = ws[0], ws[1]
	// A foreground command must not outlive the server that runs it, even
	// one killed outright: the kernel kills the shell when the thread that
	// started it ends, and the lifeline kills the rest of its group. The
	// thread is held until the child is reaped, so only the process's end
	// ends it (go.dev/issue/27505).
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if opts.Hide != nil {
		// The role execs the shell: the PID, group and start time the
		// lifeline and the stop rely on are the shell's.
		opts.Hide.Wrap(c.cmd, "", opts.CutOff)
	}
	c.began = time.Now()
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		started <- c.cmd.Start()
		<-c.reaped
	}()
	if err := <-started; err != nil {
		closeAll(c.rs[:], ws[:])
		close(c.reaped)
		c.command.Close()
		return nil, errcode.Wrap(errcode.Internal, err, "could not start the command")
	}
	closeAll(nil, ws[:])
	pid := c.cmd.Process.Pid
	// The shell waits for its command, so the lifeline is in place before
	// anything of the command runs.
	if c.life, err = procgroup.StartLifeline(shell, pid); err != nil {
		c.cmd.Process.Kill()
		c.cmd.Wait()
		closeAll(c.rs[:], nil)
		close(c.reaped)
		c.command.Close()
		return nil, errcode.Wrap(errcode.Internal, err, "could not start the command")
	}
	c.command.Send(command)
	// The child stays unreaped until the end (exits are observed with
	// WNOWAIT), so its PID — and with it the process group ID — cannot be
	// reused while we may still signal the group. Without an identity the
	// group is nil and is signalled nothing.
	c.group, _ = procgroup.Of(procs, pid)
	return c, nil
}

// release lets the lifeline go, then the thread that started the child,
// then the command pipe; the child has been reaped.
func (c *child) release() {
	c.life.Release()
	close(c.reaped)
	c.command.Close()
}

// supervise pumps the output through r until the shell has exited and
// its pipes are drained, stopping the group on cancellation, on a broken
// transport or at the time limit, and abandoning pipes a process that
// left the group still holds. It returns with the shell exited, unreaped.
func (c *child) supervise(ctx context.Context, r *runner, limit time.Duration) (res *Result, abandoned bool) {
	var readers sync.WaitGroup
	for i, f := range c.rs {
		readers.Add(1)
		go func() {
			defer readers.Done()
			r.read(i, f)
		}()
	}
	readersDone := make(chan struct{})
	go func() { readers.Wait(); close(r.queue); close(readersDone) }()
	senderDone := make(chan struct{})
	go func() { defer close(senderDone); r.send() }()
	exited := make(chan struct{})
	go func() { defer close(exited); procgroup.AwaitExit(c.cmd.Process.Pid) }()

	res = &Result{}
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	var stopper *procgroup.Stopper
	var killed <-chan struct{}
	var abandon <-chan time.Time
	stop := func() {
		if stopper == nil {
			stopper = c.group.Stop(limits.StopEscalation)
			killed = stopper.Killed()
		}
	}
	ctxDone, transportKO := ctx.Done(), (<-chan struct{})(r.transportKO)
	exitedC, readersC := (<-chan struct{})(exited), (<-chan struct{})(readersDone)
	leaderGone, pipesDone := false, false
	for !(leaderGone && pipesDone) {
		select {
		case <-ctxDone:
			ctxDone = nil
			res.Cancelled = true
			stop()
		case <-transportKO:
			transportKO = nil
			res.Cancelled = true
			stop()
		case <-deadline.C:
			// A run already being stopped for a cancellation is not
			// reported as timed out.
			res.TimedOut = stopper == nil
			stop()
		case <-killed:
			killed = nil
			// Pipes held open by a process that left the group must not
			// hold the request forever.
			abandon = time.After(limits.StopEscalation)
		case <-abandon:
			abandon = nil
			abandoned = true
			closeAll(c.rs[:], nil)
		case <-exitedC:
			exitedC, leaderGone = nil, true
		case <-readersC:
			readersC, pipesDone = nil, true
		}
	}
	if stopper != nil {
		// The leader and the pipes are done but other group members may
		// ignore SIGTERM: finish what was started while the group ID is
		// still pinned by the unreaped leader.
		stopper.Kill()
	}
	<-senderDone
	return res, abandoned
}

// collect puts the retained output and its accounting into res.
func (r *runner) collect(res *Result, abandoned bool) {
	c := r.capt
	head, tail := c.retain()
	var retained int64
	res.Stdout, retained = streamOutput(head[0], tail[0], c.observed[0], retained)
	res.Stderr, retained = streamOutput(head[1], tail[1], c.observed[1], retained)
	observed := c.observed[0] + c.observed[1]
	res.OutputCapture = Capture{
		LimitBytes: c.budget, ObservedBytes: observed, RetainedBytes: retained,
		Truncated: observed > retained,
		TransportComplete: r.progress != nil && !res.Cancelled && !abandoned && !r.failed.Load() &&
			r.delivered.Load() == observed,
	}
}

// runner carries the live-output pipeline of one Run.
type runner struct {
	ctx      context.Context
	progress func(context.Context, Chunk) error
	capt     *capture
	queue    chan Chunk
	// senderStop is closed when the sender stops calling Progress, so
	// readers never block on a queue nobody delivers.
	senderStop  chan struct{}
	transportKO chan struct{}
	failed      atomic.Bool
	delivered   atomic.Int64
}

// read reads one stream to its end, retaining and queueing what it reads.
// A read that ends inside a UTF-8 character holds those bytes (at most
// three) back for the next chunk, so text chunks stay text.
func (r *runner) read(i int, f *os.File) {
	name := [2]string{Stdout, Stderr}[i]
	buf := make([]byte, limits.LiveChunkBytes+utf8.UTFMax)
	var off int64
	held := 0
	for {
		n, err := f.Read(buf[held : held+limits.LiveChunkBytes])
		p := buf[:held+n]
		held = 0
		if err == nil {
			held = textenc.PartialTail(p)
		}
		for emit := p[:len(p)-held]; len(emit) > 0; {
			k := min(len(emit), limits.LiveChunkBytes)
			r.capt.add(i, emit[:k])
			if r.progress != nil {
				r.enqueue(Chunk{Stream: name, Offset: off, Data: append([]byte(nil), emit[:k]...)})
			}
			off += int64(k)
			emit = emit[k:]
		}
		copy(buf, p[len(p)-held:])
		if err != nil {
			// EOF, or the pipe closed by an abandon: either way, done.
			return
		}
	}
}

// enqueue hands a frame to the sender, blocking while the queue is full
// (backpressure), unless the sender has stopped or the request is gone.
func (r *runner) enqueue(c Chunk) {
	select {
	case r.queue <- c:
		if testOnEnqueue != nil {
			testOnEnqueue(len(r.queue), r.capt.total())
		}
	case <-r.senderStop:
	case <-r.ctx.Done():
	}
}

// send delivers queued frames in order until the queue closes. After a
// failure or cancellation it stops calling Progress and discards the rest.
func (r *runner) send() {
	stopped := false
	halt := func() {
		if !stopped {
			stopped = true
			close(r.senderStop)
		}
	}
	defer halt()
	for c := range r.queue {
		if stopped {
			continue
		}
		if r.ctx.Err() != nil {
			halt()
			continue
		}
		if err := r.progress(r.ctx, c); err != nil {
			r.failed.Store(true)
			close(r.transportKO)
			halt()
			continue
		}
		r.delivered.Add(int64(len(c.Data)))
	}
}

// streamOutput encodes a stream's retained head and tail and adds their
// count to retained. Where the middle is cut, the head loses a character
// the cut splits and the tail the rest of one, so valid text stays text.
func streamOutput(head, tail []byte, observed, retained int64) (StreamOutput, int64) {
	so := StreamOutput{ObservedBytes: observed}
	if int64(len(head)+len(tail)) < observed {
		head = head[:len(head)-textenc.PartialTail(head)]
		for i := 0; i < utf8.UTFMax-1 && len(tail) > 0 && !utf8.RuneStart(tail[0]); i++ {
			tail = tail[1:]
		}
		so.Truncated = true
		so.Gap = &jobs.Gap{From: int64(len(head)), To: observed - int64(len(tail))}
	}
	so.Data, so.Encoding = textenc.Encode(append(slices.Clone(head), tail...))
	return so, retained + int64(len(head)+len(tail))
}

// EncodeChunk returns a chunk's data for a text-only carrier (an MCP
// progress message): the text itself when the chunk is valid UTF-8, else
// base64, with the encoding name.
func EncodeChunk(c Chunk) (data, encoding string) { return textenc.Encode(c.Data) }

func closeAll(a, b []*os.File) {
	for _, f := range append(append([]*os.File(nil), a...), b...) {
		if f != nil {
			f.Close()
		}
	}
}
