package jobmeta

import (
	"errors"
	"fmt"
	"os"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/principal"
	"github.com/commandcore/commandcore/internal/strictjson"
	"github.com/commandcore/commandcore/internal/terminal"
	"github.com/commandcore/commandcore/internal/uuidtext"
)

// ErrCorrupt reports metadata that exists but cannot be trusted.
var ErrCorrupt = errors.New("corrupt metadata")

// ValidID reports whether s is a canonical job or device ID, a lowercase
// UUID; only such strings are ever joined into a path.
func ValidID(s string) bool { return uuidtext.Canonical(s) }

// Versioned is satisfied by every metadata file type: it names its schema
// and checks the fields a reader relies on.
type Versioned interface {
	schema() int
	validate() error
}

func (j *Job) schema() int         { return j.Schema }
func (i *Claim) schema() int       { return i.Schema }
func (r *Result) schema() int      { return r.Schema }
func (s *StopRequest) schema() int { return s.Schema }
func (r *ReadMark) schema() int    { return r.Schema }
func (r *Reconciled) schema() int  { return r.Schema }
func (s *Screen) schema() int      { return s.Schema }

func (j *Job) validate() error {
	if !ValidID(j.ID) {
		return errors.New("bad job id")
	}
	if j.FailureDomain != DomainSystemdUnit && j.FailureDomain != DomainSharedParentCgroup {
		return errors.New("bad failure domain")
	}
	if j.CreatedAt.IsZero() {
		return errors.New("no creation time")
	}
	if j.Owner != "" && j.Owner != string(principal.Local) && !principal.Valid(j.Owner) {
		return errors.New("bad owner")
	}
	if k := j.Idempotency; k != nil && (!sha256Hex(k.Key) || !sha256Hex(k.Request)) {
		return errors.New("bad idempotency digests")
	}
	if p := j.Supervisor; p != nil && (p.PID <= 0 || p.StartTicks == 0) {
		return errors.New("incomplete supervisor identity")
	}
	return nil
}

// sha256Hex reports whether s is a SHA-256 digest in lowercase hex.
func sha256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func (i *Claim) validate() error {
	if i.Supervisor.PID <= 0 || i.Supervisor.StartTicks == 0 || i.BootID == "" {
		return errors.New("incomplete identity")
	}
	if i.Child != nil && (i.Child.PID <= 0 || i.Child.StartTicks == 0) {
		return errors.New("incomplete child identity")
	}
	return nil
}

func (r *Result) validate() error {
	if r.CompletedAt.IsZero() {
		return errors.New("no completion time")
	}
	return nil
}

func (s *StopRequest) validate() error { return nil }
func (r *ReadMark) validate() error    { return nil }

func (s *Screen) validate() error {
	size := terminal.Size{Cols: s.Cols, Rows: s.Rows}
	if !size.Valid() || len(s.Lines) != s.Rows {
		return errors.New("bad screen size")
	}
	if s.Cursor.Row < 0 || s.Cursor.Row >= s.Rows || s.Cursor.Col < 0 || s.Cursor.Col > s.Cols {
		return errors.New("cursor off the screen")
	}
	if s.Offset < 0 {
		return errors.New("negative offset")
	}
	return nil
}

func (r *Reconciled) validate() error {
	if !r.State.Terminal() {
		return errors.New("reconciled state is not terminal")
	}
	return nil
}

// decodeRead decodes what a read of a metadata file returned.
func decodeRead[T any, P interface {
	*T
	Versioned
}](data []byte, err error) (*T, error) {
	if err != nil {
		return nil, readErr(err)
	}
	return Decode[T, P](data)
}

// readErr keeps a missing file missing; anything else is corrupt.
func readErr(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return err
	}
	return fmt.Errorf("%w: %v", ErrCorrupt, err)
}

// Decode decodes one metadata document. Unknown fields are tolerated, since
// a newer version may add fields; a schema this build does not know is not.
func Decode[T any, P interface {
	*T
	Versioned
}](data []byte) (*T, error) {
	v := new(T)
	if err := strictjson.Decode(data, v, limits.MaxMetadataBytes, strictjson.AllowUnknownFields); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if s := P(v).schema(); s < 1 || s > SchemaVersion {
		return nil, fmt.Errorf("%w: unknown schema %d", ErrCorrupt, s)
	}
	if err := P(v).validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return v, nil
}
