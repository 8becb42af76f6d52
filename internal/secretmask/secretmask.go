// Package secretmask hides secret input from a job's captured output: every
// occurrence of a secret's bytes in a stream is replaced by Mask, as CI
// systems mask their secrets. A job's supervisor keeps its secrets in a
// Set, in memory only, for the job's life, and reads each output stream
// through a Set's Reader before the capture stores it.
//
// An occurrence split across two reads is masked too: a Reader holds back
// the end of what it read while that end could still begin a secret (it is
// a prefix of one), and hands it on once it can no longer, or at the
// stream's end. The bytes held back are never more than the longest secret
// less one. Masking changes the stream: offsets into a capture are of the
// masked stream.
//
// What a program makes of a secret before printing it (encoded, reversed,
// one character a line) is not the secret's bytes and is not masked.
package secretmask

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/commandcore/commandcore/internal/limits"
)

// Mask is what an occurrence of a secret becomes.
const Mask = "***"

// readBytes is how much of the stream one Read of a Reader takes.
const readBytes = 64 << 10

// ErrFull refuses a secret past limits.SecretsPerJob.
var ErrFull = errors.New("the job keeps as many secrets as it may")

// Set is the secrets one job's output is masked for. It is safe for
// concurrent use: input adds secrets while the streams are read.
type Set struct {
	mu      sync.Mutex
	secrets []secret
}

// secret is one secret's bytes and their failure function (Knuth, Morris,
// Pratt): border[i] is the length of the longest proper prefix of b[:i+1]
// that is also its suffix. It finds the end of a read that begins the
// secret in time linear in the secret's length.
type secret struct {
	b      []byte
	border []int
}

func newSecret(b []byte) secret {
	k := secret{b: bytes.Clone(b), border: make([]int, len(b))}
	for i, q := 1, 0; i < len(b); i++ {
		for q > 0 && b[i] != b[q] {
			q = k.border[q-1]
		}
		if b[i] == b[q] {
			q++
		}
		k.border[i] = q
	}
	return k
}

// overlap returns the length of the longest end of text that begins k;
// text is shorter than k.
func (k secret) overlap(text []byte) int {
	q := 0
	for _, c := range text {
		for q > 0 && c != k.b[q] {
			q = k.border[q-1]
		}
		if c == k.b[q] {
			q++
		}
	}
	return q
}

// Add keeps secret (a copy) to mask from now on: at most
// limits.SecretsPerJob secrets, each 1-limits.SecretMaxBytes long. A
// secret kept already is not kept twice.
func (s *Set) Add(b []byte) error {
	if len(b) == 0 || len(b) > limits.SecretMaxBytes {
		return fmt.Errorf("a secret must be 1-%d bytes", limits.SecretMaxBytes)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.secrets {
		if bytes.Equal(k.b, b) {
			return nil
		}
	}
	if len(s.secrets) >= limits.SecretsPerJob {
		return ErrFull
	}
	s.secrets = append(s.secrets, newSecret(b))
	return nil
}

// snapshot returns the secrets kept now. Secrets are only ever appended
// and never changed, so the slice may be read without the lock.
func (s *Set) snapshot() []secret {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.secrets[:len(s.secrets):len(s.secrets)]
}

// Reader returns r's bytes with every secret of s masked, the secrets
// added while it reads included: each read is masked with the secrets
// kept when it returns.
func (s *Set) Reader(r io.Reader) io.Reader {
	return &reader{set: s, r: r}
}

type reader struct {
	set *Set
	r   io.Reader
	// in holds the bytes held back from the last read, then the next
	// read's after them.
	in []byte
	// out[off:] is masked and not yet handed on.
	out []byte
	off int
	// err is r's error, returned once out is handed on.
	err error
}

func (m *reader) Read(p []byte) (int, error) {
	for m.off == len(m.out) {
		if m.err != nil {
			return 0, m.err
		}
		m.fill()
	}
	n := copy(p, m.out[m.off:])
	m.off += n
	return n, nil
}

// fill reads once from r and masks what it may hand on.
func (m *reader) fill() {
	held := len(m.in)
	m.in = slices.Grow(m.in, readBytes)
	n, err := m.r.Read(m.in[held : held+readBytes])
	m.in = m.in[:held+n]
	var keep int
	m.out, keep = mask(m.out[:0], m.in, m.set.snapshot(), err != nil)
	m.off = 0
	m.in = append(m.in[:0], m.in[len(m.in)-keep:]...)
	m.err = err
}

// mask appends src to dst with every occurrence of a secret replaced by
// Mask, the leftmost first (the longest of those starting at one byte),
// and returns how many bytes at src's end it held back instead: the end
// from which a secret may still begin, so that what it hands on is what
// masking the whole stream at once would. At the stream's end (final)
// nothing is held back.
func mask(dst, src []byte, secrets []secret, final bool) ([]byte, int) {
	// next[i] is where secret i next occurs at or after pos; -1: nowhere.
	next := make([]int, len(secrets))
	for i, k := range secrets {
		next[i] = bytes.Index(src, k.b)
	}
	hold := len(src)
	if !final {
		hold = heldFrom(src, 0, secrets)
	}
	pos := 0
	for {
		at, n := -1, 0
		for i, k := range secrets {
			if next[i] >= 0 && next[i] < pos {
				if j := bytes.Index(src[pos:], k.b); j >= 0 {
					next[i] = pos + j
				} else {
					next[i] = -1
				}
			}
			if next[i] >= 0 && (at < 0 || next[i] < at || next[i] == at && len(k.b) > n) {
				at, n = next[i], len(k.b)
			}
		}
		// A match in the end held back waits for the bytes after it: a
		// longer secret, or one that begins earlier, may take its place.
		if at < 0 || at >= hold {
			break
		}
		dst = append(dst, src[pos:at]...)
		dst = append(dst, Mask...)
		pos = at + n
		if pos > hold {
			hold = heldFrom(src, pos, secrets)
		}
	}
	return append(dst, src[pos:hold]...), len(src) - hold
}

// heldFrom returns the first position at or after from where the rest of
// src is the beginning of a secret (and shorter than it), or len(src):
// for each secret, its longest beginning among the ends of src shorter
// than it.
func heldFrom(src []byte, from int, secrets []secret) int {
	at := len(src)
	for _, k := range secrets {
		q := k.overlap(src[max(from, len(src)-len(k.b)+1):])
		at = min(at, len(src)-q)
	}
	return at
}

// ErrNotOneLine refuses secret input that is not one line.
var ErrNotOneLine = fmt.Errorf("secret input must be one line of at most %d bytes, ended by a newline, without control characters", limits.SecretMaxBytes)

// Line returns the secret that data, one line of secret input, carries:
// data less the newline it must end with. The secret is at most
// limits.SecretMaxBytes and holds no control character (C0 or DEL): a
// secret prompt's input ends at its first newline, and a terminal would
// act on the others rather than pass them on.
func Line(data []byte) ([]byte, error) {
	secret, ok := bytes.CutSuffix(data, []byte{'\n'})
	if !ok || len(secret) > limits.SecretMaxBytes {
		return nil, ErrNotOneLine
	}
	for _, c := range secret {
		if c < 0x20 || c == 0x7f {
			return nil, ErrNotOneLine
		}
	}
	return secret, nil
}
