package fileops

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/textenc"
)

func writeFile(t *testing.T, path, content string, perm os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
}

func hexSum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func decoded(t *testing.T, r *ReadResult) string {
	t.Helper()
	if r.Encoding == textenc.Base64 {
		b, err := base64.StdEncoding.DecodeString(r.Data)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	return r.Data
}

func TestReadWindows(t *testing.T) {
	const text = "one\ntwo\nthree\n€uro\nlast"
	path := filepath.Join(t.TempDir(), "f.txt")
	writeFile(t, path, text, 0o644)
	for _, c := range []struct {
		name     string
		req      ReadRequest
		data     string
		encoding string
		offset   int64
		next     int64
		nextLine int
		eof      bool
	}{
		{"whole", ReadRequest{}, text, "utf-8", 0, 25, 0, true},
		{"lines 2-3", ReadRequest{StartLine: 2, LineCount: 2}, "two\nthree\n", "utf-8", 4, 14, 4, false},
		{"from line 4 to the end", ReadRequest{StartLine: 4}, "€uro\nlast", "utf-8", 14, 25, 6, true},
		{"past the last line", ReadRequest{StartLine: 9}, "", "utf-8", 25, 25, 9, true},
		{"whole lines that fit", ReadRequest{LineCount: 5, MaxBytes: 10}, "one\ntwo\n", "utf-8", 0, 8, 3, false},
		{"bytes", ReadRequest{Offset: 4, MaxBytes: 3}, "two", "utf-8", 4, 7, 0, false},
		// A page that would cut the euro sign ends before it.
		{"bytes before a character", ReadRequest{Offset: 8, MaxBytes: 7}, "three\n", "utf-8", 8, 14, 0, false},
		// One that starts inside it is not text: base64, losslessly.
		{"bytes inside a character", ReadRequest{Offset: 15, MaxBytes: 4}, "\x82\xacur", "base64", 15, 19, 0, false},
		{"past the end", ReadRequest{Offset: 100}, "", "utf-8", 100, 100, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.req.Path = path
			r, err := Read(context.Background(), nil, c.req)
			if err != nil {
				t.Fatal(err)
			}
			if got := decoded(t, r); got != c.data || r.Encoding != c.encoding {
				t.Errorf("data %q (%s), want %q (%s)", got, r.Encoding, c.data, c.encoding)
			}
			if r.Offset != c.offset || r.NextOffset != c.next || r.NextLine != c.nextLine || r.EOF != c.eof {
				t.Errorf("offset %d next_offset %d next_line %d eof %v, want %d %d %d %v", r.Offset, r.NextOffset, r.NextLine, r.EOF, c.offset, c.next, c.nextLine, c.eof)
			}
			if r.Size != int64(len(text)) || deref(r.SHA256) != hexSum(text) || time.Since(r.MTime) > time.Hour {
				t.Errorf("size %d sha256 %s mtime %v: not the whole file's", r.Size, deref(r.SHA256), r.MTime)
			}
		})
	}
}

// TestReadLongFirstLine: by lines, a first line longer than max_bytes
// comes in part, marked, with where to continue by bytes.
func TestReadLongFirstLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	writeFile(t, path, strings.Repeat("x", 100)+"\nnext\n", 0o644)
	r, err := Read(context.Background(), nil, ReadRequest{Path: path, StartLine: 1, MaxBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	if r.Data != strings.Repeat("x", 10) || !r.LineTruncated || r.NextOffset != 10 || r.NextLine != 2 || r.EOF {
		t.Fatalf("%+v", r)
	}
}

func TestReadBinaryIsBase64(t *testing.T) {
	var all []byte
	for i := range 256 {
		all = append(all, byte(i))
	}
	path := filepath.Join(t.TempDir(), "bin")
	writeFile(t, path, string(all), 0o644)
	r, err := Read(context.Background(), nil, ReadRequest{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if r.Encoding != "base64" || decoded(t, r) != string(all) || !r.EOF {
		t.Fatalf("binary read: %s eof %v", r.Encoding, r.EOF)
	}
}

// TestReadRefusesWhatIsNotAFile: a FIFO without a writer, a device and a
// directory are refused at once, never read.
func TestReadRefusesWhatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, "/dev/zero", dir, "/"} {
		began := time.Now()
		_, err := Read(context.Background(), nil, ReadRequest{Path: p})
		if errcode.From(err).Code != errcode.InvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", p, err)
		}
		if d := time.Since(began); d > time.Second {
			t.Errorf("%s: answered after %v", p, d)
		}
	}
	if _, err := Read(context.Background(), nil, ReadRequest{Path: filepath.Join(dir, "absent")}); errcode.From(err).Code != errcode.NotFound {
		t.Errorf("missing file: %v, want not_found", err)
	}
}

func TestReadValidates(t *testing.T) {
	for _, r := range []ReadRequest{
		{},
		{Path: "relative"},
		{Path: "/a\x00b"},
		{Path: "/f", StartLine: -1},
		{Path: "/f", LineCount: -1},
		{Path: "/f", Offset: -1},
		{Path: "/f", StartLine: 2, Offset: 3},
		{Path: "/f", MaxBytes: 1<<20 + 1},
	} {
		if err := r.Validate(); errcode.From(err).Code != errcode.InvalidArgument {
			t.Errorf("%+v: %v, want invalid_argument", r, err)
		}
	}
}

// naiveWindow is readWindow's contract, computed from the whole content.
func naiveWindow(content []byte, req ReadRequest) (data []byte, offset int64, nextLine int, truncated bool) {
	maxBytes := req.MaxBytes
	if maxBytes == 0 {
		maxBytes = 64 << 10
	}
	if !req.byLines() {
		if req.Offset >= int64(len(content)) {
			return nil, req.Offset, 0, false
		}
		end := min(req.Offset+int64(maxBytes), int64(len(content)))
		data = content[req.Offset:end]
		if end < int64(len(content)) {
			data = data[:len(data)-partialTail(data)]
		}
		return data, req.Offset, 0, false
	}
	start := max(req.StartLine, 1)
	lines := splitLines(content)
	if start > len(lines) {
		return nil, int64(len(content)), start, false
	}
	for _, l := range lines[:start-1] {
		offset += int64(len(l))
	}
	n := 0
	for _, l := range lines[start-1:] {
		if req.LineCount > 0 && n == req.LineCount || len(data)+len(l) > maxBytes {
			break
		}
		data = append(data, l...)
		n++
	}
	if n == 0 {
		data = lines[start-1][:maxBytes]
		data = data[:len(data)-partialTail(data)]
		return data, offset, start + 1, true
	}
	return data, offset, start + n, false
}

// FuzzReadWindow: streamed in chunks of any size, the window is the one
// the whole content gives, and size and hash are the whole file's.
func FuzzReadWindow(f *testing.F) {
	f.Add([]byte("one\ntwo\nthree\n€uro\nlast"), 2, 2, int64(0), 10, 3, int64(100))
	f.Add([]byte("€€€€"), 0, 0, int64(1), 4, 1, int64(100))
	f.Add([]byte("one\ntwo\nthree"), 0, 0, int64(5), 4, 3, int64(100))
	f.Add([]byte("a\n\nb"), 3, 0, int64(0), 0, 7, int64(100))
	f.Add([]byte("one\ntwo\nthree\n€uro\nlast"), 2, 2, int64(0), 10, 3, int64(4))
	f.Add([]byte("one\ntwo\nthree\n€uro\nlast"), 0, 0, int64(6), 5, 2, int64(1))
	f.Add([]byte("one\ntwo\nthree\n€uro\nlast"), 0, 0, int64(60), 5, 2, int64(1))
	f.Add([]byte("one\ntwo\nthree\n€uro\nlast"), 4, 1, int64(0), 0, 1, int64(8))
	f.Fuzz(func(t *testing.T, content []byte, startLine, lineCount int, offset int64, maxBytes, chunk int, hashMax int64) {
		req := ReadRequest{Path: "/f", StartLine: startLine, LineCount: lineCount, Offset: offset, MaxBytes: maxBytes}
		if req.Validate() != nil || chunk <= 0 || hashMax < 0 {
			return
		}
		size := int64(len(content))
		hashed := size <= hashMax
		var from int64
		if !hashed && !req.byLines() {
			from = offset // as Read seeks
		}
		res, err := readWindow(&chunkReader{content[min(from, size):], chunk}, req, size, from, hashMax)
		data, off, nextLine, trunc := naiveWindow(content, req)
		if errors.Is(err, errLineTooFar) {
			// Only when the start line begins past hashMax (or not at all).
			if hashed || (off < size && off <= hashMax) {
				t.Fatalf("start line at %d refused with a bound of %d", off, hashMax)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}

		got := []byte(res.Data)
		if res.Encoding == textenc.Base64 {
			got, _ = base64.StdEncoding.DecodeString(res.Data)
		}
		if !bytes.Equal(got, data) || res.Offset != off || res.NextLine != nextLine || res.LineTruncated != trunc {
			t.Fatalf("got %q at %d next_line %d truncated %v, want %q at %d %d %v", got, res.Offset, res.NextLine, res.LineTruncated, data, off, nextLine, trunc)
		}
		if res.NextOffset != off+int64(len(data)) || res.EOF != (res.NextOffset >= int64(len(content))) {
			t.Fatalf("next_offset %d eof %v", res.NextOffset, res.EOF)
		}
		if res.Size != size {
			t.Fatalf("size %d, want %d", res.Size, size)
		}
		switch {
		case hashed && (res.SHA256 == nil || *res.SHA256 != hexSum(string(content)) || res.SHA256Skipped != ""):
			t.Fatal("the hash is not the whole content's")
		case !hashed && (res.SHA256 != nil || res.SHA256Skipped == ""):
			t.Fatalf("a file over the bound is hashed: %v %q", res.SHA256, res.SHA256Skipped)
		}
	})
}

// chunkReader returns at most n bytes a read, as a pipe or a slow file
// system may.
type chunkReader struct {
	b []byte
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[k:]
	return k, nil
}

// deref is a result's sha256, "" when it is null.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
