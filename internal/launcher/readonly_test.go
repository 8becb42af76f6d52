package launcher

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/systemdtest"
)

// TestAgentBinary: the binary's directory is to be read-only to jobs when
// its user may write it and it is none jobs need to write: not the home
// directory or one above it, not a sticky one, not a system directory of
// commands; a binary found through a symbolic link names its real
// directory.
func TestAgentBinary(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home")
	own := filepath.Join(home, ".local", "bin")
	sticky := filepath.Join(root, "tmp")
	for _, d := range []string{own, sticky} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(sticky, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(own, "commandcore"), filepath.Join(home, "commandcore"), filepath.Join(sticky, "commandcore")} {
		if err := os.WriteFile(f, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(filepath.Join(own, "commandcore"), link); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	for exe, want := range map[string]BinaryDir{
		filepath.Join(own, "commandcore"):    {Dir: own, Writable: true},
		link:                                 {Dir: own, Writable: true},
		filepath.Join(home, "commandcore"):   {Dir: home, Writable: true, Shared: true},
		filepath.Join(sticky, "commandcore"): {Dir: sticky, Writable: true, Shared: true},
		filepath.Join(root, "missing"):       {},
		"":                                   {},
	} {
		if got := AgentBinary(exe); got != want {
			t.Errorf("%q: %+v, want %+v", exe, got, want)
		}
	}
	if b := AgentBinary(filepath.Join(own, "commandcore")); !b.ReadOnly() {
		t.Errorf("a directory of the user's own is not to be read-only: %+v", b)
	}
	if b := AgentBinary("/bin/sh"); b.ReadOnly() || os.Geteuid() == 0 && !b.Shared {
		t.Errorf("a system directory of commands is to be read-only: %+v", b)
	}
}

// TestManagerConfig: the user manager's configuration a cut keeps
// read-only is under $XDG_CONFIG_HOME, $XDG_DATA_HOME (or $HOME) and each
// runtime directory that exists; none without a home, nor where a
// symbolic link the user could point elsewhere leads there.
func TestManagerConfig(t *testing.T) {
	home, runtime := t.TempDir(), t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("XDG_DATA_HOME", "relative/is/ignored")
	t.Setenv("XDG_RUNTIME_DIR", runtime)
	got, ok := ManagerConfig()
	want := []string{home + "/.config/systemd", home + "/.config/environment.d", home + "/.local/share/systemd", runtime + "/systemd"}
	if run := fmt.Sprintf("/run/user/%d", os.Getuid()); dirExists(run) {
		want = append(want, resolved(run)+"/systemd")
	}
	if !ok || !slices.Equal(got, want) {
		t.Fatalf("%q %v, want %q", got, ok, want)
	}
	elsewhere := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", elsewhere)
	if got, _ := ManagerConfig(); got[0] != elsewhere+"/systemd" || got[1] != elsewhere+"/environment.d" {
		t.Fatalf("with XDG_CONFIG_HOME: %q", got)
	}
	if err := os.Symlink(elsewhere, filepath.Join(home, ".config")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_CONFIG_HOME", "")
	if got, ok := ManagerConfig(); ok {
		t.Fatalf("through a link in the user's home: %q", got)
	}
	t.Setenv("HOME", "")
	if got, ok := ManagerConfig(); ok {
		t.Fatalf("without a home: %q", got)
	}
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// TestUnitPropertiesKeepDirectoriesReadOnly: each read-only directory is
// bound read-only over itself, recursively, and each directory on the way
// to it that could be renamed is bound over itself; a unit without any
// gets neither.
func TestUnitPropertiesKeepDirectoriesReadOnly(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	root := t.TempDir()
	bin := filepath.Join(root, "home", ".local", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	l := &Launcher{Exe: "/bin/commandcore", Hide: &Hidden{State: "/s", Config: "/c", ReadOnly: []string{bin}}}
	var binds, readOnly []bindPath
	for _, p := range l.UnitProperties(Spec{Unit: "u.service", JobDir: "/s/jobs/j", Stdin: r}) {
		switch p.Name {
		case "BindPaths":
			binds = p.Value.Value().([]bindPath)
		case "BindReadOnlyPaths":
			readOnly = p.Value.Value().([]bindPath)
		}
	}
	if want := []bindPath{{Source: bin, Dest: bin, Flags: unix.MS_REC}}; !slices.Equal(readOnly, want) {
		t.Errorf("BindReadOnlyPaths = %v, want %v", readOnly, want)
	}
	if len(binds) == 0 || binds[0] != (bindPath{Source: "/s/jobs/j", Dest: "/s/jobs/j"}) {
		t.Fatalf("BindPaths = %v", binds)
	}
	var pinned []string
	for _, b := range binds[1:] {
		if b.Source != b.Dest || b.Flags != unix.MS_REC {
			t.Errorf("a pin that is no recursive bind over itself: %v", b)
		}
		if strings.HasPrefix(b.Dest, root+"/") {
			pinned = append(pinned, strings.TrimPrefix(b.Dest, root))
		}
	}
	if want := []string{"/home", "/home/.local"}; !slices.Equal(pinned, want) {
		t.Errorf("pinned %q under the test's directory, want %q", pinned, want)
	}
}

// TestUnitSeesDirectoriesReadOnly, against the real user manager: where
// the probes say so, a job unit cannot change the binary's directory
// (write, append, rename or link over, remove, change the mode of a file;
// create in it; rename it or its parent), nor, cut off, the manager's
// unit directory; a unit not cut off writes the unit directory. The
// probes leave nothing behind.
func TestUnitSeesDirectoriesReadOnly(t *testing.T) {
	m, err := systemdtest.Ensure()
	if err != nil {
		t.Fatal(err)
	}
	state, config, root := t.TempDir(), t.TempDir(), t.TempDir()
	bin, units := filepath.Join(root, "home", ".local", "bin"), filepath.Join(root, "home", ".config", "systemd")
	for _, d := range []string{bin, filepath.Join(units, "user")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe, unit := filepath.Join(bin, "commandcore"), filepath.Join(units, "user", "commandcore.service")
	for _, f := range []string{exe, unit} {
		if err := os.WriteFile(f, []byte("as it was\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l := New("", false)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hide := Hidden{State: state, Config: config, ReadOnly: []string{bin}}
	cut := Hidden{State: state, Config: config, ReadOnly: []string{bin, units}}
	hidden, cutOK := l.ProbeHiding(ctx, hide), l.ProbeCut(ctx, cut)
	for _, d := range []string{state, config} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Errorf("%s holds %v after the probes", d, ents)
		}
	}
	if !hidden || !cutOK {
		t.Skipf("this user manager cannot keep directories read-only (hidden %v, cut %v)", hidden, cutOK)
	}
	l.Hide, l.Cut = &hide, &cut
	job := filepath.Join(state, "job")
	if err := os.Mkdir(job, 0o700); err != nil {
		t.Fatal(err)
	}
	env := sdbus.Property{Name: "Environment", Value: dbus.MakeVariant([]string{"DBUS_SESSION_BUS_ADDRESS=" + m.BusAddress(), "XDG_RUNTIME_DIR=" + m.RuntimeDir()})}
	// changed runs the attempts in such a unit and returns what they
	// changed.
	changed := func(cutOff bool, files, dirs []string) string {
		var b strings.Builder
		b.WriteString("printf evil > evil; ")
		for _, f := range files {
			fmt.Fprintf(&b, `f=%q; printf evil > "$f" && echo "overwrote $f"; printf evil >> "$f" && echo "appended to $f"; `+
				`cp evil evil2 && mv -f evil2 "$f" && echo "moved over $f"; ln -f evil "$f" && echo "linked over $f"; `+
				`mv "$f" "$f.x" && echo "renamed $f"; rm -f "$f" && echo "removed $f"; chmod 777 "$f" && echo "chmodded $f"; `, f)
		}
		for _, d := range dirs {
			fmt.Fprintf(&b, `d=%q; true > "$d/new" && echo "created in $d"; mv "$d" "$d.x" && echo "moved $d"; `+
				`mv "${d%%/*}" "${d%%/*}.x" && echo "moved the parent of $d"; `, d)
		}
		script := "cd " + job + " && { " + b.String() + "true; } > out 2>/dev/null"
		name := fmt.Sprintf("commandcore-probe-test-%d.service", time.Now().UnixNano())
		props := append([]sdbus.Property{sdbus.PropType("oneshot"), env,
			sdbus.PropExecStart([]string{"/bin/sh", "-c", script}, false)}, l.confinement(job, cutOff)...)
		if !l.runThrowaway(ctx, name, props) {
			t.Fatalf("the unit (cut %v) did not run", cutOff)
		}
		out, err := os.ReadFile(filepath.Join(job, "out"))
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	if out := changed(false, []string{exe}, []string{bin}); out != "" {
		t.Errorf("a job unit changed the binary's directory:\n%s", out)
	}
	if out := changed(true, []string{exe, unit}, []string{bin, filepath.Join(units, "user")}); out != "" {
		t.Errorf("a cut-off job unit changed the binary's or the unit directory:\n%s", out)
	}
	for _, f := range []string{exe, unit} {
		if b, err := os.ReadFile(f); err != nil || string(b) != "as it was\n" {
			t.Errorf("%s: %q %v", f, b, err)
		}
	}
	if out := changed(false, nil, []string{filepath.Join(units, "user")}); !strings.Contains(out, "created in ") {
		t.Errorf("a job unit not cut off could not write the unit directory: %q", out)
	}
}
