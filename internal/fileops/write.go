package fileops

import (
	"encoding/base64"
	"errors"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/atomicfile"
	"github.com/commandcore/commandcore/internal/eintr"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/owndirs"
	"github.com/commandcore/commandcore/internal/textenc"
)

// The modes of files.write.
const (
	ModeCreate    = "create"
	ModeOverwrite = "overwrite"
	ModeAppend    = "append"
)

// WriteRequest is the input of files.write.
type WriteRequest struct {
	Path           string `json:"path" jsonschema:"absolute path of the file"`
	Content        string `json:"content" jsonschema:"what to write, at most 8 MiB once decoded"`
	Encoding       string `json:"encoding,omitempty" jsonschema:"encoding of content: utf-8 (default) or base64"`
	Mode           string `json:"mode,omitempty" jsonschema:"create (default; already_exists when the file exists), overwrite (create or replace), or append"`
	ExpectedSHA256 string `json:"expected_sha256,omitempty" jsonschema:"refuse with conflict unless the file exists and its content has this SHA-256 (hex)"`
	MakeDirs       bool   `json:"make_dirs,omitempty" jsonschema:"create missing parent directories"`
}

// WriteResult is the output of files.write.
type WriteResult struct {
	BytesWritten int64 `json:"bytes_written"`
	// Size and SHA256 are of the whole file after the write; an appended
	// file larger than FileHashMaxBytes is not hashed: SHA256 is null and
	// SHA256Skipped says why.
	Size          int64   `json:"size"`
	SHA256        *string `json:"sha256"`
	SHA256Skipped string  `json:"sha256_skipped,omitempty"`
}

// Validate checks the request without touching the file system and
// returns the decoded content and the normalised expected hash.
func (r *WriteRequest) Validate() ([]byte, string, error) {
	if err := checkPath(r.Path); err != nil {
		return nil, "", err
	}
	switch r.Mode {
	case "", ModeCreate, ModeOverwrite, ModeAppend:
	default:
		return nil, "", invalid("mode must be create, overwrite or append")
	}
	want, err := checkSHA(r.ExpectedSHA256)
	if err != nil {
		return nil, "", err
	}
	if want != "" && (r.Mode == "" || r.Mode == ModeCreate) {
		return nil, "", invalid("expected_sha256 names an existing file's content, which create refuses; use overwrite")
	}
	data, err := decodeContent(r.Content, r.Encoding)
	if err != nil {
		return nil, "", err
	}
	return data, want, nil
}

// decodeContent decodes content in encoding, bounded by FileWriteMax.
func decodeContent(content, encoding string) ([]byte, error) {
	switch encoding {
	case "", textenc.UTF8:
		if len(content) > limits.FileWriteMax {
			return nil, invalid("content must be at most %d bytes", limits.FileWriteMax)
		}
		return []byte(content), nil
	case textenc.Base64:
		if base64.StdEncoding.DecodedLen(len(content)) > limits.FileWriteMax+2 {
			return nil, invalid("content must be at most %d bytes once decoded", limits.FileWriteMax)
		}
		data, err := base64.StdEncoding.DecodeString(content)
		if err != nil {
			return nil, invalid("content is not valid base64")
		}
		if len(data) > limits.FileWriteMax {
			return nil, invalid("content must be at most %d bytes once decoded", limits.FileWriteMax)
		}
		return data, nil
	}
	return nil, invalid("encoding must be utf-8 or base64")
}

// Write carries out a files.write.
func Write(own *owndirs.Set, req WriteRequest) (*WriteResult, error) {
	data, want, err := req.Validate()
	if err != nil {
		return nil, err
	}
	// Each missing directory is created only once the one it goes in has
	// been judged.
	t, err := openTarget(own, req.Path, req.MakeDirs)
	if err != nil {
		return nil, err
	}
	defer t.close()
	if req.Mode == ModeAppend {
		return appendTo(t, data, want)
	}
	return replace(t, data, want, req.Mode == ModeOverwrite)
}

// replace writes data as the whole file, atomically.
func replace(t *target, data []byte, want string, overwrite bool) (*WriteResult, error) {
	st, exists, err := t.lstat()
	if err != nil {
		return nil, err
	}
	opts := atomicfile.Options{Exclusive: !overwrite}
	switch {
	case exists && !overwrite:
		return nil, errAlreadyExists
	case exists:
		if err := kindError(st.Mode); err != nil {
			return nil, err
		}
		if want != "" {
			if err := t.checkContent(st, want); err != nil {
				return nil, err
			}
		}
		like, err := t.openLike(st)
		if err != nil {
			return nil, err
		}
		defer like.Close()
		opts.Like = like
	case want != "":
		return nil, ErrConflict
	}
	if err := writeAtomic(t, data, opts); err != nil {
		return nil, err
	}
	digest := sum(data)
	return &WriteResult{BytesWritten: int64(len(data)), Size: int64(len(data)), SHA256: &digest}, nil
}

var errAlreadyExists = errcode.New(errcode.AlreadyExists, "the file exists; mode overwrite replaces it")

// openLike opens the existing file st, without reading it, for its
// replacement to keep its owner, mode and extended attributes.
func (t *target) openLike(st unix.Stat_t) (*os.File, error) {
	f, _, err := t.openSame(st, unix.O_PATH)
	return f, err
}

// writeAtomic replaces the target with data through atomicfile.
func writeAtomic(t *target, data []byte, opts atomicfile.Options) error {
	err := atomicfile.WriteAt(t.dir, t.name, data, opts)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrExist):
		return errAlreadyExists
	case errors.Is(err, atomicfile.ErrAttributes):
		return errcode.Wrap(errcode.PermissionDenied, err, "the file has extended attributes (or an ACL) the agent cannot give a new file, so it cannot be replaced keeping them")
	case opts.Like != nil && (errors.Is(err, unix.EPERM) || errors.Is(err, unix.EINVAL)):
		return errcode.Wrap(errcode.PermissionDenied, err, "the file belongs to a user or group the agent cannot give a file to, so it cannot be replaced keeping its owner")
	}
	return fsError(err, "write")
}

// errTooLargeToCheck refuses expected_sha256 for a file no call hashes.
var errTooLargeToCheck = invalid("the file is larger than the %d bytes a call hashes, so expected_sha256 cannot be checked", limits.FileHashMaxBytes)

// checkContent refuses with conflict unless the file st has content want.
func (t *target) checkContent(st unix.Stat_t, want string) error {
	if st.Size > limits.FileHashMaxBytes {
		return errTooLargeToCheck
	}
	f, err := t.openRegular(st, unix.O_RDONLY)
	if err != nil {
		return err
	}
	defer f.Close()
	got, _, err := hashFrom(f)
	if err != nil {
		return fsError(err, "read")
	}
	if got != want {
		return ErrConflict
	}
	return nil
}

// appendTo adds data to the end of the file in place, creating it if
// missing (with the mode the umask leaves of 0666).
func appendTo(t *target, data []byte, want string) (*WriteResult, error) {
	st, exists, err := t.lstat()
	if err != nil {
		return nil, err
	}
	if !exists && want != "" {
		return nil, ErrConflict
	}
	var f *os.File
	if exists {
		f, err = t.openRegular(st, unix.O_RDWR|unix.O_APPEND)
	} else {
		// O_EXCL: a file that appeared meanwhile is not one this call examined.
		var fd int
		fd, err = eintr.Openat(t.dfd(), t.name, unix.O_RDWR|unix.O_APPEND|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o666)
		if errors.Is(err, unix.EEXIST) {
			return nil, errcode.New(errcode.Conflict, "the file was created while this call wrote it; try again")
		}
		if err != nil {
			return nil, fsError(err, "create")
		}
		f = os.NewFile(uintptr(fd), t.name)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if want != "" {
		if st.Size > limits.FileHashMaxBytes {
			return nil, errTooLargeToCheck
		}
		got, _, err := hashFrom(f)
		if err != nil {
			return nil, fsError(err, "read")
		}
		if got != want {
			return nil, ErrConflict
		}
	}
	if _, err := f.Write(data); err != nil {
		return nil, fsError(err, "write")
	}
	if err := f.Sync(); err != nil {
		return nil, fsError(err, "write")
	}
	var after unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &after); err != nil {
		return nil, fsError(err, "examine")
	}
	res := &WriteResult{BytesWritten: int64(len(data)), Size: after.Size}
	if after.Size > limits.FileHashMaxBytes {
		res.SHA256Skipped = hashSkipped
		return res, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fsError(err, "read")
	}
	sha, size, err := hashFrom(io.LimitReader(f, limits.FileHashMaxBytes+1))
	if err != nil {
		return nil, fsError(err, "read")
	}
	if size > limits.FileHashMaxBytes {
		// Another writer grew it meanwhile.
		res.Size, res.SHA256Skipped = size, hashSkipped
		return res, nil
	}
	res.Size, res.SHA256 = size, &sha
	return res, nil
}
