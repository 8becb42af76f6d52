// Package search implements files.search (docs/tools.md): a literal file
// name and/or line search under a root directory, bounded in results, file
// size, time and memory.
//
// Semantics, in one place:
//
//   - name is a literal substring of a regular file's base name; text is a
//     literal substring of one line of a file's contents. Neither is a glob
//     or a regular expression. With both, a file must match the name and its
//     lines must contain the text. With name only, a file matches once (line
//     0, omitted). With text, each matching line is one match.
//   - Only regular files are candidates. Directories are descended, except
//     those whose base name is listed in exclude_dirs (exact byte equality;
//     an excluded directory is neither listed nor counted). Symbolic links
//     are never followed — neither to files nor to directories — so a symlink
//     loop cannot make the walk revisit anything, and the search never leaves
//     the root's tree through a link. The root itself may be a symlink to a
//     directory: it is resolved once, like a command-line argument of grep.
//   - The agent's own directories (package owndirs) are skipped wherever
//     they appear, recognised by device and inode, and so are hard links to
//     their files and the process directories of /proc; a root inside any
//     of them is refused with permission_denied.
//   - Below the root, every directory and file is opened by name in the
//     directory it was listed in, never by its path afresh, so a directory
//     swapped for a symlink mid-walk leads nowhere.
//   - FIFOs, sockets and devices are never opened. Files are opened with
//     O_NOFOLLOW|O_NONBLOCK and checked to be regular with fstat, so a file
//     swapped for a FIFO or a link between listing and opening cannot hang
//     or redirect the search.
//   - A file is binary, and skipped (counted), when its first 8 KiB contain a
//     NUL byte, like grep and ripgrep. Files larger than max_file_bytes are
//     not read for text (counted); they still match by name alone.
//   - Permission errors on directories and files are counted, not fatal.
//     Note that root (CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH) bypasses
//     permission bits, so an agent running as root sees no such errors.
//   - Output order is deterministic: matches are sorted by path, comparing
//     directory components in order (the order of a depth-first walk that
//     visits each directory's entries in byte order), then by line. When
//     more than max_results matches exist, the result is exactly the first
//     max_results of that order and truncated is true; truncated is false
//     when every match is returned. The walk itself is parallel; once the
//     result is known to be truncated, files and directories that sort after
//     the current last kept match are pruned, so a truncated search is
//     cheaper than a complete one. The counters describe the work actually
//     done, so they may differ between runs of a truncated or timed-out
//     search.
//   - The deadline (timeout_ms) yields partial results with timed_out true.
//     A cancelled caller context yields its error. A blocking file system
//     call (e.g. a hung network mount) cannot be interrupted; the search
//     returns once it completes.
package search

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/eintr"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/owndirs"
	"github.com/commandcore/commandcore/internal/toolpath"
)

// Bounds and defaults of a search request.
const (
	DefaultMaxFileBytes int64 = 10 << 20
	MaxMaxFileBytes     int64 = 1 << 30
	// DefaultMaxResults keeps the result's text under
	// limits.MaxToolTextChars with every line at MaxLineBytes.
	DefaultMaxResults = 100
	MaxMaxResults     = 10000
	DefaultTimeout    = 10 * time.Second
	MaxTimeout        = 60 * time.Second
	// MaxNameBytes bounds name (a base name is at most 255 bytes on Linux).
	MaxNameBytes = 255
	// MaxTextBytes bounds text.
	MaxTextBytes = 4096
	// MaxExcludeDirs bounds the number of exclude_dirs entries.
	MaxExcludeDirs = 256
	// MaxLineBytes bounds a match's text. A longer line is cut to a window
	// around the match and marked text_truncated.
	MaxLineBytes = 512
	// BinaryProbeBytes is how much of a file's start is checked for NUL.
	BinaryProbeBytes = 8 << 10
)

// Errors about the root that Search returns after Validate passed. They are
// *errcode.Error values with content-free messages; compare with errors.Is.
var (
	// ErrRootNotFound: root (or one of its parents) does not exist.
	ErrRootNotFound = errcode.New(errcode.NotFound, "root does not exist")
	// ErrRootNotDirectory: root exists but is not a directory.
	ErrRootNotDirectory = errcode.New(errcode.InvalidArgument, "root is not a directory")
	// ErrRootPermission: root cannot be examined or listed.
	ErrRootPermission = errcode.New(errcode.PermissionDenied, "root cannot be read")
)

// Request is the input of files.search.
type Request struct {
	Root         string   `json:"root" jsonschema:"absolute path of the directory to search under"`
	Name         string   `json:"name,omitempty" jsonschema:"literal substring of a regular file's base name (no glob)"`
	Text         string   `json:"text,omitempty" jsonschema:"literal substring of a line of a file's contents (no regex)"`
	ExcludeDirs  []string `json:"exclude_dirs,omitempty" jsonschema:"exact directory base names to skip entirely, e.g. .git"`
	MaxFileBytes int64    `json:"max_file_bytes,omitempty" jsonschema:"files larger than this are not read for text; default 10485760, at most 1073741824"`
	MaxResults   int      `json:"max_results,omitempty" jsonschema:"at most this many matches, 1-10000, default 100"`
	TimeoutMS    int      `json:"timeout_ms,omitempty" jsonschema:"deadline in milliseconds, 1-60000, default 10000; partial results when it expires"`
}

// Match is one matching file (name-only search) or line.
type Match struct {
	// Path is the absolute path. Bytes that are not valid UTF-8 are replaced
	// by U+FFFD; PathBase64 then carries the exact bytes.
	Path       string `json:"path"`
	PathBase64 string `json:"path_base64,omitempty"`
	// Line is 1-based; 0 (omitted) for a name-only match.
	Line int `json:"line,omitempty"`
	// Text is the matching line without its line ending, valid UTF-8
	// (invalid bytes replaced by U+FFFD), at most MaxLineBytes bytes.
	Text string `json:"text,omitempty"`
	// TextTruncated: Text is a window of a longer line around the match.
	TextTruncated bool `json:"text_truncated,omitempty"`
}

// Result is the output of files.search.
type Result struct {
	Matches []Match `json:"matches"`
	// Truncated: more than max_results matches exist; Matches holds the
	// first max_results in order.
	Truncated bool `json:"truncated"`
	// TimedOut: the deadline expired; Matches are partial.
	TimedOut bool `json:"timed_out"`
	// FilesScanned counts regular files examined (name tested and/or read).
	FilesScanned int64 `json:"files_scanned"`
	// DirsScanned counts directories listed, the root included.
	DirsScanned int64 `json:"dirs_scanned"`
	// SkippedBinary counts files not searched because they look binary.
	SkippedBinary int64 `json:"skipped_binary"`
	// SkippedLarge counts files not read for text because of max_file_bytes.
	SkippedLarge int64 `json:"skipped_large"`
	// PermissionErrors counts directories and files that could not be opened
	// for lack of permission.
	PermissionErrors int64 `json:"permission_errors"`
	// OtherErrors counts other failures to list or read (e.g. an entry that
	// vanished during the walk, an over-long path, an I/O error).
	OtherErrors int64 `json:"other_errors"`
}

func invalid(msg string) error { return errcode.New(errcode.InvalidArgument, "%s", msg) }

// Validate checks the request without touching the file system. Its errors
// are invalid_argument errors that never quote the request's values.
func (r *Request) Validate() error {
	switch {
	case r.Root == "":
		return invalid("root is required")
	case strings.IndexByte(r.Root, 0) >= 0:
		return invalid("root must not contain NUL bytes")
	case !filepath.IsAbs(r.Root):
		return invalid("root must be an absolute path")
	case r.Name == "" && r.Text == "":
		return invalid("at least one of name and text is required")
	case len(r.Name) > MaxNameBytes:
		return errcode.New(errcode.InvalidArgument, "name must be at most %d bytes", MaxNameBytes)
	case strings.ContainsAny(r.Name, "/\x00"):
		return invalid("name is matched against base names and must not contain '/' or NUL")
	case len(r.Text) > MaxTextBytes:
		return errcode.New(errcode.InvalidArgument, "text must be at most %d bytes", MaxTextBytes)
	case strings.ContainsAny(r.Text, "\n"):
		return invalid("text is matched per line and must not contain a newline")
	case len(r.ExcludeDirs) > MaxExcludeDirs:
		return errcode.New(errcode.InvalidArgument, "exclude_dirs must have at most %d entries", MaxExcludeDirs)
	case r.MaxFileBytes < 0 || r.MaxFileBytes > MaxMaxFileBytes:
		return errcode.New(errcode.InvalidArgument, "max_file_bytes must be between 1 and %d", MaxMaxFileBytes)
	case r.MaxResults < 0 || r.MaxResults > MaxMaxResults:
		return errcode.New(errcode.InvalidArgument, "max_results must be between 1 and %d", MaxMaxResults)
	case r.TimeoutMS < 0 || int64(r.TimeoutMS) > MaxTimeout.Milliseconds():
		return errcode.New(errcode.InvalidArgument, "timeout_ms must be between 1 and %d", MaxTimeout.Milliseconds())
	}
	for _, d := range r.ExcludeDirs {
		if d == "" || d == "." || d == ".." || len(d) > MaxNameBytes || strings.ContainsAny(d, "/\x00") {
			return invalid("exclude_dirs entries must be directory base names (non-empty, no '/', not '.' or '..')")
		}
	}
	return nil
}

// Search runs a validated search. See the package documentation for the
// semantics. The directories in own (the agent's own) are skipped, and a
// root inside them is refused with permission_denied.
func Search(ctx context.Context, req Request, own *owndirs.Set) (*Result, error) {
	return search(ctx, req, defaultHooks(), func(s *searcher) { s.own = own })
}

// search is Search with replaceable hooks and an optional tuning step
// (tests use small buffers and fixed worker counts).
func search(ctx context.Context, req Request, h hooks, tune func(*searcher)) (*Result, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	s := newSearcher(req, h)
	if tune != nil {
		tune(s)
	}
	return s.run(ctx)
}

// hooks are the file system entry points, replaceable by tests to simulate
// failures that cannot be produced for real (e.g. EACCES as root). Below
// the root, a directory or file is opened by name in its parent, open as
// dirfd; path is its full path, for the tests.
type hooks struct {
	// openRoot resolves the root, which may be a symlink, once.
	openRoot func(own *owndirs.Set, path string) (*os.File, error)
	// openDir opens a directory without following a symlink.
	openDir func(dirfd int, name, path string) (int, error)
	// openFile opens a file for reading without following a symlink and
	// without blocking on a FIFO.
	openFile func(dirfd int, name, path string) (int, error)
}

func defaultHooks() hooks {
	return hooks{
		openRoot: toolpath.Dir,
		openDir: func(dirfd int, name, _ string) (int, error) {
			return eintr.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		},
		openFile: func(dirfd int, name, _ string) (int, error) {
			return eintr.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		},
	}
}

type searcher struct {
	root         string
	name         string
	text         []byte
	exclude      map[string]struct{}
	maxFileBytes int64
	maxResults   int
	timeout      time.Duration
	workers      int
	bufSize      int
	h            hooks
	own          *owndirs.Set
	links        *owndirs.Links

	ctx    context.Context
	col    collector
	rootFD int // the root, open for reading during the walk
}

// defaultBufSize is each worker's read buffer: large enough that most files
// are read with one system call, small enough to stay in cache.
const defaultBufSize = 128 << 10

// contextBefore is how much of a long line before the match Text shows.
const contextBefore = 128

func newSearcher(req Request, h hooks) *searcher {
	s := &searcher{
		root:         filepath.Clean(req.Root),
		name:         req.Name,
		maxFileBytes: req.MaxFileBytes,
		maxResults:   req.MaxResults,
		timeout:      time.Duration(req.TimeoutMS) * time.Millisecond,
		workers:      runtime.GOMAXPROCS(0),
		bufSize:      defaultBufSize,
		h:            h,
	}
	if req.Text != "" {
		s.text = []byte(req.Text)
	}
	if len(req.ExcludeDirs) > 0 {
		s.exclude = make(map[string]struct{}, len(req.ExcludeDirs))
		for _, d := range req.ExcludeDirs {
			s.exclude[d] = struct{}{}
		}
	}
	if s.maxFileBytes == 0 {
		s.maxFileBytes = DefaultMaxFileBytes
	}
	if s.maxResults == 0 {
		s.maxResults = DefaultMaxResults
	}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	return s
}

func (s *searcher) run(parent context.Context) (*Result, error) {
	if err := parent.Err(); err != nil {
		return nil, err
	}
	root, err := s.h.openRoot(s.own, s.root)
	if err != nil {
		return nil, rootOpenError(err)
	}
	// A descriptor of the walk's own, which it closes with the last task
	// found in the root.
	s.rootFD, err = unix.FcntlInt(root.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	root.Close()
	if err != nil {
		return nil, rootOpenError(err)
	}
	s.links = s.own.Links()
	// The buffer must hold a needle plus the context kept across a long line.
	s.bufSize = max(s.bufSize, 256, 2*(len(s.text)+contextBefore))
	s.workers = max(s.workers, 1)
	s.col.max = s.maxResults

	ctx, cancel := context.WithTimeout(parent, s.timeout)
	defer cancel()
	s.ctx = ctx

	var cnt counters
	incomplete := s.walk(ctx, &cnt)

	if incomplete && parent.Err() != nil && !errors.Is(parent.Err(), context.DeadlineExceeded) {
		return nil, parent.Err()
	}
	res := &Result{
		Truncated:        s.col.truncated,
		TimedOut:         incomplete,
		FilesScanned:     cnt.files,
		DirsScanned:      cnt.dirs,
		SkippedBinary:    cnt.binary,
		SkippedLarge:     cnt.large,
		PermissionErrors: cnt.perm,
		OtherErrors:      cnt.other,
	}
	ms := s.col.sorted()
	res.Matches = make([]Match, len(ms))
	for i, m := range ms {
		out := Match{Path: m.path, Line: m.line, Text: m.text, TextTruncated: m.textTrunc}
		if !utf8.ValidString(m.path) {
			out.Path = strings.ToValidUTF8(m.path, "\uFFFD")
			out.PathBase64 = base64.StdEncoding.EncodeToString([]byte(m.path))
		}
		res.Matches[i] = out
	}
	return res, nil
}

func isPermission(err error) bool {
	return errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)
}

// sortEntries orders directory entries by name (bytes).
func sortEntries(ents []os.DirEntry) {
	slices.SortFunc(ents, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
}
