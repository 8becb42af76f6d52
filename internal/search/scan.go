package search

import (
	"bytes"
	"strings"
	"syscall"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/eintr"
)

type scanStatus int

const (
	scanDone scanStatus = iota
	scanBinary
	scanLarge
	scanAborted
	scanReadError
)

// scan opens a regular file and searches its lines for the text.
func (w *worker) scan(t task) {
	s := w.s
	path := t.path
	fd, err := s.h.openFile(t.parent.fd, path[t.nameOff:], path)
	if err != nil {
		w.cnt.fail(err)
		return
	}
	defer syscall.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		w.cnt.fail(err)
		return
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return // replaced by something else since it was listed
	}
	if s.links.Own(&st) {
		return // one of the agent's own files, by another name
	}
	if st.Size > s.maxFileBytes {
		w.cnt.large++
		return
	}
	// Read what fstat reported (growth during the read is ignored). A size
	// of 0 may hide content (e.g. /proc): read to EOF, within the bound.
	limit, sizeKnown := st.Size, st.Size > 0
	if !sizeKnown {
		limit = s.maxFileBytes + 1
	}
	w.local = w.local[:0]
	w.overflow = false
	switch w.scanFD(fd, path, limit, sizeKnown) {
	case scanDone:
		if len(w.local) > 0 || w.overflow {
			s.col.add(w.local, w.overflow)
		}
	case scanBinary:
		w.cnt.binary++
	case scanLarge:
		w.cnt.large++
	case scanAborted:
		w.aborted = true
	case scanReadError:
		w.cnt.other++
	}
}

// scanFD streams the file through the worker's buffer. The buffer holds
// whole lines where it can: the partial line at its end is carried to the
// front before the next read. A line longer than the buffer is searched in
// pieces that overlap by len(text)-1 bytes (plus some context for Text),
// and once it matched the rest of it is skipped.
func (w *worker) scanFD(fd int, path string, limit int64, sizeKnown bool) scanStatus {
	s := w.s
	buf := w.buf
	var (
		n         int   // bytes in buf
		read      int64 // bytes read from the file
		eof       bool
		line      = 1    // number of the line that contains buf[0]
		lineStart = true // buf[0] begins a line
	)
	w.skipLine = false
	for !eof {
		if s.ctx.Err() != nil {
			return scanAborted
		}
		before := n
		var st scanStatus
		if n, read, eof, st = fill(fd, buf, n, read, limit, sizeKnown); st != scanDone {
			return st
		}
		// Binary check on the part of the file's first BinaryProbeBytes that
		// was just read.
		if start := read - int64(n-before); start < BinaryProbeBytes {
			end := min(n, before+int(BinaryProbeBytes-start))
			if bytes.IndexByte(buf[before:end], 0) >= 0 {
				return scanBinary
			}
		}

		end := n
		if !eof {
			end = bytes.LastIndexByte(buf[:n], '\n') + 1
		}
		if end > 0 {
			var ok bool
			line, ok = w.searchLines(path, buf[:end], line, lineStart, !eof)
			if !ok {
				return w.finishProbe(fd, read, limit, eof)
			}
			copy(buf, buf[end:n])
			n -= end
			lineStart = true
			continue
		}
		// The whole buffer is part of one line.
		if !w.skipLine {
			if i := bytes.Index(buf[:n], s.text); i >= 0 {
				if !w.accept(path, line) {
					return w.finishProbe(fd, read, limit, eof)
				}
				text, trunc := lineText(buf[:n], 0, n, i, lineStart, false)
				w.local = append(w.local, match{path: path, line: line, text: text, textTrunc: trunc})
				w.skipLine = true
			}
		}
		keep := 0
		if !w.skipLine {
			keep = min(n, len(s.text)-1+contextBefore)
		}
		copy(buf, buf[n-keep:n])
		n = keep
		lineStart = false
	}
	return scanDone
}

// fill reads from fd into buf past its first n bytes until buf is full,
// the file ends or limit bytes of it were read (read so far), and returns
// the new n and read. A file of unknown size that reaches limit is
// scanLarge (limit is then max_file_bytes+1); a failed read scanReadError.
func fill(fd int, buf []byte, n int, read, limit int64, sizeKnown bool) (int, int64, bool, scanStatus) {
	for n < len(buf) {
		want := len(buf) - n
		if rem := limit - read; int64(want) > rem {
			want = int(rem)
		}
		if want == 0 {
			if !sizeKnown {
				return n, read, false, scanLarge
			}
			return n, read, true, scanDone
		}
		m, err := eintr.Read(fd, buf[n:n+want])
		if err != nil {
			return n, read, false, scanReadError
		}
		if m == 0 {
			return n, read, true, scanDone
		}
		n += m
		read += int64(m)
	}
	return n, read, false, scanDone
}

// finishProbe completes the binary check of a file whose search stopped
// early (no further match can be returned) before BinaryProbeBytes were
// read, which only happens with a buffer smaller than the probe.
func (w *worker) finishProbe(fd int, read, limit int64, eof bool) scanStatus {
	for !eof && read < BinaryProbeBytes && read < limit {
		want := int(min(int64(len(w.buf)), BinaryProbeBytes-read, limit-read))
		m, err := eintr.Read(fd, w.buf[:want])
		if err != nil {
			return scanReadError
		}
		if m == 0 {
			break
		}
		if bytes.IndexByte(w.buf[:m], 0) >= 0 {
			return scanBinary
		}
		read += int64(m)
	}
	return scanDone
}

// searchLines searches region, which ends at a line end (or at EOF), for the
// text, recording at most one match per line. line is the number of the
// line containing region[0]; lineStart says region[0] begins it. It returns
// the number of the line that follows region (counted only when more is to
// come) and false when the file need not be searched further.
func (w *worker) searchLines(path string, region []byte, line int, lineStart, more bool) (int, bool) {
	text := w.s.text
	pos := 0
	if w.skipLine {
		j := bytes.IndexByte(region, '\n')
		if j < 0 {
			return line, true // EOF inside the skipped line
		}
		pos = j + 1
		line++
		w.skipLine = false
		lineStart = true
	}
	counted := pos // line is the number of the line at region[counted]
	for pos < len(region) {
		i := bytes.Index(region[pos:], text)
		if i < 0 {
			break
		}
		at := pos + i
		line += bytes.Count(region[counted:at], newline)
		counted = at
		if !w.accept(path, line) {
			return line, false
		}
		ls := bytes.LastIndexByte(region[:at], '\n') + 1
		le := bytes.IndexByte(region[at:], '\n')
		if le < 0 {
			le = len(region)
		} else {
			le += at
		}
		t, trunc := lineText(region, ls, le, at, ls > 0 || lineStart, true)
		w.local = append(w.local, match{path: path, line: line, text: t, textTrunc: trunc})
		if le == len(region) {
			return line, true // the last line of the file, without a newline
		}
		pos = le + 1
		line++
		counted = pos
	}
	if more {
		line += bytes.Count(region[counted:], newline)
	}
	return line, true
}

var newline = []byte{'\n'}

// accept reports whether a match at (path, line) can still be returned,
// noting an overflow when the file already has as many matches as can be
// returned.
func (w *worker) accept(path string, line int) bool {
	if k := w.s.col.cutoff.Load(); k != nil && k.after(path, line) {
		return false
	}
	if len(w.local) >= w.s.maxResults {
		w.overflow = true
		return false
	}
	return true
}

// lineText returns the line b[ls:le] holding a match at b[at], as valid
// UTF-8 of at most MaxLineBytes bytes without its line ending. startKnown
// and endKnown say whether ls and le are the line's real bounds (a long
// line may be only partly in the buffer). A longer line yields a window
// starting a little before the match, and true.
func lineText(b []byte, ls, le, at int, startKnown, endKnown bool) (string, bool) {
	if endKnown && le > ls && b[le-1] == '\r' {
		le--
	}
	start, end := ls, le
	if end-start > MaxLineBytes {
		start = max(ls, at-contextBefore)
		for i := 0; i < utf8.UTFMax-1 && start < at && !utf8.RuneStart(b[start]); i++ {
			start++
		}
		end = min(le, start+MaxLineBytes)
		for i := 0; i < utf8.UTFMax-1 && end > start && end < le && !utf8.RuneStart(b[end]); i++ {
			end--
		}
	}
	trunc := start > ls || end < le || !startKnown || !endKnown
	t := string(b[start:end])
	if !utf8.ValidString(t) {
		t = strings.ToValidUTF8(t, "\uFFFD")
		if len(t) > MaxLineBytes {
			cut := MaxLineBytes
			for cut > 0 && !utf8.RuneStart(t[cut]) {
				cut--
			}
			t = t[:cut]
			trunc = true
		}
	}
	return t, trunc
}
