// Package downloads serves, without a token, what a device needs to
// install the agent from its relay: /install.sh with the relay's URL in it,
// the binaries at /download/NAME, and /download/SHA256SUMS over them. The
// enrollment code the script is run with is the credential; nothing here
// needs one.
//
// What is served is fixed when the relay starts: its own binary for its
// own architecture, opened then (so a binary replaced on disk later does
// not change what is served), and the files a release directory's
// SHA256SUMS names (make release's layout), opened then too and served
// with the sums that file gives: the script on the device checks them.
package downloads

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/commandcore/commandcore/internal/limits"
)

// The paths served.
const (
	// ScriptPath is the install script.
	ScriptPath = "/install.sh"
	// FilePrefix is where the files are, each under its name.
	FilePrefix = "/download/"
	// SumsName is the checksum list's name under FilePrefix.
	SumsName = "SHA256SUMS"
)

// BinaryName is the name the agent's binary for arch (Go's spelling) is
// served under.
func BinaryName(arch string) string { return "commandcore-linux-" + arch }

// Config is what the relay serves.
type Config struct {
	// PublicURL is the relay as devices reach it: the script downloads
	// from it and enrolls with it.
	PublicURL string
	// Dir, when set, holds a release: the files its SHA256SUMS names.
	Dir string
	// Self is the relay's own binary, served (by a relay on Linux) as
	// BinaryName(runtime.GOARCH) unless Dir has a file of that name; ""
	// means os.Executable.
	Self string
}

// Server serves the downloads; Close closes the files it holds.
type Server struct {
	script []byte
	// files are open from New on; self is among them unless Dir has a
	// file of its name, and its sum is known once hashed.
	files    map[string]*file
	self     *file
	selfName string

	once sync.Once
	sums []byte
	err  error
}

// file is one file served: open, of a size known at open.
type file struct {
	f    *os.File
	size int64
	sum  [32]byte
}

// New opens what cfg names. A directory without a valid SHA256SUMS, or
// naming a file it lacks or one that is not a regular file, is refused.
func New(cfg Config) (*Server, error) {
	script, err := Script(cfg.PublicURL)
	if err != nil {
		return nil, err
	}
	s := &Server{script: script, files: map[string]*file{}, selfName: BinaryName(runtime.GOARCH)}
	if cfg.Dir != "" {
		if err := s.openDir(cfg.Dir); err != nil {
			s.Close()
			return nil, fmt.Errorf("downloads %s: %w", cfg.Dir, err)
		}
	}
	// Only a Linux relay's own binary is an agent a device can run.
	if _, ok := s.files[s.selfName]; !ok && runtime.GOOS == "linux" {
		if len(s.files) == limits.DownloadsMaxFiles {
			s.Close()
			return nil, fmt.Errorf("downloads %s: more than %d files with the relay's own", cfg.Dir, limits.DownloadsMaxFiles)
		}
		self := cfg.Self
		if self == "" {
			if self, err = os.Executable(); err != nil {
				s.Close()
				return nil, fmt.Errorf("the relay's own binary: %w", err)
			}
		}
		f, err := openRegular(os.Open(self))
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("the relay's own binary: %w", err)
		}
		s.self = f
		s.files[s.selfName] = f
	}
	return s, nil
}

// openDir opens the files dir's SHA256SUMS names, with their sums.
func (s *Server) openDir(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	sf, err := root.Open(SumsName)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(sf, limits.DownloadsMaxSumsBytes+1))
	sf.Close()
	if err != nil {
		return err
	}
	sums, err := ParseSums(data)
	if err != nil {
		return err
	}
	for _, sum := range sums {
		if sum.Name == SumsName {
			return fmt.Errorf("%s names itself", SumsName)
		}
		f, err := openRegular(root.Open(sum.Name))
		if err != nil {
			return err
		}
		f.sum = sum.SHA256
		s.files[sum.Name] = f
	}
	return nil
}

// openRegular keeps f if it is a regular file.
func openRegular(f *os.File, err error) (*file, error) {
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file", fi.Name())
	}
	return &file{f: f, size: fi.Size()}, nil
}

// Close closes the files.
func (s *Server) Close() error {
	for _, f := range s.files {
		f.f.Close()
	}
	return nil
}

// Sums is the SHA256SUMS served: every file's, the relay's own binary's
// hashed on first need (once: the file open is the one served).
func (s *Server) Sums() ([]byte, error) {
	s.once.Do(func() {
		if s.self != nil {
			h := sha256.New()
			if _, err := io.Copy(h, io.NewSectionReader(s.self.f, 0, s.self.size)); err != nil {
				s.err = fmt.Errorf("hash the relay's own binary: %w", err)
				return
			}
			h.Sum(s.self.sum[:0])
		}
		sums := make([]Sum, 0, len(s.files))
		for name, f := range s.files {
			sums = append(sums, Sum{Name: name, SHA256: f.sum})
		}
		slices.SortFunc(sums, func(a, b Sum) int { return strings.Compare(a.Name, b.Name) })
		s.sums = FormatSums(sums)
	})
	return s.sums, s.err
}

// ServeHTTP answers GET and HEAD of ScriptPath and of FilePrefix+NAME.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-cache")
	if r.URL.Path == ScriptPath {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(s.script))
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, FilePrefix)
	if !ok || (name != SumsName && s.files[name] == nil) {
		http.Error(w, "no such download", http.StatusNotFound)
		return
	}
	sums, err := s.Sums()
	if err != nil {
		http.Error(w, "downloads unavailable", http.StatusInternalServerError)
		return
	}
	if name == SumsName {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(sums))
		return
	}
	f := s.files[name]
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("ETag", fmt.Sprintf(`"%x"`, f.sum))
	http.ServeContent(w, r, "", time.Time{}, io.NewSectionReader(f.f, 0, f.size))
}
