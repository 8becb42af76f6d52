package hideexec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/commandcore/commandcore/internal/testkit"
)

// binaryLayout makes, under root, a binary's directory as the one-line
// install leaves it (home/.local/bin with commandcore and
// commandcore.previous) and a user unit directory with a unit file, and
// returns the two directories and the files in them.
func binaryLayout(t *testing.T, root string) (bin, units string, files []string) {
	t.Helper()
	bin, units = filepath.Join(root, "home", ".local", "bin"), filepath.Join(root, "home", ".config", "systemd", "user")
	for _, d := range []string{bin, units} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files = []string{filepath.Join(bin, "commandcore"), filepath.Join(bin, "commandcore.previous"), filepath.Join(units, "commandcore.service")}
	for i, f := range files {
		if err := os.WriteFile(f, []byte(fmt.Sprintf("content %d\n", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin, units, files
}

// tamper is a script that tries every way of changing each file and each
// directory (overwriting, appending, renaming it, renaming or linking
// over it, removing it, changing its mode; creating beside it, renaming
// the directory and its parent) and prints a line starting "CHANGED:" for
// each that worked, then "elsewhere" once it wrote a file in dir, which
// stays writable.
func tamper(dir string, files, dirs []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "cd %q && printf evil > evil && ", dir)
	for _, f := range files {
		fmt.Fprintf(&b, `f=%q; printf evil > "$f" && echo "CHANGED: overwrote $f"; printf evil >> "$f" && echo "CHANGED: appended to $f"; `+
			`cp evil evil2 && mv -f evil2 "$f" && echo "CHANGED: moved over $f"; ln -f evil "$f" && echo "CHANGED: linked over $f"; `+
			`mv -f "$f" "$f.renamed" && echo "CHANGED: renamed $f"; rm -f "$f" && echo "CHANGED: removed $f"; `+
			`chmod 777 "$f" && echo "CHANGED: chmodded $f"; `, f)
	}
	for _, d := range dirs {
		fmt.Fprintf(&b, `d=%q; true > "$d/new" && echo "CHANGED: created in $d"; mkdir "$d/new.d" && echo "CHANGED: made a directory in $d"; `+
			`mv "$d" "$d.moved" && echo "CHANGED: moved $d"; mv "${d%%/*}" "${d%%/*}.moved" && echo "CHANGED: moved the parent of $d"; `, d)
	}
	b.WriteString("echo x > mine && echo elsewhere")
	return b.String()
}

// hashes are the files' SHA-256 sums.
func hashes(t *testing.T, files []string) []string {
	t.Helper()
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		out = append(out, hex.EncodeToString(sum[:]))
	}
	return out
}

// TestReadOnlyDirectoriesStayAsTheyWere: a command sees the directory of
// the agent's binary read-only, and, cut off from the user manager, the
// manager's unit directory too: every write, rename, removal and mode
// change there fails, as does renaming the directories on the way to
// them, and every file's hash is what it was; its own work elsewhere is
// written. A command not cut off writes the unit directory as before, and
// a read-only directory that is missing is made first, not skipped.
func TestReadOnlyDirectoriesStayAsTheyWere(t *testing.T) {
	root := t.TempDir()
	state, config := agentDirs(t, root)
	bin, units, files := binaryLayout(t, root)
	missing := filepath.Join(root, "home", ".config", "environment.d")
	h := probeCovers(t, state, config, Covers{ReadOnly: []string{bin}, CutReadOnly: []string{filepath.Dir(units), missing}})
	if !h.CanCut() {
		t.Fatal("a Hider probed with the manager's configuration cannot cut")
	}
	before := hashes(t, files)
	work := t.TempDir()
	out, code, _ := runCut(t, h, work, "", true, tamper(work, files, []string{bin, units, missing}))
	if code != 0 || !strings.HasSuffix(out, "elsewhere\n") || strings.Contains(out, "CHANGED") {
		t.Fatalf("a cut-off command changed what it sees read-only (exit %d):\n%s", code, out)
	}
	if after := hashes(t, files); !slices.Equal(after, before) {
		t.Fatalf("hashes after: %v, before: %v", after, before)
	}
	if fi, err := os.Stat(missing); err != nil || !fi.IsDir() {
		t.Fatalf("the missing directory was not made: %v", err)
	}
	for d, n := range map[string]int{bin: 2, units: 1, missing: 0} {
		if ents, _ := os.ReadDir(d); len(ents) != n {
			t.Errorf("%s holds %v", d, ents)
		}
	}
	// Not cut off: the binary's directory stays read-only, the unit
	// directory is the user's.
	out, _, _ = runCut(t, h, work, "", false, tamper(work, files[:2], []string{bin})+fmt.Sprintf("; : > %q && echo wrote-units", filepath.Join(units, "new.service")))
	if !strings.HasSuffix(out, "elsewhere\nwrote-units\n") || strings.Contains(out, "CHANGED") {
		t.Fatalf("a command not cut off:\n%s", out)
	}
	if after := hashes(t, files); !slices.Equal(after, before) {
		t.Fatalf("hashes after: %v, before: %v", after, before)
	}
}

// TestOrdinaryUsersReadOnlyDirectory: for an agent of an ordinary user
// (uid 65534, started by this root test), whose role runs in a user
// namespace and must keep the flags the host's mounts carry, the binary's
// directory is read-only as well, and cannot be made writable again by
// unmounting, not even from a user namespace of the command's own.
func TestOrdinaryUsersReadOnlyDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start a process as another user")
	}
	const nobody = 65534
	testkit.SkipWithoutUserNamespaces(t, nobody)
	root := t.TempDir()
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe, _ := os.Executable()
	bin := filepath.Join(root, "hideexec.test")
	copyFile(t, exe, bin)
	state, config := agentDirs(t, root)
	dir, _, files := binaryLayout(t, root)
	work := filepath.Join(root, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil || p == root || p == bin {
			return err
		}
		return os.Lchown(p, nobody, nobody)
	}); err != nil {
		t.Fatal(err)
	}
	before := hashes(t, files[:2])
	script := tamper(work, files[:2], []string{dir}) + fmt.Sprintf(`; umount %[1]q && echo unmounted; `+
		`unshare -Urm sh -c 'umount %[1]q && echo unmounted; true > %[1]q/new && echo created'`, dir)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), asUserEnv+"="+state+"\n"+config+"\n"+work+"\n\n"+dir+"\n"+script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err != nil || !strings.HasPrefix(out, "userns\n") {
		t.Fatalf("as an ordinary user: %v: %q", err, out)
	}
	if !strings.Contains(out, "\nelsewhere\n") || strings.Contains(out, "CHANGED") || strings.Contains(out, "unmounted") || strings.Contains(out, "\ncreated") {
		t.Fatalf("an ordinary user's command changed the binary's directory:\n%s", out)
	}
	if after := hashes(t, files[:2]); !slices.Equal(after, before) {
		t.Fatalf("hashes after: %v, before: %v", after, before)
	}
}

// TestPins: the directories pinned on the way to read-only ones are each
// ancestor whose parent may be written, shallowest first, once, and none
// that is read-only itself or inside one.
func TestPins(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "h", ".local", "bin"), filepath.Join(root, "h", ".config", "systemd")
	inner := filepath.Join(b, "user")
	for _, d := range []string{a, inner} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got := Pins([]string{a, b, inner})
	var under []string
	for _, p := range got {
		if parent := filepath.Dir(p); syscall.Access(parent, 2) != nil {
			t.Errorf("pinned %s, whose parent this process cannot write", p)
		}
		if strings.HasPrefix(p, root+"/") {
			under = append(under, strings.TrimPrefix(p, root))
		}
	}
	if want := []string{"/h", "/h/.config", "/h/.local"}; !slices.Equal(under, want) {
		t.Fatalf("pinned under the test's directory %q, want %q (all: %q)", under, want, got)
	}
	for i := 1; i < len(got); i++ {
		if strings.Count(got[i-1], "/") > strings.Count(got[i], "/") {
			t.Fatalf("not shallowest first: %q", got)
		}
	}
}
