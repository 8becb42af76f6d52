package jobs

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/commandcore/commandcore/internal/capture"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobstore"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/principal"
	"github.com/commandcore/commandcore/internal/textenc"
)

// OutputRequest is process.output's input.
type OutputRequest struct {
	ProcessID    string `json:"process_id" jsonschema:"the job's process_id"`
	StdoutOffset int64  `json:"stdout_offset,omitempty" jsonschema:"absolute byte offset in stdout to read from"`
	StderrOffset int64  `json:"stderr_offset,omitempty" jsonschema:"absolute byte offset in stderr to read from"`
	MaxBytes     int    `json:"max_bytes,omitempty" jsonschema:"bytes per stream, default 32768, at most 1048576"`
	WaitMS       int    `json:"wait_ms,omitempty" jsonschema:"0-30000: when a live job has nothing past both offsets, wait up to this long for output or an end"`
	MinBytes     int    `json:"min_bytes,omitempty" jsonschema:"1-1048576: with wait_ms, return once this many new bytes stand (both streams) or the job ends"`
}

// Gap is a discarded range of a stream: [From, To).
type Gap struct {
	From int64 `json:"from" jsonschema:"first discarded byte"`
	To   int64 `json:"to" jsonschema:"first byte kept after the gap"`
}

// StreamPage is one stream's part of an output page.
type StreamPage struct {
	Offset     int64  `json:"offset" jsonschema:"absolute offset of the first byte of data"`
	Data       string `json:"data" jsonschema:"the bytes, as UTF-8 text or base64 (see encoding)"`
	Encoding   string `json:"encoding" jsonschema:"utf-8 or base64"`
	NextOffset int64  `json:"next_offset" jsonschema:"the offset to ask for next"`
	Gap        *Gap   `json:"gap,omitempty" jsonschema:"a range the capture discarded (head and tail are kept), when the page skips one"`
	EOF        bool   `json:"eof" jsonschema:"true when the stream can grow no more and this page reaches its end"`
}

// Output is process.output's result.
type Output struct {
	ProcessID string          `json:"process_id" jsonschema:"the job's ID"`
	Stdout    StreamPage      `json:"stdout" jsonschema:"the stdout page"`
	Stderr    StreamPage      `json:"stderr" jsonschema:"the stderr page"`
	Capture   jobmeta.Capture `json:"capture" jsonschema:"each stream's capture counters"`
	State     jobmeta.State   `json:"state" jsonschema:"the job's state"`
	Terminal  bool            `json:"terminal" jsonschema:"true once the job has ended"`
}

// Output returns a page of both streams. When a live job has fewer than
// MinBytes (default 1) new bytes past the offsets it waits up to WaitMS
// for more, or an end, so that following a chatty job costs a call per
// batch, not per write. The page that reaches the end of both streams of
// a terminal job marks the job read.
func (s *Service) Output(ctx context.Context, who principal.Principal, req OutputRequest) (*Output, error) {
	wait, err := waitDuration(req.WaitMS)
	if err != nil {
		return nil, err
	}
	max := req.MaxBytes
	if max == 0 {
		max = limits.OutputPageDefault
	}
	if max < 0 || max > limits.OutputPageMax {
		return nil, errcode.New(errcode.InvalidArgument, "max_bytes must be between 1 and %d", limits.OutputPageMax)
	}
	if req.StdoutOffset < 0 || req.StderrOffset < 0 {
		return nil, errcode.New(errcode.InvalidArgument, "offsets must not be negative")
	}
	need := int64(1)
	switch {
	case req.MinBytes < 0 || req.MinBytes > limits.OutputPageMax:
		return nil, errcode.New(errcode.InvalidArgument, "min_bytes must be between 1 and %d", limits.OutputPageMax)
	case req.MinBytes > 0:
		// One page holds at most max bytes of a stream: waiting for more
		// than a page would wait for what the answer cannot carry.
		need = int64(min(req.MinBytes, max))
	}
	deadline := time.Now().Add(wait)
	for {
		out, err := s.page(who, req, max)
		if err != nil {
			return nil, err
		}
		// A gap's skipped bytes count as new: the reader moves past them.
		fresh := out.Stdout.NextOffset - req.StdoutOffset + out.Stderr.NextOffset - req.StderrOffset
		if out.Terminal || fresh >= need || !time.Now().Before(deadline) {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return out, nil
		case <-time.After(pollInterval):
		}
	}
}

func (s *Service) page(who principal.Principal, req OutputRequest, max int) (*Output, error) {
	// State first: the supervisor seals capture before publishing its
	// terminal record, so bytes read after seeing a terminal state are final.
	rec, err := s.get(who, req.ProcessID)
	if err != nil {
		return nil, err
	}
	if rec.State == jobmeta.Corrupt {
		return nil, errcode.New(errcode.Internal, "the job's metadata is corrupt; the machine's owner can inspect it with `commandcore jobs`")
	}
	dir, err := s.store.OpenDir(req.ProcessID)
	switch {
	case errors.Is(err, os.ErrNotExist):
		// Forgotten since its record was read.
		return nil, jobstore.ErrNotFound()
	case err != nil:
		return nil, errcode.Wrap(errcode.Internal, err, "the job's directory cannot be opened; the machine's owner can inspect it with `commandcore jobs`")
	}
	defer dir.Close()
	out := &Output{ProcessID: req.ProcessID, State: rec.State, Terminal: rec.Terminal}
	if rec.Capture != nil {
		out.Capture = *rec.Capture
	}
	out.Stdout, err = streamPage(dir, jobmeta.StdoutFile, req.StdoutOffset, max, rec.Terminal, "stdout_offset")
	if err != nil {
		return nil, err
	}
	out.Stderr, err = streamPage(dir, jobmeta.StderrFile, req.StderrOffset, max, rec.Terminal, "stderr_offset")
	if err != nil {
		return nil, err
	}
	if rec.Terminal && out.Stdout.EOF && out.Stderr.EOF && !rec.Read {
		if err := s.store.MarkRead(req.ProcessID); err != nil {
			return nil, errcode.Wrap(errcode.Internal, err, "could not record that the final page was read")
		}
	}
	return out, nil
}

// streamPage reads one stream, the capture file name of dir. For a
// terminal job the stream can grow no more, so reaching its end is EOF
// whether or not the capture was sealed.
func streamPage(dir *jobmeta.Dir, name string, offset int64, max int, terminal bool, field string) (StreamPage, error) {
	f, err := dir.Open(name)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		// Something in the capture's place (a link the job planted, say):
		// never followed. The refusal's words name no path (ownerfile).
		return StreamPage{}, errcode.Wrap(errcode.Internal, err,
			"the %s capture was refused (%v) and not read; the machine's owner can inspect the job with `commandcore jobs`", field[:6], err)
	}
	var p capture.Page
	var m capture.Meta
	if err == nil {
		defer f.Close()
		p, m, err = capture.ReadPage(f, offset, max)
	}
	switch {
	case errors.Is(err, capture.ErrOffsetBeyondEnd):
		return StreamPage{}, errcode.New(errcode.InvalidArgument, "%s is past the end of the stream (%d bytes)", field, m.ObservedBytes)
	case errors.Is(err, capture.ErrInvalid):
		return StreamPage{}, errcode.New(errcode.InvalidArgument, "%s or max_bytes is out of range", field)
	case err != nil:
		// No capture file: the supervisor never created it (a failed launch).
		if terminal && offset == 0 {
			return StreamPage{Encoding: textenc.UTF8, EOF: true}, nil
		}
		if offset == 0 {
			return StreamPage{Encoding: textenc.UTF8}, nil
		}
		return StreamPage{}, errcode.Wrap(errcode.Internal, err, "the %s capture cannot be read", field[:6])
	}
	if len(p.Data) == max {
		// A full page ends where the page size fell; rather than split a
		// character (and turn the whole page into base64), end before it.
		cut := len(p.Data) - textenc.PartialTail(p.Data)
		if cut == 0 {
			// A page too small for one character: send it as it is.
			cut = len(p.Data)
		}
		p.NextOffset -= int64(len(p.Data) - cut)
		p.Data = p.Data[:cut]
	}
	sp := StreamPage{Offset: p.Offset, NextOffset: p.NextOffset, EOF: p.EOF || (terminal && p.NextOffset >= m.ObservedBytes)}
	if p.Gap != nil {
		sp.Gap = &Gap{From: p.Gap.From, To: p.Gap.To}
	}
	if !terminal && offset > m.ObservedBytes {
		sp.EOF = false
	}
	sp.Data, sp.Encoding = textenc.Encode(p.Data)
	return sp, nil
}
