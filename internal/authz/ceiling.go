// The ceiling: the owner's local permission ceiling, permissions.json in
// the config directory. It is applied after a remote grant and
// also to the local `commandcore mcp` server: it is the machine owner's last
// word on which tools may run here, whoever asks.
//
// It fails closed. A missing file imposes nothing, but a file that exists and
// is anything less than a well-formed, owner-only regular file denies every
// tool until the owner fixes it, because a ceiling that was meant to narrow
// must never silently widen.

package authz

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/ownerfile"
	"github.com/commandcore/commandcore/internal/strictjson"
)

// CeilingFile is the ceiling's name inside the config directory.
const CeilingFile = "permissions.json"

// ceilingSchema is the only file format this agent understands.
const ceilingSchema = 1

// AllTools is the scope entry that allows every tool, what a ceiling
// without a tools list allows.
const AllTools = "*"

// Ceiling is the owner's limit on which tools may run. A nil or zero Ceiling
// allows nothing.
type Ceiling struct {
	// allowAll is set only when the file is known to be absent.
	allowAll bool
	// present is false only when the file is known to be absent.
	present bool
	// tools are validated scope entries (ValidScope).
	tools []string
	// cutOff: the owner keeps jobs and process.run commands out of the
	// user manager's reach ("jobs_reach_user_manager": false).
	cutOff bool
	// refuseAdmins: the owner refuses the relay panel's admin grants
	// ("admin": false).
	refuseAdmins bool
	// err is why a present ceiling is invalid; it then denies everything.
	err error
}

// LoadCeiling reads the ceiling from configDir. A missing file yields a ceiling
// that allows every tool and no error. Any other failure yields a ceiling
// that denies every tool together with a permission_denied error naming the
// kind of problem, never the path or the file's content.
func LoadCeiling(configDir string) (*Ceiling, error) {
	data, err := readCeiling(filepath.Join(configDir, CeilingFile))
	if errors.Is(err, os.ErrNotExist) {
		return &Ceiling{allowAll: true}, nil
	}
	if err != nil {
		return refuseCeiling(err)
	}
	return DecodeCeiling(data)
}

// readCeiling reads the owner's file. Readable by others is refused too,
// because a ceiling other users can read tells them exactly what a stolen
// client token could still do here.
func readCeiling(path string) ([]byte, error) {
	data, err := ownerfile.Read(path, limits.MaxPermissionsBytes, ownerfile.Private)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, invalidCeiling(err.Error(), err)
	}
	return data, err
}

// DecodeCeiling parses a ceiling document strictly:
//
//	{"schema_version": 1, "tools": ["process.*", "system.metrics"], "jobs_reach_user_manager": false, "admin": false}
//
// schema_version is required; tools, jobs_reach_user_manager and admin
// are optional (every tool, true and true when absent, as without the
// file: a file that only cuts jobs off the user manager narrows nothing
// else); each key at most once and spelled exactly so, with nothing after
// the object. schema_version must be 1; tools entries are scope entries,
// and an empty list allows nothing;
// jobs_reach_user_manager and admin are true or false. On failure it
// returns a ceiling that denies everything together with the error.
func DecodeCeiling(data []byte) (*Ceiling, error) {
	// The raw fields: absent stays nil, so a missing key is told apart
	// from a null one.
	var fields struct {
		SchemaVersion        json.RawMessage `json:"schema_version"`
		Tools                json.RawMessage `json:"tools"`
		JobsReachUserManager json.RawMessage `json:"jobs_reach_user_manager"`
		Admin                json.RawMessage `json:"admin"`
	}
	if err := strictjson.Decode(data, &fields, limits.MaxPermissionsBytes, strictjson.ExactKeys); err != nil {
		return refuseCeiling(ceilingDecodeError(err))
	}
	if fields.SchemaVersion == nil {
		return refuseCeiling(invalidCeiling("schema_version is missing", nil))
	}
	var version *int
	if err := json.Unmarshal(fields.SchemaVersion, &version); err != nil || version == nil || *version != ceilingSchema {
		return refuseCeiling(invalidCeiling(fmt.Sprintf("schema_version must be %d", ceilingSchema), err))
	}
	tools := &[]string{AllTools}
	if fields.Tools != nil {
		if err := json.Unmarshal(fields.Tools, &tools); err != nil || tools == nil {
			return refuseCeiling(invalidCeiling("tools must be a list of tool names or patterns", err))
		}
	}
	for i, t := range *tools {
		if !ValidScope(t) {
			// The position only: a pattern from the owner's file stays local.
			return refuseCeiling(invalidCeiling(fmt.Sprintf("tools entry %d is not a valid name or pattern", i+1), nil))
		}
	}
	reach, err := optionalBool(fields.JobsReachUserManager, "jobs_reach_user_manager")
	if err != nil {
		return refuseCeiling(err)
	}
	admin, err := optionalBool(fields.Admin, "admin")
	if err != nil {
		return refuseCeiling(err)
	}
	return &Ceiling{present: true, tools: *tools, cutOff: !reach, refuseAdmins: !admin}, nil
}

// optionalBool decodes the optional boolean key of the document whose raw
// value is raw: true when absent, else true or false and nothing else
// (null included), since a typo must not pass for the default.
func optionalBool(raw json.RawMessage, key string) (bool, error) {
	if raw == nil {
		return true, nil
	}
	var v *bool
	if err := json.Unmarshal(raw, &v); err != nil || v == nil {
		return false, invalidCeiling(key+" must be true or false", err)
	}
	return *v, nil
}

// ceilingDecodeError names what is wrong with the document; a field's name
// stays local, since the message reaches remote clients.
func ceilingDecodeError(err error) error {
	var field *strictjson.FieldError
	switch {
	case errors.Is(err, strictjson.ErrTooLarge):
		return invalidCeiling(fmt.Sprintf("it is larger than %d bytes", limits.MaxPermissionsBytes), nil)
	case errors.Is(err, strictjson.ErrNotObject), errors.Is(err, io.EOF):
		return invalidCeiling("it is not a JSON object", err)
	case errors.As(err, &field) && field.Repeated:
		return invalidCeiling("it has a duplicate field", nil)
	case errors.As(err, &field):
		return invalidCeiling("it has an unknown field", nil)
	case errors.Is(err, strictjson.ErrTrailing):
		return invalidCeiling("it has trailing data", err)
	}
	return invalidCeiling("it is malformed JSON", err)
}

// invalidCeiling builds the content-free error of a present but unusable
// ceiling, keeping cause for local diagnosis only.
func invalidCeiling(reason string, cause error) error {
	return errcode.Wrap(errcode.PermissionDenied, cause, "the local permission ceiling is invalid: %s", reason)
}

func refuseCeiling(err error) (*Ceiling, error) {
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

// JobsReachUserManager reports whether the jobs and process.run commands
// started under the ceiling may reach the user manager: false only when a
// valid ceiling says so, since false claims a cut that only the owner's
// valid file establishes (an invalid one runs nothing at all).
func (c *Ceiling) JobsReachUserManager() bool {
	return c == nil || c.err != nil || !c.cutOff
}

// JobsCutOff returns the owner's word on the jobs and process.run
// commands started next: whether the ceiling in configDir keeps them off
// the user manager. It reads the file afresh at each call, as the gate
// does, so an owner's edit takes effect at the next launch; an invalid
// ceiling is its error.
func JobsCutOff(configDir string) func() (bool, error) {
	return func() (bool, error) {
		c, err := LoadCeiling(configDir)
		if err != nil {
			return false, err
		}
		return !c.JobsReachUserManager(), nil
	}
}

// AdminsAllowed reports whether grants naming an admin principal (the
// relay's web panel) may act here: without a file, or unless a valid one
// says "admin": false. A nil, zero or invalid ceiling allows no one.
func (c *Ceiling) AdminsAllowed() bool {
	return c != nil && c.err == nil && (c.allowAll || c.present && !c.refuseAdmins)
}

// Allows reports whether tool may run under the ceiling.
func (c *Ceiling) Allows(tool string) bool {
	if c == nil || c.err != nil {
		return false
	}
	return c.allowAll || MatchScope(c.tools, tool)
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
