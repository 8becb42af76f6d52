package fileops

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/eintr"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/owndirs"
	"github.com/commandcore/commandcore/internal/toolpath"
)

// ListRequest is the input of files.list.
type ListRequest struct {
	Path        string   `json:"path" jsonschema:"absolute path of the directory"`
	Depth       int      `json:"depth,omitempty" jsonschema:"levels to list, 1-10, default 1 (the directory's own entries)"`
	MaxEntries  int      `json:"max_entries,omitempty" jsonschema:"at most this many entries, 1-10000, default 200"`
	ExcludeDirs []string `json:"exclude_dirs,omitempty" jsonschema:"exact directory base names neither listed nor entered, e.g. .git"`
}

// Entry is one listed file system entry.
type Entry struct {
	// Path is the absolute path, under the path the request gave. Bytes
	// that are not valid UTF-8 are replaced by U+FFFD; PathBase64 then
	// carries the exact bytes.
	Path       string `json:"path"`
	PathBase64 string `json:"path_base64,omitempty"`
	// Type is file, dir, symlink, fifo, socket, char_device or block_device.
	Type string `json:"type"`
	Size int64  `json:"size"`
	// Mode is the permission bits in octal, e.g. "0644".
	Mode  string    `json:"mode"`
	MTime time.Time `json:"mtime"`
	// Target is a symlink's target, which is not followed.
	Target string `json:"target,omitempty"`
}

// ListResult is the output of files.list.
type ListResult struct {
	Entries []Entry `json:"entries"`
	// Truncated: more entries exist than max_entries.
	Truncated bool `json:"truncated"`
	// Unreadable counts directories within depth that could not be listed.
	Unreadable int `json:"unreadable,omitempty"`
}

// Validate checks the request without touching the file system.
func (r *ListRequest) Validate() error {
	if err := checkPath(r.Path); err != nil {
		return err
	}
	switch {
	case r.Depth < 0 || r.Depth > limits.FileListDepthMax:
		return invalid("depth must be between 1 and %d", limits.FileListDepthMax)
	case r.MaxEntries < 0 || r.MaxEntries > limits.FileListEntriesMax:
		return invalid("max_entries must be between 1 and %d", limits.FileListEntriesMax)
	case len(r.ExcludeDirs) > limits.FileListMaxExcludeDirs:
		return invalid("exclude_dirs must have at most %d entries", limits.FileListMaxExcludeDirs)
	}
	for _, d := range r.ExcludeDirs {
		if d == "" || d == "." || d == ".." || strings.ContainsAny(d, "/\x00") {
			return invalid("exclude_dirs entries must be directory base names (non-empty, no '/', not '.' or '..')")
		}
	}
	return nil
}

// List lists a directory depth-first, each directory's entries in byte
// order of their names. Symlinks are listed, never followed (the path
// itself may be one, resolved once); the agent's own directories are
// neither listed nor entered.
func List(ctx context.Context, own *owndirs.Set, req ListRequest) (*ListResult, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	dir, err := toolpath.Dir(own, req.Path)
	if errors.Is(err, toolpath.ErrNotDirectory) {
		return nil, invalid("the path is not a directory")
	}
	if err != nil {
		return nil, fsError(err, "list")
	}
	defer dir.Close()
	fd := int(dir.Fd())
	l := &lister{ctx: ctx, own: own, depth: req.Depth, max: req.MaxEntries, res: &ListResult{Entries: []Entry{}}}
	if l.depth == 0 {
		l.depth = limits.FileListDepthDefault
	}
	if l.max == 0 {
		l.max = limits.FileListEntriesDefault
	}
	l.exclude = make(map[string]bool, len(req.ExcludeDirs))
	for _, d := range req.ExcludeDirs {
		l.exclude[d] = true
	}
	if err := l.dir(fd, filepath.Clean(req.Path), 1); err != nil && !errors.Is(err, errFull) {
		return nil, err
	}
	return l.res, nil
}

type lister struct {
	ctx     context.Context
	own     *owndirs.Set
	depth   int
	max     int
	exclude map[string]bool
	res     *ListResult
}

// errFull stops the walk once max entries are listed and one more exists.
var errFull = errors.New("list full")

// dir lists the directory open as fd, at path, whose entries are at level.
func (l *lister) dir(fd int, path string, level int) error {
	if err := l.ctx.Err(); err != nil {
		return err
	}
	names, err := readNames(fd)
	if err != nil {
		if level == 1 {
			return fsError(err, "list")
		}
		l.res.Unreadable++
		return nil
	}
	slices.Sort(names)
	for _, name := range names {
		var st unix.Stat_t
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue // gone since it was listed
		}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		if isDir && l.exclude[name] {
			continue
		}
		// A process's directory under /proc is listed, never entered.
		enter := isDir && level < l.depth && !toolpath.IsPerProcess(fd, name)
		sub := -1
		if isDir {
			// Opened to be recognised (and entered): by its identity, not
			// its name, an own directory is neither listed nor entered.
			flags := unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
			if enter {
				flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
			}
			if s, err := eintr.Openat(fd, name, flags, 0); err == nil {
				sub = s
			}
		}
		err := l.add(fd, sub, path, name, st, enter, level)
		if sub >= 0 {
			unix.Close(sub)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// add lists one entry of the directory fd, and enters it when it is a
// directory within depth, open as sub (-1 when it could not be opened).
func (l *lister) add(fd, sub int, path, name string, st unix.Stat_t, enter bool, level int) error {
	if sub >= 0 && l.own.IsOwn(sub) {
		return nil
	}
	if len(l.res.Entries) == l.max {
		l.res.Truncated = true
		return errFull
	}
	full := filepath.Join(path, name)
	l.res.Entries = append(l.res.Entries, entry(fd, full, name, st))
	switch {
	case !enter:
		return nil
	case sub < 0:
		l.res.Unreadable++
		return nil
	}
	return l.dir(sub, full, level+1)
}

func readNames(fd int) ([]string, error) {
	ents, err := toolpath.ReadDir(fd)
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, err
}

func entry(dirfd int, full, name string, st unix.Stat_t) Entry {
	e := Entry{
		Path:  full,
		Type:  typeName(st.Mode),
		Size:  st.Size,
		Mode:  fmt.Sprintf("%04o", st.Mode&0o7777),
		MTime: mtime(st),
	}
	if !utf8.ValidString(full) {
		e.Path = strings.ToValidUTF8(full, "\uFFFD")
		e.PathBase64 = base64.StdEncoding.EncodeToString([]byte(full))
	}
	if e.Type == "symlink" {
		buf := make([]byte, unix.PathMax)
		if n, err := unix.Readlinkat(dirfd, name, buf); err == nil {
			e.Target = strings.ToValidUTF8(string(buf[:n]), "\uFFFD")
		}
	}
	return e
}

func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "char_device"
	case unix.S_IFBLK:
		return "block_device"
	}
	return "other"
}
