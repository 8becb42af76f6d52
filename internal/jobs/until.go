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
	"unicode/utf8"

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

// match is where a finder found its text: the stream, the offset the
// text begins at, and the line it is in (see matchLine).
type match struct {
	stream string
	at     int64
	line   string
}

// look reads what dir's streams hold past where the finder stopped and
// returns the first match, if any.
func (f *finder) look(dir *jobmeta.Dir) (match, bool, error) {
	for _, s := range f.streams {
		m, found, err := f.scan(dir, s)
		if err != nil || found {
			return m, found, err
		}
	}
	return match{}, false, nil
}

func (f *finder) scan(dir *jobmeta.Dir, s *streamScan) (match, bool, error) {
	fh, err := dir.Open(s.file)
	if errors.Is(err, os.ErrNotExist) {
		return match{}, false, nil
	}
	if err != nil {
		return match{}, false, errcode.Wrap(errcode.Internal, err, "the %s capture was refused (%v) and not read", s.name, err)
	}
	defer fh.Close()
	for range scanReads {
		p, _, err := capture.ReadPage(fh, s.next, scanChunk)
		if errors.Is(err, capture.ErrOffsetBeyondEnd) {
			return match{}, false, errcode.New(errcode.InvalidArgument, "until.output.from_offset.%s is past the end of the stream", s.name)
		}
		if err != nil {
			return match{}, false, errcode.Wrap(errcode.Internal, err, "the %s capture cannot be read", s.name)
		}
		if len(p.Data) == 0 {
			return match{}, false, nil
		}
		if p.Offset != s.next {
			// A gap: the capture dropped what lay between.
			s.carry = nil
		}
		buf := append(s.carry, p.Data...)
		start := p.Offset - int64(len(s.carry))
		if i := bytes.Index(buf, f.text); i >= 0 {
			at := start + int64(i)
			return match{stream: s.name, at: at, line: matchLine(fh, at, f.text)}, true, nil
		}
		keep := min(len(f.text)-1, len(buf))
		s.carry = append([]byte(nil), buf[len(buf)-keep:]...)
		s.next = p.NextOffset
	}
	return match{}, false, nil
}

// matchLine is the line of the open capture fh that text, found at offset
// at, lies in (see lineAround), read around it in one page of at most
// 2*limits.UntilLineMaxBytes+2 bytes more than the text; "" when that page
// no longer holds the text (the ring lapped it) or cannot be read.
func matchLine(fh *os.File, at int64, text []byte) string {
	// A byte more than the line can show on each side tells whether the
	// line goes on past what it shows.
	reach := int64(limits.UntilLineMaxBytes) + 1
	lo, hi := max(at-reach, 0), at+int64(len(text))+reach
	p, meta, err := capture.ReadPage(fh, lo, int(hi-lo))
	if err != nil || p.Offset > at || p.NextOffset < at+int64(len(text)) {
		return ""
	}
	i := int(at - p.Offset)
	j := i + len(text)
	if !bytes.Equal(p.Data[i:j], text) {
		return ""
	}
	// The page starts mid-line unless it starts the stream; it stops
	// mid-line where it stops short of what was written (at the window's
	// end, or the gap after the capture's head).
	return lineAround(p.Data, i, j, p.Offset > 0, p.NextOffset < meta.ObservedBytes)
}

// lineAround is the line of data that data[i:j] lies in, a line ending at
// \n or \r: at most limits.UntilLineMaxBytes of it, the match whole where
// it fits (else its start), and around it as much of the line before and
// after as fits, the side with less to show giving its room to the other.
// Where the line was cut, or goes on past data (openStart, openEnd: data
// may not hold its ends), "..." marks it. Bytes that are not UTF-8 are
// shown as U+FFFD.
func lineAround(data []byte, i, j int, openStart, openEnd bool) string {
	ls := bytes.LastIndexAny(data[:i], "\r\n") + 1
	if ls > 0 {
		openStart = false
	}
	le := len(data)
	if k := bytes.IndexAny(data[j:], "\r\n"); k >= 0 {
		le, openEnd = j+k, false
	}
	from, to := ls, le
	if bound := limits.UntilLineMaxBytes; to-from > bound {
		room := bound - (j - i)
		if room <= 0 {
			from, to = i, i+bound
		} else {
			before := min(i-ls, max(room/2, room-(le-j)))
			from, to = i-before, j+min(le-j, room-before)
		}
		// Cut on character boundaries, inside the bound.
		for from > ls && from < i && !utf8.RuneStart(data[from]) {
			from++
		}
		for to < le && to > i && !utf8.RuneStart(data[to]) {
			to--
		}
	}
	line := strings.ToValidUTF8(string(data[from:to]), "\uFFFD")
	if from > ls || openStart {
		line = "..." + line
	}
	if to < le || openEnd {
		line += "..."
	}
	return line
}

// lookFor runs f over job id's streams.
func (s *Service) lookFor(id string, f *finder) (match, bool, error) {
	dir, err := s.store.OpenDir(id)
	if errors.Is(err, os.ErrNotExist) {
		return match{}, false, jobstore.ErrNotFound()
	}
	if err != nil {
		return match{}, false, errcode.Wrap(errcode.Internal, err, "the job's directory cannot be opened")
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

// check reports the condition that holds, if any, with the output's match:
// output at every call, port and path at most every
// limits.UntilProbeInterval.
func (c *conditions) check(ctx context.Context, s *Service) (string, match, error) {
	if c.output != nil {
		m, found, err := s.lookFor(c.id, c.output)
		if err != nil || found {
			return MetOutput, m, err
		}
	}
	if c.port == 0 && c.path == "" || time.Since(c.lastProbe) < limits.UntilProbeInterval {
		return "", match{}, nil
	}
	c.lastProbe = time.Now()
	if c.port != 0 {
		ok, err := c.ports.TCP(c.port, func() ([]int, error) { return c.procs.JobPIDs(ctx, c.id) })
		if err != nil && ctx.Err() == nil {
			return "", match{}, errcode.Wrap(errcode.Internal, err, "the host's socket tables cannot be read")
		}
		if ok {
			return MetPort, match{}, nil
		}
	}
	if c.path != "" {
		ok, err := c.exists(c.path)
		if err != nil {
			return "", match{}, err
		}
		if ok {
			return MetPath, match{}, nil
		}
	}
	return "", match{}, nil
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
