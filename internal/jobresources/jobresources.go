// Package jobresources loads the owner's caps on each job's resources,
// job-resources.json in the agent's state directory (README, "Managed jobs"). It fails
// closed: anything wrong with an existing file refuses launches until the
// owner fixes it. Its errors still say "policy", as the policy_invalid
// error code and the status report's policy field do.
package jobresources

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/ownerfile"
	"github.com/commandcore/commandcore/internal/strictjson"
)

// FileName is the file's name inside the state directory.
const FileName = "job-resources.json"

// minMemoryMax rejects caps too small for even the supervisor to start,
// which would make every launch fail in a confusing way.
const minMemoryMax = 16 << 20

// Caps are the owner's caps on each job. The zero value imposes nothing.
type Caps struct {
	// MemoryMaxBytes caps each newly launched systemd job (MemoryMax, with
	// MemorySwapMax=0); 0 means no cap.
	MemoryMaxBytes uint64 `json:"memory_max_bytes"`
}

// ErrInvalid is wrapped by every reason a present file is refused.
var ErrInvalid = errors.New("policy invalid")

// Load reads the caps from stateDir. A missing file imposes none.
func Load(stateDir string) (Caps, error) {
	data, err := ownerfile.Read(filepath.Join(stateDir, FileName), limits.MaxJobResourcesBytes, ownerfile.SharedWrite)
	if errors.Is(err, os.ErrNotExist) {
		return Caps{}, nil
	}
	if err != nil {
		return Caps{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return Decode(data)
}

// Decode parses a job-resources document strictly: only memory_max_bytes, given
// at most once and in exactly that spelling.
func Decode(data []byte) (Caps, error) {
	var doc struct {
		MemoryMaxBytes json.RawMessage `json:"memory_max_bytes"`
	}
	if err := strictjson.Decode(data, &doc, limits.MaxJobResourcesBytes, strictjson.ExactKeys); err != nil {
		return Caps{}, fmt.Errorf("%w: %s", ErrInvalid, describe(err))
	}
	var p Caps
	if doc.MemoryMaxBytes == nil {
		return p, nil
	}
	// Unmarshalling null into a number is silently a no-op; refuse it.
	if string(bytes.TrimSpace(doc.MemoryMaxBytes)) == "null" {
		return Caps{}, fmt.Errorf("%w: memory_max_bytes must be a number", ErrInvalid)
	}
	if err := json.Unmarshal(doc.MemoryMaxBytes, &p.MemoryMaxBytes); err != nil {
		return Caps{}, fmt.Errorf("%w: memory_max_bytes must be a non-negative integer", ErrInvalid)
	}
	if p.MemoryMaxBytes < minMemoryMax {
		return Caps{}, fmt.Errorf("%w: memory_max_bytes must be at least %d", ErrInvalid, minMemoryMax)
	}
	return p, nil
}

// describe turns a decoding error into a message that names the problem
// without echoing file content.
func describe(err error) string {
	var syn *json.SyntaxError
	var field *strictjson.FieldError
	switch {
	case errors.As(err, &field) && field.Repeated:
		// The name stays local: the message reaches remote clients.
		return "a field is given twice"
	case errors.As(err, &field):
		return "unknown field (only memory_max_bytes is allowed)"
	case errors.Is(err, strictjson.ErrTooLarge):
		return fmt.Sprintf("larger than %d bytes", limits.MaxJobResourcesBytes)
	case errors.Is(err, strictjson.ErrNotObject):
		return "the policy must be a JSON object"
	case errors.Is(err, strictjson.ErrTrailing):
		return "trailing data after the JSON object"
	case errors.As(err, &syn):
		return fmt.Sprintf("malformed JSON at byte %d", syn.Offset)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "empty or truncated JSON"
	default:
		return "malformed JSON"
	}
}
