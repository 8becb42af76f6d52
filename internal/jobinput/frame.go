// Package jobinput is the channel between the agent and a job's supervisor
// for an interactive job: a unix socket in the job directory that the
// supervisor owns for the job's whole life, so input reaches the job from
// any agent process, also one started after the job. One connection carries
// one request (write bytes, close stdin, resize the terminal) and its reply;
// the supervisor serves connections one at a time, which keeps writes in
// order. Nothing that passes here is recorded.
package jobinput

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"syscall"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/terminal"
)

// SocketFile is the channel's name in the job directory.
const SocketFile = "input.sock"

// Wire format: fixed-size little-endian headers, version in the magic.
const (
	version     = 1
	requestLen  = 12
	replyLen    = 24
	opWrite     = 1
	opResize    = 2
	opScreen    = 3
	flagEOF     = 1
	flagSecret  = 2
	statusOK    = 0
	statusClose = 1
	statusNoTTY = 2
	statusBad   = 3
	statusFull  = 4
)

var magic = [2]byte{'C', 'I'}

// Request is one exchange's ask: write Data (then close stdin when EOF),
// or, when Resize is set, resize the terminal, or, when Screen is set,
// write the terminal's screen to the job directory's screen file. Secret
// Data is one line (secretmask.Line), masked in the job's output from
// then on and written with the terminal's echo off.
type Request struct {
	Data   []byte
	EOF    bool
	Secret bool
	Resize *terminal.Size
	Screen bool
}

// Reply is the supervisor's answer to a write: how many bytes the job took
// and where its output streams stood before them.
type Reply struct {
	Accepted     int
	StdoutOffset int64
	StderrOffset int64
}

// ErrMalformed reports a frame that does not follow the format.
var ErrMalformed = errors.New("malformed input frame")

// Answers a supervisor gives instead of a Reply.
var (
	ErrClosed      = errors.New("the job's input is closed")
	ErrNotTerminal = errors.New("the job has no terminal")
	ErrRefused     = errors.New("the supervisor refused the request")
	ErrSecretsFull = errors.New("the job keeps as many secrets as it may")
)

// answers maps each status but statusOK to the error a client reads.
var answers = map[byte]error{
	statusClose: ErrClosed,
	statusNoTTY: ErrNotTerminal,
	statusBad:   ErrRefused,
	statusFull:  ErrSecretsFull,
}

// encodeRequest returns the frame for r.
func encodeRequest(r Request) ([]byte, error) {
	h := make([]byte, requestLen, requestLen+len(r.Data))
	copy(h, magic[:])
	h[2] = version
	switch {
	case r.Screen:
		if r.Resize != nil || len(r.Data) > 0 || r.EOF || r.Secret {
			return nil, fmt.Errorf("%w: a screen request asks nothing else", ErrMalformed)
		}
		h[3] = opScreen
		return h, nil
	case r.Resize != nil:
		if !r.Resize.Valid() || len(r.Data) > 0 || r.EOF || r.Secret {
			return nil, fmt.Errorf("%w: resize to %dx%d", ErrMalformed, r.Resize.Cols, r.Resize.Rows)
		}
		h[3] = opResize
		binary.LittleEndian.PutUint16(h[8:], uint16(r.Resize.Cols))
		binary.LittleEndian.PutUint16(h[10:], uint16(r.Resize.Rows))
		return h, nil
	case len(r.Data) > limits.MaxInputBytes:
		return nil, fmt.Errorf("%w: %d bytes", ErrMalformed, len(r.Data))
	}
	h[3] = opWrite
	if r.EOF {
		h[4] |= flagEOF
	}
	if r.Secret {
		h[4] |= flagSecret
	}
	binary.LittleEndian.PutUint32(h[8:], uint32(len(r.Data)))
	return append(h, r.Data...), nil
}

// readRequest reads one request frame from r, at most limits.MaxInputBytes
// of data, into buf (of that size) when given: a supervisor reuses one
// buffer for every request rather than leave a 64 KiB one behind for the
// garbage collector each time. The request's Data is valid until buf is
// used again.
func readRequest(r io.Reader, buf []byte) (Request, error) {
	var h [requestLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Request{}, fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	if h[0] != magic[0] || h[1] != magic[1] || h[2] != version || h[5] != 0 || h[6] != 0 || h[7] != 0 {
		return Request{}, fmt.Errorf("%w: bad magic or version", ErrMalformed)
	}
	switch h[3] {
	case opScreen:
		if h[4] != 0 || binary.LittleEndian.Uint32(h[8:]) != 0 {
			return Request{}, fmt.Errorf("%w: bad screen request", ErrMalformed)
		}
		return Request{Screen: true}, nil
	case opResize:
		size := &terminal.Size{Cols: int(binary.LittleEndian.Uint16(h[8:])), Rows: int(binary.LittleEndian.Uint16(h[10:]))}
		if h[4] != 0 || !size.Valid() {
			return Request{}, fmt.Errorf("%w: bad resize", ErrMalformed)
		}
		return Request{Resize: size}, nil
	case opWrite:
		if h[4]&^(flagEOF|flagSecret) != 0 {
			return Request{}, fmt.Errorf("%w: unknown flags", ErrMalformed)
		}
		n := binary.LittleEndian.Uint32(h[8:])
		if n > limits.MaxInputBytes {
			return Request{}, fmt.Errorf("%w: %d bytes", ErrMalformed, n)
		}
		if len(buf) < int(n) {
			buf = make([]byte, n)
		}
		req := Request{EOF: h[4]&flagEOF != 0, Secret: h[4]&flagSecret != 0, Data: buf[:n]}
		if _, err := io.ReadFull(r, req.Data); err != nil {
			return Request{}, fmt.Errorf("%w: data: %v", ErrMalformed, err)
		}
		return req, nil
	}
	return Request{}, fmt.Errorf("%w: unknown operation", ErrMalformed)
}

func encodeReply(status byte, rep Reply) []byte {
	b := make([]byte, replyLen)
	b[0] = status
	binary.LittleEndian.PutUint32(b[4:], uint32(rep.Accepted))
	binary.LittleEndian.PutUint64(b[8:], uint64(rep.StdoutOffset))
	binary.LittleEndian.PutUint64(b[16:], uint64(rep.StderrOffset))
	return b
}

// readReply reads one reply frame from r.
func readReply(r io.Reader) (Reply, error) {
	var b [replyLen]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			// The supervisor closed the channel without answering: the
			// job ended while the request waited.
			return Reply{}, ErrGone
		}
		return Reply{}, fmt.Errorf("%w: reply: %v", ErrMalformed, err)
	}
	if b[1] != 0 || b[2] != 0 || b[3] != 0 {
		return Reply{}, fmt.Errorf("%w: reply padding", ErrMalformed)
	}
	rep := Reply{
		Accepted:     int(binary.LittleEndian.Uint32(b[4:])),
		StdoutOffset: int64(binary.LittleEndian.Uint64(b[8:])),
		StderrOffset: int64(binary.LittleEndian.Uint64(b[16:])),
	}
	if rep.Accepted > limits.MaxInputBytes || rep.StdoutOffset < 0 || rep.StderrOffset < 0 {
		return Reply{}, fmt.Errorf("%w: reply out of range", ErrMalformed)
	}
	if b[0] == statusOK {
		return rep, nil
	}
	if err, ok := answers[b[0]]; ok {
		return rep, err
	}
	return Reply{}, fmt.Errorf("%w: unknown status", ErrMalformed)
}
