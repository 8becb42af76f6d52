package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/commandcore/commandcore/internal/capture"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobstore"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/listening"
	"github.com/commandcore/commandcore/internal/proclist"
)

// Streams an until.output condition looks in.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	StreamAny    = "any"
)

// What ended a wait (WaitResult.Met).
const (
	MetEnded   = "ended"
	MetOutput  = "output"
	MetPort    = "port"
	MetPath    = "path"
	MetTimeout = "timeout"
)

// Until is what may end a wait on one job before the job ends.
type Until struct {
	Output *OutputUntil `json:"output,omitempty" jsonschema:"end the wait when this literal text is output"`
	Port   *int         `json:"port,omitempty" jsonschema:"1-65535: end the wait when a process of the job listens on this TCP port (no connection is made)"`
	Path   string       `json:"path,omitempty" jsonschema:"an absolute path: end the wait when it exists (needs files.list)"`
}

// OutputUntil is an until.output condition.
type OutputUntil struct {
	Text       string         `json:"text" jsonschema:"1-1024 bytes, found across writes"`
	Stream     string         `json:"stream,omitempty" jsonschema:"stdout, stderr or any (default)"`
	FromOffset *StreamOffsets `json:"from_offset,omitempty" jsonschema:"where to start looking in each stream (default 0), e.g. a next_offset from process.output"`
}

// StreamOffsets is an offset in each stream.
type StreamOffsets struct {
	Stdout int64 `json:"stdout,omitempty" jsonschema:"an offset in stdout"`
	Stderr int64 `json:"stderr,omitempty" jsonschema:"an offset in stderr"`
}

// PathProbe reports whether path exists; a refusal to look (a path the
// tools may not reach) is its error.
type PathProbe func(path string) (bool, error)

// lstatProbe is the PathProbe of the local CLI, which may look anywhere.
func lstatProbe(path string) (bool, error) {
	_, err := os.Lstat(path)
	return err == nil, nil
}

// checkUntilText checks the text an until condition looks for; field
// names it in the error.
func checkUntilText(text, field string) error {
	if len(text) == 0 || len(text) > limits.UntilTextMaxBytes {
		return errcode.New(errcode.InvalidArgument, "%s must be 1-%d bytes", field, limits.UntilTextMaxBytes)
	}
	return nil
}

// validate checks u for a wait on ids.
func (u *Until) validate(ids []string) error {
	if len(ids) != 1 {
		return errcode.New(errcode.InvalidArgument, "until needs exactly one job in process_ids")
	}
	if u.Output == nil && u.Port == nil && u.Path == "" {
		return errcode.New(errcode.InvalidArgument, "until must name output, port or path")
	}
	if o := u.Output; o != nil {
		if err := checkUntilText(o.Text, "until.output.text"); err != nil {
			return err
		}
		switch o.Stream {
		case "", StreamAny, StreamStdout, StreamStderr:
		default:
			return errcode.New(errcode.InvalidArgument, "until.output.stream must be %s, %s or %s", StreamStdout, StreamStderr, StreamAny)
		}
		if f := o.FromOffset; f != nil && (f.Stdout < 0 || f.Stderr < 0) {
			return errcode.New(errcode.InvalidArgument, "until.output.from_offset must not be negative")
		}
	}
	if u.Port != nil && (*u.Port < 1 || *u.Port > 65535) {
		return errcode.New(errcode.InvalidArgument, "until.port must be between 1 and 65535")
	}
	if u.Path != "" && (!filepath.IsAbs(u.Path) || strings.ContainsRune(u.Path, 0)) {
		return errcode.New(errcode.InvalidArgument, "until.path must be an absolute path")
	}
	return nil
}

// scanChunk is how much of a stream one read takes; scanReads bounds the
// reads of one look, so a job writing flat out cannot keep a look going.
const (
	scanChunk = 64 << 10
	scanReads = 64
)

// finder looks for a literal text in a job's streams, each read once: it
// remembers where it stopped and the bytes a match could begin in.
type finder struct {
	text    []byte
	streams []*streamScan
}

type streamScan struct {
	name, file string
	next       int64
	// carry is the end of what was read, at offset next-len(carry): the
	// start of a match the next write completes.
	carry []byte
}

// newFinder looks for text in stream (StreamAny: both) from the offsets.
func newFinder(text, stream string, from StreamOffsets) *finder {
	f := &finder{text: []byte(text)}
	if stream != StreamStderr {
		f.streams = append(f.streams, &streamScan{name: StreamStdout, file: jobmeta.StdoutFile, next: from.Stdout})
	}
	if stream != StreamStdout {
		f.streams = append(f.streams, &streamScan{name: StreamStderr, file: jobmeta.StderrFile, next: from.Stderr})
	}
	return f
}

// look reads what dir's streams hold past where the finder stopped and
// returns the stream and offset of the first match, if any.
func (f *finder) look(dir *jobmeta.Dir) (string, int64, bool, error) {
	for _, s := range f.streams {
		at, found, err := f.scan(dir, s)
		if err != nil || found {
			return s.name, at, found, err
		}
	}
	return "", 0, false, nil
}

func (f *finder) scan(dir *jobmeta.Dir, s *streamScan) (int64, bool, error) {
	fh, err := dir.Open(s.file)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, errcode.Wrap(errcode.Internal, err, "the %s capture was refused (%v) and not read", s.name, err)
	}
	defer fh.Close()
	for range scanReads {
		p, _, err := capture.ReadPage(fh, s.next, scanChunk)
		if errors.Is(err, capture.ErrOffsetBeyondEnd) {
			return 0, false, errcode.New(errcode.InvalidArgument, "until.output.from_offset.%s is past the end of the stream", s.name)
		}
		if err != nil {
			return 0, false, errcode.Wrap(errcode.Internal, err, "the %s capture cannot be read", s.name)
		}
		if len(p.Data) == 0 {
			return 0, false, nil
		}
		if p.Offset != s.next {
			// A gap: the capture dropped what lay between.
			s.carry = nil
		}
		buf := append(s.carry, p.Data...)
		start := p.Offset - int64(len(s.carry))
		if i := bytes.Index(buf, f.text); i >= 0 {
			return start + int64(i), true, nil
		}
		keep := min(len(f.text)-1, len(buf))
		s.carry = append([]byte(nil), buf[len(buf)-keep:]...)
		s.next = p.NextOffset
	}
	return 0, false, nil
}

// lookFor runs f over job id's streams.
func (s *Service) lookFor(id string, f *finder) (string, int64, bool, error) {
	dir, err := s.store.OpenDir(id)
	if errors.Is(err, os.ErrNotExist) {
		return "", 0, false, jobstore.ErrNotFound()
	}
	if err != nil {
		return "", 0, false, errcode.Wrap(errcode.Internal, err, "the job's directory cannot be opened")
	}
	defer dir.Close()
	return f.look(dir)
}

// conditions is a wait's until, ready to check.
type conditions struct {
	id        string
	output    *finder
	port      int
	path      string
	exists    PathProbe
	ports     *listening.Prober
	procs     *proclist.Lister
	lastProbe time.Time
}

// newConditions prepares u for a wait on job id of s; nil u is no
// condition.
func (s *Service) newConditions(u *Until, id string, exists PathProbe) (*conditions, error) {
	if u == nil {
		return nil, nil
	}
	c := &conditions{id: id, path: u.Path, exists: exists}
	if c.exists == nil {
		c.exists = lstatProbe
	}
	if o := u.Output; o != nil {
		var from StreamOffsets
		if o.FromOffset != nil {
			from = *o.FromOffset
		}
		c.output = newFinder(o.Text, o.Stream, from)
	}
	if u.Port != nil {
		c.port = *u.Port
		p, err := listening.New("/proc")
		if err != nil {
			return nil, errcode.Wrap(errcode.Internal, err, "the host's socket tables cannot be read")
		}
		// The job's processes are the ones process.list calls its own.
		l, err := proclist.New("/proc", proclist.Agent{DeviceID: s.DeviceID(), JobsDir: s.JobsDir()})
		if err != nil {
			return nil, errcode.Wrap(errcode.Internal, err, "the process table cannot be read")
		}
		c.ports, c.procs = p, l
	}
	return c, nil
}

// check reports the condition that holds, if any: output at every call,
// port and path at most every limits.UntilProbeInterval.
func (c *conditions) check(ctx context.Context, s *Service) (met, stream string, at int64, err error) {
	if c.output != nil {
		stream, at, found, err := s.lookFor(c.id, c.output)
		if err != nil || found {
			return MetOutput, stream, at, err
		}
	}
	if c.port == 0 && c.path == "" || time.Since(c.lastProbe) < limits.UntilProbeInterval {
		return "", "", 0, nil
	}
	c.lastProbe = time.Now()
	if c.port != 0 {
		ok, err := c.ports.TCP(c.port, func() ([]int, error) { return c.procs.JobPIDs(ctx, c.id) })
		if err != nil && ctx.Err() == nil {
			return "", "", 0, errcode.Wrap(errcode.Internal, err, "the host's socket tables cannot be read")
		}
		if ok {
			return MetPort, "", 0, nil
		}
	}
	if c.path != "" {
		ok, err := c.exists(c.path)
		if err != nil {
			return "", "", 0, err
		}
		if ok {
			return MetPath, "", 0, nil
		}
	}
	return "", "", 0, nil
}

// UnmarshalJSON takes until.output as the text alone ("ready"), as the
// tool's description offers it, or as the object {text, stream,
// from_offset}; anything else is a type error naming what it wants.
func (o *OutputUntil) UnmarshalJSON(data []byte) error {
	var text string
	if json.Unmarshal(data, &text) == nil {
		*o = OutputUntil{Text: text}
		return nil
	}
	type object OutputUntil
	if len(data) > 0 && data[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		var v object
		if err := dec.Decode(&v); err != nil {
			return err
		}
		*o = OutputUntil(v)
		return nil
	}
	return &json.UnmarshalTypeError{Value: "until.output", Type: reflect.TypeFor[OutputUntil]()}
}

// JSONType names what until.output takes, for a type error's message.
func (OutputUntil) JSONType() string { return "a string or an object" }
