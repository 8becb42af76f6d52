// Package permissions loads the owner's local permission ceiling,
// permissions.json in the config directory (SPEC §4). The ceiling is applied
// after a remote grant and also to the local `commandcore mcp` server: it is
// the machine owner's last word on which tools may run here, whoever asks.
//
// It fails closed. A missing file imposes nothing, but a file that exists and
// is anything less than a well-formed, owner-only regular file denies every
// tool until the owner fixes it, because a ceiling that was meant to narrow
// must never silently widen.
package permissions

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/ownerfile"
	"github.com/commandcore/commandcore/internal/strictjson"
)

// File is the ceiling's name inside the config directory.
const File = "permissions.json"

// schemaVersion is the only file format this agent understands.
const schemaVersion = 1

// Ceiling is the owner's limit on which tools may run. A nil or zero Ceiling
// allows nothing.
type Ceiling struct {
	// allowAll is set only when the file is known to be absent.
	allowAll bool
	// present is false only when the file is known to be absent.
	present bool
	// tools are validated scope entries (authz.ValidScope).
	tools []string
	// err is why a present ceiling is invalid; it then denies everything.
	err error
}

// Load reads the ceiling from configDir. A missing file yields a ceiling
// that allows every tool and no error. Any other failure yields a ceiling
// that denies every tool together with a permission_denied error naming the
// kind of problem, never the path or the file's content.
func Load(configDir string) (*Ceiling, error) {
	data, err := read(filepath.Join(configDir, File))
	if errors.Is(err, os.ErrNotExist) {
		return &Ceiling{allowAll: true}, nil
	}
	if err != nil {
		return refuse(err)
	}
	return Decode(data)
}

// read reads the owner's file. Readable by others is refused too, because
// a ceiling other users can read tells them exactly what a stolen client
// token could still do here.
func read(path string) ([]byte, error) {
	data, err := ownerfile.Read(path, limits.MaxPermissionsBytes, ownerfile.Private)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, invalid(err.Error(), err)
	}
	return data, err
}

// Decode parses a ceiling document strictly:
//
//	{"schema_version": 1, "tools": ["process.*", "system.metrics"]}
//
// Both keys are required, each exactly once and spelled exactly so, with
// nothing after the object. schema_version must be 1; tools entries are
// scope entries, and an empty list allows nothing. On failure it returns a
// ceiling that denies everything together with the error.
func Decode(data []byte) (*Ceiling, error) {
	// The raw fields: absent stays nil, so a missing key is told apart
	// from a null one.
	var fields struct {
		SchemaVersion json.RawMessage `json:"schema_version"`
		Tools         json.RawMessage `json:"tools"`
	}
	if err := strictjson.Decode(data, &fields, limits.MaxPermissionsBytes, strictjson.ExactKeys); err != nil {
		return refuse(decodeError(err))
	}
	if fields.SchemaVersion == nil {
		return refuse(invalid("schema_version is missing", nil))
	}
	var version *int
	if err := json.Unmarshal(fields.SchemaVersion, &version); err != nil || version == nil || *version != schemaVersion {
		return refuse(invalid(fmt.Sprintf("schema_version must be %d", schemaVersion), err))
	}
	if fields.Tools == nil {
		return refuse(invalid("tools is missing", nil))
	}
	var tools *[]string
	if err := json.Unmarshal(fields.Tools, &tools); err != nil || tools == nil {
		return refuse(invalid("tools must be a list of tool names or patterns", err))
	}
	for i, t := range *tools {
		if !authz.ValidScope(t) {
			// The position only: a pattern from the owner's file stays local.
			return refuse(invalid(fmt.Sprintf("tools entry %d is not a valid name or pattern", i+1), nil))
		}
	}
	return &Ceiling{present: true, tools: *tools}, nil
}

// decodeError names what is wrong with the document; a field's name stays
// local, since the message reaches remote clients.
func decodeError(err error) error {
	var field *strictjson.FieldError
	switch {
	case errors.Is(err, strictjson.ErrTooLarge):
		return invalid(fmt.Sprintf("it is larger than %d bytes", limits.MaxPermissionsBytes), nil)
	case errors.Is(err, strictjson.ErrNotObject), errors.Is(err, io.EOF):
		return invalid("it is not a JSON object", err)
	case errors.As(err, &field) && field.Repeated:
		return invalid("it has a duplicate field", nil)
	case errors.As(err, &field):
		return invalid("it has an unknown field", nil)
	case errors.Is(err, strictjson.ErrTrailing):
		return invalid("it has trailing data", err)
	}
	return invalid("it is malformed JSON", err)
}

// invalid builds the content-free error of a present but unusable ceiling,
// keeping cause for local diagnosis only.
func invalid(reason string, cause error) error {
	return errcode.Wrap(errcode.PermissionDenied, cause, "the local permission ceiling is invalid: %s", reason)
}

func refuse(err error) (*Ceiling, error) {
	return &Ceiling{present: true, err: err}, err
}

// Present reports whether the owner has a ceiling file (valid or not); it is
// false only when the file is known to be absent.
func (c *Ceiling) Present() bool {
	return c != nil && c.present
}

// Tools returns the ceiling's tool entries: nil when there is no ceiling
// (everything is allowed) or it is invalid (nothing is).
func (c *Ceiling) Tools() []string {
	if c == nil || c.err != nil || c.allowAll {
		return nil
	}
	return append([]string{}, c.tools...)
}

// Allows reports whether tool may run under the ceiling.
func (c *Ceiling) Allows(tool string) bool {
	if c == nil || c.err != nil {
		return false
	}
	return c.allowAll || authz.MatchScope(c.tools, tool)
}

// Check returns nil if tool may run, the load error if the ceiling is
// invalid, and otherwise a permission_denied error that does not name the
// tool pattern that failed to match.
func (c *Ceiling) Check(tool string) error {
	if c != nil && c.err != nil {
		return c.err
	}
	if !c.Allows(tool) {
		return errcode.New(errcode.PermissionDenied, "the machine's owner does not allow this tool here")
	}
	return nil
}
