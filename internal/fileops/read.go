package fileops

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"time"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/owndirs"
	"github.com/commandcore/commandcore/internal/textenc"
)

// ReadRequest is the input of files.read: by lines (start_line,
// line_count) or by bytes (offset); max_bytes bounds data either way.
type ReadRequest struct {
	Path      string `json:"path" jsonschema:"absolute path of the file"`
	StartLine int    `json:"start_line,omitempty" jsonschema:"read by lines, from this line (1-based; default 1 when line_count is given)"`
	LineCount int    `json:"line_count,omitempty" jsonschema:"read by lines, at most this many (default: as many as max_bytes holds)"`
	Offset    int64  `json:"offset,omitempty" jsonschema:"read by bytes, from this byte offset (default 0)"`
	MaxBytes  int    `json:"max_bytes,omitempty" jsonschema:"at most this many bytes of data, default 65536, at most 1048576; by lines, whole lines that fit"`
}

// ReadResult is the output of files.read.
type ReadResult struct {
	// Data is the text read, or its base64 when it is not UTF-8.
	Data     string `json:"data"`
	Encoding string `json:"encoding"`
	// Size and SHA256 are of the whole file, as this call read it. A file
	// larger than FileHashMaxBytes is not hashed (only its window is read):
	// SHA256 is then null and SHA256Skipped says why.
	Size          int64     `json:"size"`
	SHA256        *string   `json:"sha256"`
	SHA256Skipped string    `json:"sha256_skipped,omitempty"`
	MTime         time.Time `json:"mtime"`
	// Offset is where Data starts; NextOffset where it ends.
	Offset     int64 `json:"offset"`
	NextOffset int64 `json:"next_offset"`
	// NextLine is the line after the last one in Data (by lines only).
	NextLine int `json:"next_line,omitempty"`
	// LineTruncated: by lines, the first line alone is longer than
	// max_bytes; Data is its beginning, and NextOffset continues it by bytes.
	LineTruncated bool `json:"line_truncated,omitempty"`
	// EOF: Data reaches the end of the file.
	EOF bool `json:"eof"`
}

func (r *ReadRequest) byLines() bool { return r.StartLine > 0 || r.LineCount > 0 }

// Validate checks the request without touching the file system.
func (r *ReadRequest) Validate() error {
	if err := checkPath(r.Path); err != nil {
		return err
	}
	switch {
	case r.StartLine < 0:
		return invalid("start_line must be at least 1")
	case r.LineCount < 0:
		return invalid("line_count must be at least 1")
	case r.Offset < 0:
		return invalid("offset must not be negative")
	case r.byLines() && r.Offset > 0:
		return invalid("give offset (by bytes) or start_line and line_count (by lines), not both")
	case r.MaxBytes < 0 || r.MaxBytes > limits.FileReadMax:
		return invalid("max_bytes must be between 1 and %d", limits.FileReadMax)
	}
	return nil
}

// Read reads a validated request's window of a regular file and hashes
// the whole file in the same pass, when it is at most FileHashMaxBytes.
func Read(ctx context.Context, own *owndirs.Set, req ReadRequest) (*ReadResult, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	t, err := openTarget(own, req.Path, false)
	if err != nil {
		return nil, err
	}
	defer t.close()
	f, st, err := t.openExisting(unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	from := int64(0)
	if st.Size > limits.FileHashMaxBytes && !req.byLines() {
		// Not hashed: only the window is read.
		if from, err = f.Seek(req.Offset, io.SeekStart); err != nil {
			return nil, fsError(err, "read")
		}
	}
	res, err := readWindow(ctxReader{ctx, f}, req, st.Size, from, limits.FileHashMaxBytes)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fsError(err, "read")
	}
	res.MTime = mtime(st)
	return res, nil
}

// ctxReader ends a long read (a huge file's hash) when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// readChunk is how much one read takes from the file.
const readChunk = 256 << 10

// errLineTooFar refuses a start line that a file too large to hash does
// not reach within the bytes a call may scan for it.
var errLineTooFar = invalid("start_line does not begin within the first %d bytes of a file larger than that; read it by offset", limits.FileHashMaxBytes)

// hashSkipped says why a result's sha256 is null.
var hashSkipped = fmt.Sprintf("the file is larger than %d bytes, the most a call hashes", limits.FileHashMaxBytes)

// readWindow reads r, whose file fstat found size bytes long, from the
// position from on, keeping the window the request asks for. A file of at
// most hashMax bytes is read to its end and hashed; a larger one (or one
// that grows past it while read) only until the window is complete, and by
// lines only while the start line may begin within hashMax bytes. The
// result lacks only MTime.
func readWindow(r io.Reader, req ReadRequest, size, from, hashMax int64) (*ReadResult, error) {
	maxBytes := req.MaxBytes
	if maxBytes == 0 {
		maxBytes = limits.FileReadDefault
	}
	w := window{lines: req.byLines(), start: req.Offset, line: 1, maxBytes: maxBytes, lineCount: req.LineCount}
	if w.lines {
		w.startLine = max(req.StartLine, 1)
		w.start = -1
		if w.startLine == 1 {
			w.start = 0
		}
	}
	h := sha256.New()
	hashing := size <= hashMax
	buf := make([]byte, readChunk)
	pos := from
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if hashing = hashing && pos+int64(n) <= hashMax; hashing {
				h.Write(buf[:n])
			}
			w.feed(buf[:n], pos)
			pos += int64(n)
		}
		if !hashing && w.lines && (w.start > hashMax || w.start < 0 && pos > hashMax) {
			return nil, errLineTooFar
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if !hashing {
			if w.done || w.more {
				// The window is complete; the file goes on.
				res := w.result(max(size, pos))
				res.Size = max(size, pos)
				res.SHA256Skipped = hashSkipped
				return res, nil
			}
		}
	}
	res := w.result(pos)
	res.Size = pos
	if pos == from && from > 0 {
		// The window starts past the end, which nothing was read to find.
		res.Size = size
	}
	if hashing {
		sum := hex.EncodeToString(h.Sum(nil))
		res.SHA256 = &sum
	} else {
		res.SHA256Skipped = hashSkipped
	}
	return res, nil
}

// window collects the bytes of a read's window while the file streams by.
type window struct {
	lines     bool
	startLine int
	lineCount int
	maxBytes  int
	// start is the window's offset, -1 until the start line is found.
	start int64
	// line is the number of the line at the current position.
	line int
	// data holds up to maxBytes bytes from start; more is set when the file
	// goes on past them.
	data []byte
	more bool
	// done: by lines, line_count complete lines are in data.
	done bool
}

func (w *window) feed(b []byte, pos int64) {
	for len(b) > 0 && !w.done {
		if w.start < 0 {
			// Find where the start line begins.
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				return
			}
			w.line++
			b, pos = b[i+1:], pos+int64(i+1)
			if w.line == w.startLine {
				w.start = pos
			}
			continue
		}
		if pos+int64(len(b)) <= w.start {
			return
		}
		if pos < w.start {
			b, pos = b[w.start-pos:], w.start
		}
		room := w.maxBytes - len(w.data)
		if room <= 0 {
			w.more = true
			return
		}
		take := b[:min(room, len(b))]
		if w.lines && w.lineCount > 0 {
			// Stop after line_count complete lines.
			have := bytes.Count(w.data, []byte{'\n'})
			for i, c := range take {
				if c == '\n' {
					have++
					if have == w.lineCount {
						take = take[:i+1]
						w.done = true
						break
					}
				}
			}
		}
		w.data = append(w.data, take...)
		b, pos = b[len(take):], pos+int64(len(take))
	}
}

func (w *window) result(size int64) *ReadResult {
	if w.start < 0 {
		// The file has fewer lines: nothing to show, from its end.
		w.start = size
	}
	data := w.data
	res := &ReadResult{Offset: w.start}
	if w.lines {
		switch {
		case w.done || !w.more:
			// line_count whole lines, or everything to the end.
		case bytes.LastIndexByte(data, '\n') >= 0:
			data = data[:bytes.LastIndexByte(data, '\n')+1]
		default:
			res.LineTruncated = true
			data = data[:len(data)-partialTail(data)]
		}
		res.NextLine = w.startLine + bytes.Count(data, []byte{'\n'})
		if res.LineTruncated || len(data) > 0 && data[len(data)-1] != '\n' {
			res.NextLine++
		}
	} else if w.more {
		data = data[:len(data)-partialTail(data)]
	}
	res.NextOffset = res.Offset + int64(len(data))
	res.EOF = res.NextOffset >= size
	res.Data, res.Encoding = textenc.Encode(data)
	return res
}

// partialTail is how many bytes at the end of b begin a character that b
// cuts, when cutting them leaves something: a page then ends before the
// character and the next one starts with it, so text stays text.
func partialTail(b []byte) int {
	n := textenc.PartialTail(b)
	if n == len(b) {
		return 0
	}
	return n
}
