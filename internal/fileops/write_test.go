package fileops

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

func codeOf(err error) errcode.Code {
	if err == nil {
		return ""
	}
	return errcode.From(err).Code
}

func TestWriteModes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.txt")
	res, err := Write(nil, WriteRequest{Path: path, Content: "hello\n"})
	if err != nil || res.BytesWritten != 6 || res.Size != 6 || deref(res.SHA256) != hexSum("hello\n") {
		t.Fatalf("create: %+v %v", res, err)
	}
	if _, err := Write(nil, WriteRequest{Path: path, Content: "again"}); codeOf(err) != errcode.AlreadyExists {
		t.Fatalf("create over an existing file: %v, want already_exists", err)
	}
	if _, err := Write(nil, WriteRequest{Path: path, Content: "x", Mode: "overwrite", ExpectedSHA256: hexSum("stale")}); codeOf(err) != errcode.Conflict {
		t.Fatalf("stale expected_sha256: %v, want conflict", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "hello\n" {
		t.Fatalf("a refused write changed the file: %q", got)
	}
	// Upper-case hex is the same hash.
	res, err = Write(nil, WriteRequest{Path: path, Content: "world\n", Mode: "overwrite", ExpectedSHA256: strings.ToUpper(hexSum("hello\n"))})
	if err != nil || res.Size != 6 {
		t.Fatalf("overwrite: %+v %v", res, err)
	}
	res, err = Write(nil, WriteRequest{Path: path, Content: base64.StdEncoding.EncodeToString([]byte{0xff, '\n'}), Encoding: "base64", Mode: "append", ExpectedSHA256: hexSum("world\n")})
	if err != nil || res.BytesWritten != 2 || res.Size != 8 || deref(res.SHA256) != hexSum("world\n\xff\n") {
		t.Fatalf("append: %+v %v", res, err)
	}
	if got, _ := os.ReadFile(path); string(got) != "world\n\xff\n" {
		t.Fatalf("after append: %q", got)
	}
	if _, err := Write(nil, WriteRequest{Path: filepath.Join(dir, "new"), Mode: "overwrite", ExpectedSHA256: hexSum("")}); codeOf(err) != errcode.Conflict {
		t.Fatalf("expected_sha256 of a missing file: %v, want conflict", err)
	}
	deep := filepath.Join(dir, "a", "b", "c.txt")
	if _, err := Write(nil, WriteRequest{Path: deep, Content: "x"}); codeOf(err) != errcode.NotFound {
		t.Fatalf("missing directories without make_dirs: %v, want not_found", err)
	}
	if _, err := Write(nil, WriteRequest{Path: deep, Content: "x", MakeDirs: true}); err != nil {
		t.Fatalf("make_dirs: %v", err)
	}
	if _, err := Write(nil, WriteRequest{Path: filepath.Join(dir, "log"), Content: "1", Mode: "append"}); err != nil {
		t.Fatalf("append to a missing file: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 {
		t.Errorf("directory holds %v: a temporary file was left", entries)
	}
}

// TestOverwriteKeepsModeAndOwner: a script stays executable, and keeps
// its owner (as root, someone else's file stays theirs).
func TestOverwriteKeepsModeAndOwner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.sh")
	writeFile(t, path, "#!/bin/sh\necho old\n", 0o755)
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = 65534, 65534
		if err := os.Chown(path, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	for _, mode := range []string{"overwrite", "edit"} {
		var err error
		if mode == "edit" {
			_, err = EditFile(context.Background(), nil, EditRequest{Path: path, Edits: []Edit{{OldText: "new", NewText: "newer"}}})
		} else {
			_, err = Write(nil, WriteRequest{Path: path, Content: "#!/bin/sh\necho new\n", Mode: mode})
		}
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm() != 0o755 || int(st.Uid) != uid || int(st.Gid) != gid {
			t.Errorf("after %s: mode %v owner %d:%d, want 0755 %d:%d", mode, fi.Mode().Perm(), st.Uid, st.Gid, uid, gid)
		}
	}
}

// TestWriteThroughASymlink replaces the file the link names and keeps the
// link.
func TestWriteThroughASymlink(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	writeFile(t, real, "old", 0o600)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(nil, WriteRequest{Path: link, Content: "new", Mode: "overwrite"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(real); string(got) != "new" {
		t.Fatalf("the link's file holds %q", got)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link is gone: %v %v", fi, err)
	}
}

func TestWriteRefusesWhatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"overwrite", "append"} {
		for _, p := range []string{fifo, dir, "/dev/null"} {
			if _, err := Write(nil, WriteRequest{Path: p, Content: "x", Mode: mode}); codeOf(err) != errcode.InvalidArgument {
				t.Errorf("%s %s: %v, want invalid_argument", mode, p, err)
			}
		}
	}
}

func TestWriteValidates(t *testing.T) {
	big := strings.Repeat("x", 8<<20+1)
	for _, r := range []WriteRequest{
		{Content: "x"},
		{Path: "rel", Content: "x"},
		{Path: "/f", Mode: "truncate"},
		{Path: "/f", Encoding: "latin1"},
		{Path: "/f", Encoding: "base64", Content: "not base64!"},
		{Path: "/f", Content: big},
		{Path: "/f", Encoding: "base64", Content: base64.StdEncoding.EncodeToString([]byte(big))},
		{Path: "/f", Mode: "overwrite", ExpectedSHA256: "abc"},
		{Path: "/f", ExpectedSHA256: hexSum("")},
	} {
		if _, _, err := r.Validate(); codeOf(err) != errcode.InvalidArgument {
			t.Errorf("%.60v: %v, want invalid_argument", r, err)
		}
	}
	if _, _, err := (&WriteRequest{Path: "/f", Content: big[1:]}).Validate(); err != nil {
		t.Errorf("8 MiB of content: %v", err)
	}
}

// TestOverwriteIsAtomic: a reader polling the file during 200 overwrites
// of 4 MiB only ever sees one of the versions written, whole.
func TestOverwriteIsAtomic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big")
	const versions = 40
	sums := map[string]bool{}
	content := func(i int) string {
		return strings.Repeat(string(rune('a'+i%26)), 4<<20-8) + fmt.Sprintf("%08d", i)
	}
	for i := range versions {
		sums[hexSum(content(i))] = true
	}
	if _, err := Write(nil, WriteRequest{Path: path, Content: content(0)}); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var reads, torn atomic.Int64
	wg.Go(func() {
		for !stop.Load() {
			r, err := Read(context.Background(), nil, ReadRequest{Path: path, MaxBytes: 1})
			if err != nil {
				t.Error(err)
				return
			}
			reads.Add(1)
			if !sums[deref(r.SHA256)] {
				torn.Add(1)
			}
		}
	})
	for i := 1; i < versions; i++ {
		if _, err := Write(nil, WriteRequest{Path: path, Content: content(i), Mode: "overwrite"}); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if torn.Load() > 0 || reads.Load() == 0 {
		t.Fatalf("%d of %d reads saw a file that was never written", torn.Load(), reads.Load())
	}
}

// TestContentBoundIsExact: content of exactly FileWriteMax bytes is taken,
// as text and as base64 (padded or not), and one byte more is refused.
func TestContentBoundIsExact(t *testing.T) {
	at := bytes.Repeat([]byte("a"), limits.FileWriteMax)
	over := append(bytes.Clone(at), 'a')
	for _, enc := range []struct {
		name   string
		encode func([]byte) string
	}{
		{"", func(b []byte) string { return string(b) }},
		{"base64", base64.StdEncoding.EncodeToString},
	} {
		got, err := decodeContent(enc.encode(at), enc.name)
		if err != nil || len(got) != limits.FileWriteMax {
			t.Errorf("%q: %d bytes at the bound: %d, %v", enc.name, limits.FileWriteMax, len(got), err)
		}
		if _, err := decodeContent(enc.encode(over), enc.name); !errcode.Is(err, errcode.InvalidArgument) {
			t.Errorf("%q: one byte over the bound: %v", enc.name, err)
		}
	}
}
