package toolpath

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/owndirs"
)

// fixture is an agent's two directories and the ways a path can lead in.
type fixture struct {
	base, config, state, moved, other string
	own                               *owndirs.Set
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	base := t.TempDir()
	f := &fixture{base: base, config: filepath.Join(base, "config"), state: filepath.Join(base, "state"), other: filepath.Join(base, "other")}
	var err error
	if f.own, err = owndirs.New(f.state, f.config); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(f.config, "identity.json"), []byte("{}"), 0o600)
	os.WriteFile(filepath.Join(f.config, "permissions.json"), []byte("{}"), 0o600)
	os.MkdirAll(filepath.Join(f.state, "jobs", "j"), 0o700)
	os.Symlink(f.config, filepath.Join(base, "link-to-config"))
	os.Mkdir(filepath.Join(f.config, "sub"), 0o700)
	os.Symlink(filepath.Join(f.config, "sub"), filepath.Join(base, "link-to-sub"))
	os.Symlink("config/identity.json", filepath.Join(base, "rel-link-to-identity"))
	os.Symlink(filepath.Join(f.config, "identity.json"), filepath.Join(base, "link-to-identity"))
	os.Mkdir(f.other, 0o700)
	os.Symlink(base, filepath.Join(f.other, "up"))
	// A second name for a directory: it is renamed after New, and
	// recognised by its inode still.
	f.moved = filepath.Join(base, "moved-state")
	if err := os.Rename(f.state, f.moved); err != nil {
		t.Fatal(err)
	}
	return f
}

func code(err error) errcode.Code {
	var c *errcode.Error
	if errors.As(err, &c) {
		return c.Code
	}
	return ""
}

// TestParentRefusesEveryWayIn: every spelling of a path into the agent's
// directories and into a process's /proc directory is refused, and what
// lies beside them is not.
func TestParentRefusesEveryWayIn(t *testing.T) {
	f := newFixture(t)
	pid := strconv.Itoa(os.Getpid())
	for _, p := range []string{
		f.config,
		f.config + "/",
		filepath.Join(f.config, "identity.json"),
		filepath.Join(f.config, "not-yet", "deeper"),
		filepath.Join(f.base, "link-to-config", "identity.json"),
		filepath.Join(f.base, "link-to-identity"),
		filepath.Join(f.base, "rel-link-to-identity"),
		filepath.Join(f.other, "up", "config", "identity.json"),
		f.other + "/up/other/../config",
		f.other + "/../config/x",
		// The kernel resolves "link/.." to the link target's parent.
		filepath.Join(f.base, "link-to-sub") + "/../identity.json",
		filepath.Join(f.base, "link-to-sub") + "/../not-yet/f",
		f.moved + "/x",
		filepath.Join(f.moved, "jobs", "j"),
		"/proc/self/environ",
		"/proc/thread-self/environ",
		"/proc/" + pid + "/environ",
		"/proc/" + pid + "/root/etc/hostname",
		"/proc/" + pid + "/cwd",
		"/proc/1/environ",
		"/proc/self",
		"/proc/" + pid,
		"/proc/sys/../self/environ",
		"/dev/fd/0",
		"/dev/stdin",
		"/dev/fd/../environ",
		"/proc/net/tcp", // a link to self/net
	} {
		dir, name, err := Parent(f.own, p, false)
		if err == nil {
			dir.Close()
		}
		if code(err) != errcode.PermissionDenied {
			t.Errorf("Parent(%s) = %q, %v; want permission_denied", p, name, err)
		}
	}
	for p, want := range map[string]string{
		f.base:                            filepath.Base(f.base),
		f.other + "/new-file":             "new-file",
		"/":                               ".",
		filepath.Join(f.base, "configx"):  "configx",
		filepath.Join(f.other, "up", "x"): "x",
		"/proc/meminfo":                   "meminfo",
		"/proc/sys/kernel/random/boot_id": "boot_id",
		"/proc/sys/..":                    ".",
		f.base + "/other/.":               ".",
	} {
		dir, name, err := Parent(f.own, p, false)
		if err != nil {
			t.Errorf("Parent(%s): %v, want allowed", p, err)
			continue
		}
		dir.Close()
		if name != want {
			t.Errorf("Parent(%s) names %q, want %q", p, name, want)
		}
	}
	if _, _, err := Parent(f.own, "relative/path", false); code(err) != errcode.InvalidArgument {
		t.Errorf("a relative path: %v", err)
	}
}

// TestParentFollowsLinksAsTheKernel: the directory and name answered are
// the real ones: a final symlink is followed (to a missing target too, as
// O_CREAT does), a relative target is resolved from the link's directory,
// and ".." after a link leaves the link's target.
func TestParentFollowsLinksAsTheKernel(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "a", "b")
	os.MkdirAll(real, 0o755)
	os.WriteFile(filepath.Join(real, "f"), []byte("x"), 0o644)
	os.Symlink("a/b", filepath.Join(base, "lb"))
	os.Symlink("b/f", filepath.Join(base, "a", "lf"))
	os.Symlink("../lf", filepath.Join(base, "lb", "up"))
	os.Symlink("missing-target", filepath.Join(base, "dangling"))
	os.Symlink("loop2", filepath.Join(base, "loop1"))
	os.Symlink("loop1", filepath.Join(base, "loop2"))
	sameDir := func(d *os.File, want string) bool {
		var a, b unix.Stat_t
		unix.Fstat(int(d.Fd()), &a)
		unix.Stat(want, &b)
		return a.Dev == b.Dev && a.Ino == b.Ino
	}
	for p, want := range map[string][2]string{
		filepath.Join(base, "lb", "f"):       {real, "f"},
		filepath.Join(base, "a", "lf"):       {real, "f"},
		filepath.Join(base, "lb", "up"):      {real, "f"},
		base + "/lb/../b":                    {filepath.Join(base, "a"), "b"},
		filepath.Join(base, "dangling"):      {base, "missing-target"},
		filepath.Join(base, "a", "b", "new"): {real, "new"},
		filepath.Join(base, "lb") + "/./f":   {real, "f"},
		filepath.Join(base, "lb") + "//f":    {real, "f"},
		base + "/lb/../":                     {filepath.Join(base, "a"), "."},
	} {
		dir, name, err := Parent(nil, p, false)
		if err != nil {
			t.Errorf("Parent(%s): %v", p, err)
			continue
		}
		if name != want[1] || !sameDir(dir, want[0]) {
			t.Errorf("Parent(%s) = %s in another directory, want %s in %s", p, name, want[1], want[0])
		}
		dir.Close()
	}
	if _, _, err := Parent(nil, filepath.Join(base, "loop1"), false); !errors.Is(err, unix.ELOOP) {
		t.Errorf("a symlink loop: %v, want ELOOP", err)
	}
	for _, p := range []string{filepath.Join(base, "missing", "f"), filepath.Join(base, "a", "b", "f", "below-a-file")} {
		if _, _, err := Parent(nil, p, false); !errors.Is(err, unix.ENOENT) {
			t.Errorf("Parent(%s): %v, want ENOENT", p, err)
		}
	}
}

// TestMakeDirsCreatesNothingItRefuses: make_dirs creates missing
// directories, but never one inside the agent's directories, however the
// path reaches them: the kernel's ".." after /dev/fd included.
func TestMakeDirsCreatesNothingItRefuses(t *testing.T) {
	f := newFixture(t)
	for _, p := range []string{
		"/dev/fd/../.." + f.config + "/permissions.json/x",
		"/dev/fd/../../.." + f.config + "/newdir/x",
		filepath.Join(f.base, "link-to-sub") + "/../permissions.json/x",
		filepath.Join(f.base, "link-to-config", "newdir", "x"),
		filepath.Join(f.other, "up", "config", "newdir", "x"),
	} {
		dir, _, err := Parent(f.own, p, true)
		if err == nil {
			dir.Close()
		}
		if code(err) != errcode.PermissionDenied {
			t.Errorf("Parent(%s, make dirs) = %v, want permission_denied", p, err)
		}
	}
	if fi, err := os.Lstat(filepath.Join(f.config, "permissions.json")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("permissions.json is no longer the file it was: %v %v", fi, err)
	}
	if _, err := os.Lstat(filepath.Join(f.config, "newdir")); !os.IsNotExist(err) {
		t.Errorf("a directory was made inside the config directory: %v", err)
	}
	dir, name, err := Parent(f.own, filepath.Join(f.other, "up", "other", "n1", "n2", "file"), true)
	if err != nil {
		t.Fatal(err)
	}
	dir.Close()
	if fi, err := os.Stat(filepath.Join(f.other, "n1", "n2")); err != nil || !fi.IsDir() || name != "file" {
		t.Errorf("the missing directories were not made: %v %v %q", fi, err, name)
	}
	if _, err := os.Lstat(filepath.Join(f.other, "n1", "n2", "file")); !os.IsNotExist(err) {
		t.Errorf("the file itself was made: %v", err)
	}
}

// TestDirOpensTheDirectoryNamed: Dir answers the directory itself, refuses
// the agent's own and a process's, and tells a non-directory apart.
func TestDirOpensTheDirectoryNamed(t *testing.T) {
	f := newFixture(t)
	for _, p := range []string{f.config, filepath.Join(f.base, "link-to-config"), f.moved, "/proc/self", "/proc/self/fd", "/dev/fd", "/proc/1/root"} {
		d, err := Dir(f.own, p)
		if err == nil {
			d.Close()
		}
		if code(err) != errcode.PermissionDenied {
			t.Errorf("Dir(%s) = %v, want permission_denied", p, err)
		}
	}
	for _, p := range []string{f.base, f.other + "/up", "/proc", "/proc/sys", "/"} {
		d, err := Dir(f.own, p)
		if err != nil {
			t.Errorf("Dir(%s): %v", p, err)
			continue
		}
		names, err := d.Readdirnames(-1)
		d.Close()
		if err != nil || len(names) == 0 {
			t.Errorf("Dir(%s) cannot be listed: %v %v", p, names, err)
		}
	}
	if _, err := Dir(f.own, filepath.Join(f.config+"x")); !errors.Is(err, unix.ENOENT) {
		t.Errorf("a missing directory: %v", err)
	}
	if _, err := Dir(f.own, "/proc/meminfo"); !errors.Is(err, ErrNotDirectory) {
		t.Errorf("a file: %v, want ErrNotDirectory", err)
	}
}

// TestIsPerProcess: only a PID, self and thread-self at a proc root are
// per-process; the same names elsewhere, and other names there, are not.
func TestIsPerProcess(t *testing.T) {
	proc, err := unix.Open("/proc", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(proc)
	sys, err := unix.Open("/proc/sys", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sys)
	tmp, err := unix.Open(t.TempDir(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(tmp)
	for _, c := range []struct {
		fd   int
		name string
		want bool
	}{
		{proc, "self", true}, {proc, "thread-self", true}, {proc, "1", true}, {proc, "0123456789", true},
		{proc, "meminfo", false}, {proc, "sys", false}, {proc, "", false}, {proc, "12a", false}, {proc, "a12", false},
		{proc, "selfx", false}, {proc, "/", false},
		{sys, "self", false}, {sys, "1", false},
		{tmp, "self", false}, {tmp, "42", false},
		{-1, "42", true}, // what cannot be examined
		{-1, "meminfo", false},
	} {
		if got := IsPerProcess(c.fd, c.name); got != c.want {
			t.Errorf("IsPerProcess(%d, %q) = %v, want %v", c.fd, c.name, got, c.want)
		}
	}
}

// TestResolutionLeavesNoDescriptor: a resolution, answered or refused,
// leaves no descriptor open but the one it returns.
func TestResolutionLeavesNoDescriptor(t *testing.T) {
	f := newFixture(t)
	count := func() int {
		ents, _ := os.ReadDir("/proc/self/fd")
		return len(ents)
	}
	before := count()
	for range 20 {
		if d, _, err := Parent(f.own, filepath.Join(f.other, "up", "other", "x"), false); err == nil {
			d.Close()
		}
		Parent(f.own, filepath.Join(f.base, "link-to-config", "identity.json"), false)
		Parent(f.own, "/proc/self/environ", false)
		Dir(f.own, strings.Repeat("/x", 3))
	}
	if after := count(); after != before {
		t.Errorf("%d descriptors open after, %d before", after, before)
	}
}

// FuzzParentResolvesAsTheKernel: whatever path a caller sends, Parent
// answers the file the kernel would open, or refuses; it never leaves the
// tree the path leads to, and never panics.
func FuzzParentResolvesAsTheKernel(f *testing.F) {
	base := f.TempDir()
	for _, d := range []string{"a/b/c", "a/d", "e"} {
		os.MkdirAll(filepath.Join(base, d), 0o755)
	}
	os.WriteFile(filepath.Join(base, "a/b/file"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(base, "e/g"), []byte("y"), 0o644)
	for link, target := range map[string]string{
		"rel": "a/b", "up": "../a", "abs": filepath.Join(base, "a/d"), "dangling": "nowhere/x",
		"loop": "loop", "a/b/c/back": "../../..", "a/tofile": "b/file", "e/self": ".",
	} {
		os.Symlink(target, filepath.Join(base, link))
	}
	for _, s := range []string{"rel/file", "up/b/c/back/e/g", "abs/../b/./file", "dangling", "loop", "a/tofile/x", "a/b/c/back/rel/../d", "e/self/self/g", "..", "a//b///file/", "x/../a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rel string) {
		if strings.IndexByte(rel, 0) >= 0 || len(rel) > 512 {
			return
		}
		path := base + "/" + rel
		dir, name, err := Parent(nil, path, false)
		if err != nil {
			return // refused or not found: nothing to compare
		}
		defer dir.Close()
		if strings.Contains(name, "/") || name == "" || name == ".." {
			t.Fatalf("Parent(%q) names %q", rel, name)
		}
		var got unix.Stat_t
		gotErr := unix.Fstatat(int(dir.Fd()), name, &got, unix.AT_SYMLINK_NOFOLLOW)
		fd, kerr := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if kerr != nil {
			if gotErr == nil {
				t.Fatalf("Parent(%q) finds %q, the kernel: %v", rel, name, kerr)
			}
			return
		}
		defer unix.Close(fd)
		var want unix.Stat_t
		unix.Fstat(fd, &want)
		if gotErr != nil || got.Dev != want.Dev || got.Ino != want.Ino {
			t.Fatalf("Parent(%q) = %q (%v), not the file the kernel opens", rel, name, gotErr)
		}
	})
}

// TestLinkChainsEndWhereTheKernelsDo: a chain of as many symlinks as the
// kernel follows resolves, one more is ELOOP, for the kernel and for Parent
// alike.
func TestLinkChainsEndWhereTheKernelsDo(t *testing.T) {
	base := t.TempDir()
	os.WriteFile(filepath.Join(base, "l0"), []byte("x"), 0o644)
	for i := 1; i <= maxLinks+1; i++ {
		os.Symlink("l"+strconv.Itoa(i-1), filepath.Join(base, "l"+strconv.Itoa(i)))
	}
	for n, wantLoop := range map[int]bool{maxLinks: false, maxLinks + 1: true} {
		path := filepath.Join(base, "l"+strconv.Itoa(n))
		fd, kerr := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if kerr == nil {
			unix.Close(fd)
		}
		dir, name, err := Parent(nil, path, false)
		if err == nil {
			dir.Close()
		}
		if errors.Is(kerr, unix.ELOOP) != wantLoop || errors.Is(err, unix.ELOOP) != wantLoop {
			t.Errorf("a chain of %d: the kernel %v, Parent %q %v; want ELOOP %v", n, kerr, name, err, wantLoop)
		}
		if !wantLoop && name != "l0" {
			t.Errorf("a chain of %d ends at %q", n, name)
		}
	}
}
