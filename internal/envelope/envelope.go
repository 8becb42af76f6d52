// Package envelope is the private envelope that carries a job's command,
// environment, working directory, shell, time limit and input mode from the launcher to the
// supervisor over a pipe on the supervisor's stdin. It is the only place
// those values travel; nothing here is ever written to disk.
package envelope

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/strictjson"
	"github.com/commandcore/commandcore/internal/terminal"
)

// Version is the envelope format this build writes and reads.
const Version = 1

// Envelope is what a supervisor needs to start the shell.
type Envelope struct {
	Version int      `json:"version"`
	Command string   `json:"command"`
	Env     []string `json:"env"`
	Cwd     string   `json:"cwd"`
	Shell   string   `json:"shell"`
	// TimeoutS is the job's time limit in seconds; 0 means none. The
	// supervisor enforces it: it travels here, not as a unit property.
	TimeoutS int `json:"timeout_s,omitempty"`
	// Stdin gives the shell a pipe fed through the job's input channel
	// instead of /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// PTY runs the shell on a terminal of this size; its input comes
	// through the input channel too.
	PTY *terminal.Size `json:"pty,omitempty"`
}

// Interactive reports whether the job takes input.
func (e *Envelope) Interactive() bool { return e.Stdin || e.PTY != nil }

// Timeout returns the job's time limit, 0 when it has none.
func (e *Envelope) Timeout() time.Duration { return time.Duration(e.TimeoutS) * time.Second }

// ErrInvalid reports a malformed or oversized envelope.
var ErrInvalid = errors.New("invalid envelope")

// Encode writes e to w.
func Encode(w io.Writer, e *Envelope) error {
	if err := e.Validate(); err != nil {
		return err
	}
	if err := json.NewEncoder(w).Encode(e); err != nil {
		return fmt.Errorf("write envelope: %w", err)
	}
	return nil
}

// Decode reads one envelope from r, reading at most limits.MaxEnvelopeBytes.
// Unknown fields, trailing data and invalid values are rejected: a
// supervisor must never guess what it was asked to run.
func Decode(r io.Reader) (*Envelope, error) {
	data, err := io.ReadAll(io.LimitReader(r, limits.MaxEnvelopeBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read envelope: %w", err)
	}
	if len(data) > limits.MaxEnvelopeBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalid, limits.MaxEnvelopeBytes)
	}
	var e Envelope
	if err := strictjson.Decode(data, &e, limits.MaxEnvelopeBytes); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return &e, nil
}

// Validate checks that e can be executed as given.
func (e *Envelope) Validate() error {
	switch {
	case e.Version != Version:
		return fmt.Errorf("%w: version %d", ErrInvalid, e.Version)
	case e.Command == "":
		return fmt.Errorf("%w: empty command", ErrInvalid)
	case strings.ContainsRune(e.Command, 0):
		return fmt.Errorf("%w: NUL in command", ErrInvalid)
	case !filepath.IsAbs(e.Shell) || strings.ContainsRune(e.Shell, 0):
		return fmt.Errorf("%w: shell must be an absolute path", ErrInvalid)
	case !filepath.IsAbs(e.Cwd) || strings.ContainsRune(e.Cwd, 0):
		return fmt.Errorf("%w: cwd must be an absolute path", ErrInvalid)
	case e.TimeoutS < 0 || e.TimeoutS > int(limits.JobTimeoutMax/time.Second):
		return fmt.Errorf("%w: time limit out of range", ErrInvalid)
	case e.PTY != nil && !e.PTY.Valid():
		return fmt.Errorf("%w: terminal size out of range", ErrInvalid)
	}
	for i, kv := range e.Env {
		if err := ValidEnvEntry(kv); err != nil {
			return fmt.Errorf("%w: env entry %d: %v", ErrInvalid, i, err)
		}
	}
	return nil
}

// ValidEnvEntry checks one KEY=VALUE entry.
func ValidEnvEntry(kv string) error {
	k, _, ok := strings.Cut(kv, "=")
	if !ok {
		return errors.New("missing '='")
	}
	if err := ValidEnvKey(k); err != nil {
		return err
	}
	if strings.ContainsRune(kv, 0) {
		return errors.New("NUL byte")
	}
	return nil
}

// ValidEnvKey checks an environment variable name.
func ValidEnvKey(k string) error {
	if k == "" {
		return errors.New("empty name")
	}
	if strings.ContainsAny(k, "=\x00") {
		return errors.New("name contains '=' or NUL")
	}
	return nil
}
