package fileops

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/owndirs"
	"github.com/commandcore/commandcore/internal/testkit"
)

// agentDirs makes an agent's config and state directories with an
// identity file, and returns them with their set.
func agentDirs(t *testing.T) (config, identity string, own *owndirs.Set) {
	t.Helper()
	base := t.TempDir()
	config = filepath.Join(base, "config")
	own, err := owndirs.New(config, filepath.Join(base, "state"))
	if err != nil {
		t.Fatal(err)
	}
	identity = filepath.Join(config, "identity.json")
	writeFile(t, identity, "SECRET-IDENTITY\n", 0o600)
	return config, identity, own
}

// TestHardLinkToAnOwnFileIsRefused: a hard link made elsewhere to a file
// of the agent's own directories is refused as the file itself by every
// tool that reads or writes into it; replacing the link's name is not
// writing into the file, and leaves the identity as it was.
func TestHardLinkToAnOwnFileIsRefused(t *testing.T) {
	_, identity, own := agentDirs(t)
	elsewhere := t.TempDir()
	link := filepath.Join(elsewhere, "innocent.txt")
	if err := os.Link(identity, link); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err := Read(ctx, own, ReadRequest{Path: link})
	if !errors.Is(err, owndirs.ErrInside) {
		t.Errorf("read: %v", err)
	}
	if _, err := EditFile(ctx, own, EditRequest{Path: link, Edits: []Edit{{OldText: "SECRET", NewText: "x"}}}); !errors.Is(err, owndirs.ErrInside) {
		t.Errorf("edit: %v", err)
	}
	if _, err := Write(own, WriteRequest{Path: link, Content: "more", Mode: ModeAppend}); !errors.Is(err, owndirs.ErrInside) {
		t.Errorf("append: %v", err)
	}
	if _, err := Write(own, WriteRequest{Path: link, Content: "x", Mode: ModeOverwrite, ExpectedSHA256: hexSum("SECRET-IDENTITY\n")}); !errors.Is(err, owndirs.ErrInside) {
		t.Errorf("overwrite checking the content: %v", err)
	}
	if b, _ := os.ReadFile(identity); string(b) != "SECRET-IDENTITY\n" {
		t.Fatalf("the identity changed: %q", b)
	}
	// Another file with two names is read as ever.
	other := filepath.Join(elsewhere, "other")
	writeFile(t, other, "plain\n", 0o644)
	os.Link(other, filepath.Join(elsewhere, "other2"))
	if r, err := Read(ctx, own, ReadRequest{Path: filepath.Join(elsewhere, "other2")}); err != nil || r.Data != "plain\n" {
		t.Errorf("a file with two names outside: %+v %v", r, err)
	}
}

// TestProcessFilesAreRefused: a per-process file under /proc is refused by
// every tool, this agent's own included, whatever path leads there; /proc
// files that are not per-process are read, and listing /proc shows the
// process directories without entering them.
func TestProcessFilesAreRefused(t *testing.T) {
	ctx := context.Background()
	pid := strconv.Itoa(os.Getpid())
	for _, p := range []string{"/proc/self/environ", "/proc/" + pid + "/environ", "/proc/thread-self/environ", "/proc/1/cmdline", "/dev/fd/0", "/proc/" + pid + "/root/etc/hostname"} {
		if _, err := Read(ctx, nil, ReadRequest{Path: p}); codeOf(err) != errcode.PermissionDenied {
			t.Errorf("read %s: %v", p, err)
		}
		if _, err := Write(nil, WriteRequest{Path: p, Content: "x", Mode: ModeOverwrite}); codeOf(err) != errcode.PermissionDenied {
			t.Errorf("write %s: %v", p, err)
		}
		if _, err := EditFile(ctx, nil, EditRequest{Path: p, Edits: []Edit{{OldText: "a", NewText: "b"}}}); codeOf(err) != errcode.PermissionDenied {
			t.Errorf("edit %s: %v", p, err)
		}
	}
	for _, p := range []string{"/proc/self", "/proc/" + pid + "/root", "/proc/" + pid + "/fd", "/dev/fd"} {
		if _, err := List(ctx, nil, ListRequest{Path: p}); codeOf(err) != errcode.PermissionDenied {
			t.Errorf("list %s: %v", p, err)
		}
	}
	if r, err := Read(ctx, nil, ReadRequest{Path: "/proc/meminfo"}); err != nil || !strings.Contains(r.Data, "MemTotal") {
		t.Errorf("/proc/meminfo: %v", err)
	}
	r, err := List(ctx, nil, ListRequest{Path: "/proc", Depth: 2, MaxEntries: limits.FileListEntriesMax})
	if err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, e := range r.Entries {
		rest := strings.TrimPrefix(e.Path, "/proc/")
		first, below, _ := strings.Cut(rest, "/")
		if below != "" && (first == "self" || first == "thread-self" || strings.Trim(first, "0123456789") == "") {
			t.Fatalf("listing /proc entered a process's directory: %s", e.Path)
		}
		listed = listed || rest == pid
	}
	if !listed {
		t.Error("listing /proc does not show this process's directory")
	}
}

// TestMakeDirsMakesNothingInTheAgentsDirectories: make_dirs through a
// path the kernel resolves into the config directory creates nothing
// there, and every tool still reads the permission ceiling as a file.
func TestMakeDirsMakesNothingInTheAgentsDirectories(t *testing.T) {
	config, _, own := agentDirs(t)
	ceiling := filepath.Join(config, "permissions.json")
	writeFile(t, ceiling, "{}", 0o600)
	for _, p := range []string{
		"/dev/fd/../.." + ceiling + "/x",
		"/proc/self/cwd/../../.." + ceiling + "/x",
		filepath.Dir(config) + "/./config/permissions.json/x",
	} {
		if _, err := Write(own, WriteRequest{Path: p, Content: "x", MakeDirs: true}); codeOf(err) != errcode.PermissionDenied {
			t.Errorf("write %s: %v, want permission_denied", p, err)
		}
	}
	if fi, err := os.Lstat(ceiling); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("permissions.json is no longer a file: %v %v", fi, err)
	}
	elsewhere := t.TempDir()
	if _, err := Write(own, WriteRequest{Path: elsewhere + "/a/b/c.txt", Content: "x", MakeDirs: true}); err != nil {
		t.Fatalf("make_dirs elsewhere: %v", err)
	}
}

// TestReplacementKeepsModeOwnerAndAttributes: overwrite and edit keep the
// file's exact mode (0000 and set-id bits included), owner, a user.
// extended attribute and an ACL.
func TestReplacementKeepsModeOwnerAndAttributes(t *testing.T) {
	ctx := context.Background()
	uid := os.Getuid()
	if uid == 0 {
		uid = 65534
	}
	acl := testkit.AccessACL(4242)
	for _, mode := range []uint32{0, 0o4750, 0o640} {
		for _, how := range []string{"overwrite", "edit"} {
			path := filepath.Join(t.TempDir(), "f")
			writeFile(t, path, "old text\n", 0o600)
			if err := unix.Setxattr(path, "user.kept", []byte("yes"), 0); err != nil {
				t.Fatal(err)
			}
			if err := unix.Setxattr(path, "system.posix_acl_access", acl, 0); err != nil {
				t.Fatal(err)
			}
			os.Chown(path, uid, uid)
			if err := unix.Chmod(path, mode); err != nil {
				t.Fatal(err)
			}
			var before unix.Stat_t
			unix.Stat(path, &before)
			wantACL := testkit.Xattr(t, path, "system.posix_acl_access")
			var err error
			if how == "overwrite" {
				_, err = Write(nil, WriteRequest{Path: path, Content: "new text\n", Mode: ModeOverwrite})
			} else {
				_, err = EditFile(ctx, nil, EditRequest{Path: path, Edits: []Edit{{OldText: "old", NewText: "new"}}})
			}
			if err != nil {
				t.Fatalf("%s of mode %04o: %v", how, mode, err)
			}
			var after unix.Stat_t
			unix.Stat(path, &after)
			if after.Ino == before.Ino {
				t.Fatalf("%s: not replaced", how)
			}
			if after.Mode != before.Mode || after.Uid != before.Uid || after.Gid != before.Gid {
				t.Errorf("%s of mode %04o: now %o %d:%d, was %o %d:%d", how, mode, after.Mode, after.Uid, after.Gid, before.Mode, before.Uid, before.Gid)
			}
			if v := testkit.Xattr(t, path, "user.kept"); string(v) != "yes" {
				t.Errorf("%s of mode %04o: user.kept = %q", how, mode, v)
			}
			if v := testkit.Xattr(t, path, "system.posix_acl_access"); !bytes.Equal(v, wantACL) {
				t.Errorf("%s of mode %04o: the ACL is %x, was %x", how, mode, v, wantACL)
			}
		}
	}
}

// TestListingLeaksNoDescriptorToAChild: while files.list reads
// directories, a command started meanwhile inherits none of them.
func TestListingLeaksNoDescriptorToAChild(t *testing.T) {
	root := t.TempDir()
	for i := range 200 {
		writeFile(t, filepath.Join(root, "d"+strconv.Itoa(i), "f"), "x", 0o644)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			List(ctx, nil, ListRequest{Path: root, Depth: 2, MaxEntries: limits.FileListEntriesMax})
		}
	})
	deadline := time.Now().Add(3 * time.Second)
	for n := 0; n < 300 && time.Now().Before(deadline); n++ {
		out, err := exec.Command("ls", "-l", "/proc/self/fd/").Output()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(out), root) {
			cancel()
			wg.Wait()
			t.Fatalf("a child inherited a listed directory:\n%s", out)
		}
	}
	cancel()
	wg.Wait()
}

// TestFileReadHashesBoundedFiles: a file over the hash bound is read only
// for its window, with sha256 null and the reason; expected_sha256 on it is
// refused; by lines its start line must begin within the bound.
func TestFileReadHashesBoundedFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("first line\nsecond\n")
	// Sparse: past the bound without writing it.
	f.WriteAt([]byte("\nthe end"), limits.FileHashMaxBytes+10)
	f.Close()
	ctx := context.Background()
	r, err := Read(ctx, nil, ReadRequest{Path: path, MaxBytes: 6})
	if err != nil {
		t.Fatal(err)
	}
	if r.SHA256 != nil || !strings.Contains(r.SHA256Skipped, strconv.Itoa(limits.FileHashMaxBytes)) || r.Data != "first " || r.EOF || r.Size != limits.FileHashMaxBytes+18 {
		t.Errorf("head of a big file: %+v", r)
	}
	r, err = Read(ctx, nil, ReadRequest{Path: path, Offset: limits.FileHashMaxBytes + 11})
	if err != nil || r.Data != "the end" || !r.EOF || r.SHA256 != nil {
		t.Errorf("tail of a big file: %+v %v", r, err)
	}
	r, err = Read(ctx, nil, ReadRequest{Path: path, StartLine: 2, LineCount: 1})
	if err != nil || r.Data != "second\n" || r.NextLine != 3 || r.SHA256 != nil {
		t.Errorf("line 2 of a big file: %+v %v", r, err)
	}
	if _, err := Read(ctx, nil, ReadRequest{Path: path, StartLine: 4}); !errors.Is(err, errLineTooFar) {
		t.Errorf("a line past the bound: %v", err)
	}
	if _, err := Write(nil, WriteRequest{Path: path, Mode: ModeOverwrite, ExpectedSHA256: strings.Repeat("0", 64)}); !errors.Is(err, errTooLargeToCheck) {
		t.Errorf("expected_sha256 of a big file: %v", err)
	}
	w, err := Write(nil, WriteRequest{Path: path, Mode: ModeAppend, Content: "!"})
	if err != nil || w.SHA256 != nil || w.SHA256Skipped == "" || w.Size != limits.FileHashMaxBytes+19 {
		t.Errorf("append to a big file: %+v %v", w, err)
	}
	small := filepath.Join(t.TempDir(), "small")
	writeFile(t, small, "abc", 0o644)
	if r, err := Read(ctx, nil, ReadRequest{Path: small}); err != nil || deref(r.SHA256) != hexSum("abc") || r.SHA256Skipped != "" {
		t.Errorf("a small file: %+v %v", r, err)
	}
}

// TestNearMatchSearchIsBounded: the search for the text nearest a missing
// old_text stops after its bound of line comparisons, saying so, and with
// the request's context.
func TestNearMatchSearchIsBounded(t *testing.T) {
	ctx := context.Background()
	// Every start line matches 30 lines before the 31st differs: the
	// line comparison alone is quadratic here.
	content := []byte(strings.Repeat("a\n", 200_000))
	old := strings.Repeat("a\n", 30) + strings.Repeat("z", 200)
	_, _, err := Apply(ctx, content, []Edit{{OldText: old, NewText: "x"}})
	if m := mismatchOf(t, err); !m.NearSearchBounded || m.ClosestLine != 0 {
		t.Errorf("mismatch %+v, want the search bounded", m)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := Apply(cancelled, content, []Edit{{OldText: "a", NewText: "b"}}); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled edit: %v", err)
	}
	if _, _, _, err := closest(cancelled, content, old); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled near search: %v", err)
	}
	path := filepath.Join(t.TempDir(), "f")
	writeFile(t, path, "keep\n", 0o644)
	if _, err := EditFile(cancelled, nil, EditRequest{Path: path, Edits: []Edit{{OldText: "keep", NewText: "lost"}}}); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled EditFile: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "keep\n" {
		t.Errorf("a cancelled edit changed the file: %q", b)
	}
}

// TestTrimmedMatchCountsEveryComparison: the bound is exact: the match
// that takes n comparisons is found with n steps and not with n-1.
func TestTrimmedMatchCountsEveryComparison(t *testing.T) {
	ctx := context.Background()
	content := []byte("x\n  y\nz \nw")
	// Line 1 fails at once (1), line 2 matches y then z (2 more).
	if line, bounded, err := trimmedMatch(ctx, content, "y\nz", 3); line != 2 || bounded || err != nil {
		t.Errorf("3 steps: line %d bounded %v %v, want line 2", line, bounded, err)
	}
	if line, bounded, _ := trimmedMatch(ctx, content, "y\nz", 2); line != 0 || !bounded {
		t.Errorf("2 steps: line %d bounded %v, want bounded", line, bounded)
	}
	// The last line, with no newline after it, and an empty last line.
	if line, _, _ := trimmedMatch(ctx, content, "w", 100); line != 4 {
		t.Errorf("last line: %d", line)
	}
	if line, _, _ := trimmedMatch(ctx, []byte("a\nb\n"), "b\n\nc", 100); line != 0 {
		t.Errorf("old_text longer than what is left: line %d", line)
	}
	if line, _, _ := trimmedMatch(ctx, []byte("a\nb\n"), "b\n", 100); line != 2 {
		t.Errorf("b: line %d", line)
	}
	if line, bounded, _ := trimmedMatch(ctx, content, "  \n ", 0); line != 0 || bounded {
		t.Errorf("white space only: %d %v", line, bounded)
	}
}
