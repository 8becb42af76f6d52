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

// Caps are the owner's caps on each job. The zero value imposes nothing but
// the default niceness (JobNice).
type Caps struct {
	// MemoryMaxBytes caps each newly launched systemd job (MemoryMax, with
	// MemorySwapMax=0); 0 means no cap.
	MemoryMaxBytes uint64 `json:"memory_max_bytes,omitempty"`
	// Nice is the owner's niceness for each new job; nil leaves the default
	// (JobNice).
	Nice *int `json:"nice,omitempty"`
	// CPUWeight is each new job unit's CPUWeight=; 0 leaves it unset.
	CPUWeight uint64 `json:"cpu_weight,omitempty"`
}

// JobNice is each new job's niceness (the unit's Nice=, or the fallback
// supervisor's own): the owner's, or limits.JobNiceDefault. An owner who
// wants jobs at the agent's own priority writes {"nice": 0}.
func (c Caps) JobNice() int {
	if c.Nice != nil {
		return *c.Nice
	}
	return limits.JobNiceDefault
}

// Same reports whether jobs under c and o get the same unit resources.
func (c Caps) Same(o Caps) bool {
	return c.MemoryMaxBytes == o.MemoryMaxBytes && c.JobNice() == o.JobNice() && c.CPUWeight == o.CPUWeight
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

// Decode parses a job-resources document strictly: only memory_max_bytes,
// nice and cpu_weight, each given at most once and in exactly that spelling,
// each an integer within its bounds.
func Decode(data []byte) (Caps, error) {
	var doc struct {
		MemoryMaxBytes json.RawMessage `json:"memory_max_bytes"`
		Nice           json.RawMessage `json:"nice"`
		CPUWeight      json.RawMessage `json:"cpu_weight"`
	}
	if err := strictjson.Decode(data, &doc, limits.MaxJobResourcesBytes, strictjson.ExactKeys); err != nil {
		return Caps{}, fmt.Errorf("%w: %s", ErrInvalid, describe(err))
	}
	var p Caps
	if doc.MemoryMaxBytes != nil {
		if err := number(doc.MemoryMaxBytes, &p.MemoryMaxBytes); errors.Is(err, errNull) {
			return Caps{}, fmt.Errorf("%w: memory_max_bytes must be a number", ErrInvalid)
		} else if err != nil {
			return Caps{}, fmt.Errorf("%w: memory_max_bytes must be a non-negative integer", ErrInvalid)
		}
		if p.MemoryMaxBytes < minMemoryMax {
			return Caps{}, fmt.Errorf("%w: memory_max_bytes must be at least %d", ErrInvalid, minMemoryMax)
		}
	}
	if doc.Nice != nil {
		var n int
		if err := number(doc.Nice, &n); err != nil || n < 0 || n > limits.JobNiceMax {
			return Caps{}, fmt.Errorf("%w: nice must be an integer from 0 to %d", ErrInvalid, limits.JobNiceMax)
		}
		p.Nice = &n
	}
	if doc.CPUWeight != nil {
		if err := number(doc.CPUWeight, &p.CPUWeight); err != nil || p.CPUWeight < limits.JobCPUWeightMin || p.CPUWeight > limits.JobCPUWeightMax {
			return Caps{}, fmt.Errorf("%w: cpu_weight must be an integer from %d to %d", ErrInvalid, limits.JobCPUWeightMin, limits.JobCPUWeightMax)
		}
	}
	return p, nil
}

var errNull = errors.New("null")

// number decodes one integer field; it refuses null, which json.Unmarshal
// would silently skip, and fractions and exponents, which it refuses for an
// integer destination.
func number(raw json.RawMessage, dst any) error {
	if string(bytes.TrimSpace(raw)) == "null" {
		return errNull
	}
	return json.Unmarshal(raw, dst)
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
		return "unknown field (only memory_max_bytes, nice and cpu_weight are allowed)"
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
