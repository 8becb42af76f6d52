package install_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/install"
)

// TestFindReadsTheUnitsDirectories: a unit install wrote gives back the
// directories its agent uses, however odd their names; a service without a
// unit is not installed; a drop-in's ExecStart overrides the unit's; a unit
// enabled from elsewhere is found by its link.
func TestFindReadsTheUnitsDirectories(t *testing.T) {
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	unitDir := filepath.Join(cfg, "systemd", "user")
	if _, err := install.Find("cc-find"); !errors.Is(err, install.ErrNotInstalled) {
		t.Fatalf("Find without a unit: %v, want ErrNotInstalled", err)
	}
	o := install.Options{Service: "cc-find", Exe: "/opt/bin dir 100%/commandcore", UnitDir: unitDir,
		StateDir: `/var/tmp/cc $HOME "x"`, ConfigDir: `/etc/c\c%h`}
	unit, err := install.Render(o)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(unitDir, 0o755)
	if err := os.WriteFile(filepath.Join(unitDir, "cc-find.service"), unit, 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := install.Find("cc-find")
	if err != nil || in.Path != filepath.Join(unitDir, "cc-find.service") || in.StateDir != o.StateDir || in.ConfigDir != o.ConfigDir {
		t.Fatalf("Find = %+v, %v; want the unit's directories %q and %q", in, err, o.StateDir, o.ConfigDir)
	}

	// An override (what `systemctl --user edit` writes) resets ExecStart
	// and sets another: its directories count. Drop-ins apply in name
	// order, and one without ExecStart changes nothing.
	dropIns := filepath.Join(unitDir, "cc-find.service.d")
	os.MkdirAll(dropIns, 0o755)
	os.WriteFile(filepath.Join(dropIns, "10-first.conf"), []byte("[Service]\nExecStart=\nExecStart=/bin/commandcore agent --state-dir /first\n"), 0o644)
	os.WriteFile(filepath.Join(dropIns, "override.conf"), []byte("[Service]\nExecStart=\nExecStart=/bin/commandcore agent --state-dir /srv/cc-state --config-dir=/srv/cc-config\n"), 0o644)
	os.WriteFile(filepath.Join(dropIns, "zz-env.conf"), []byte("[Service]\nEnvironment=A=1\n"), 0o644)
	os.WriteFile(filepath.Join(dropIns, "ignored.txt"), []byte("[Service]\nExecStart=/bin/other --state-dir /nope\n"), 0o644)
	if in, err := install.Find("cc-find"); err != nil || in.StateDir != "/srv/cc-state" || in.ConfigDir != "/srv/cc-config" {
		t.Fatalf("Find with an override = %+v, %v; want /srv/cc-state and /srv/cc-config", in, err)
	}
	// A drop-in it cannot read back is an error, not a guess.
	os.WriteFile(filepath.Join(dropIns, "zzz-odd.conf"), []byte("[Service]\nExecStart=\nExecStart=/bin/commandcore agent --state-dir %h/x\n"), 0o644)
	if in, err := install.Find("cc-find"); in == nil || err == nil || !strings.Contains(err.Error(), "zzz-odd.conf") {
		t.Fatalf("Find with an unreadable drop-in = %+v, %v", in, err)
	}
	os.RemoveAll(dropIns)

	// The packaged unit, enabled with `systemctl --user enable`: a link,
	// and no directories (the agent uses its defaults).
	packaged := filepath.Join(t.TempDir(), "commandcore.service")
	data, _ := install.Render(install.Options{Exe: install.PackagedExe, UnitDir: "/"})
	os.WriteFile(packaged, data, 0o644)
	os.MkdirAll(filepath.Join(unitDir, "default.target.wants"), 0o755)
	if err := os.Symlink(packaged, filepath.Join(unitDir, "default.target.wants", "commandcore.service")); err != nil {
		t.Fatal(err)
	}
	if in, err := install.Find("commandcore"); err != nil || in.StateDir != "" || in.ConfigDir != "" {
		t.Fatalf("Find of the enabled packaged unit = %+v, %v", in, err)
	}

	// A unit it cannot read back exactly is installed, with an error.
	os.WriteFile(filepath.Join(unitDir, "cc-odd.service"), []byte("[Service]\nExecStart=/bin/commandcore agent --state-dir %h/x\n"), 0o644)
	if in, err := install.Find("cc-odd"); in == nil || err == nil || !strings.Contains(err.Error(), "specifier") {
		t.Fatalf("Find of a unit with a specifier = %+v, %v; want its path and an error", in, err)
	}
}

func TestParseExecStart(t *testing.T) {
	for unit, want := range map[string][]string{
		"[Service]\nExecStart=/bin/cc agent\n":                                 {"/bin/cc", "agent"},
		"[Service]\nExecStart=\"/a b/cc\" x\\y --d=\"q\"\n":                    nil, // a quote inside a word
		"[Service]\nExecStart=/bin/one\nExecStart=\nExecStart=/bin/two  a\n":   {"/bin/two", "a"},
		"[Unit]\nExecStart=/bin/not\n[Service]\nType=notify\nExecStart=/b/c\n": {"/b/c"},
		"[Service]\nExecStart=\"/100%% \\\"q\\\" \\\\\" $$X\n":                 {`/100% "q" \`, "$X"},
		"[Service]\nExecStart=/bin/cc \\\n  agent\n":                           nil,
		"[Service]\nExecStart=\"/bin/cc\n":                                     nil,
		"[Service]\nExecStart=/bin/$HOME\n":                                    nil,
		"[Service]\nExecStart=\"/bin/\\n\"\n":                                  nil,
		"[Unit]\nDescription=none\n":                                           nil,
		"[Service]\nExecStart=\n":                                              nil,
		"[Service]\nExecStart=/bin/cc 'single'\n":                              nil,
		"[Service]\nExecStart=/bin/cc\n[Install]\nExecStart=/bin/other\n":      {"/bin/cc"},
		"[Service]\r\nExecStart=/bin/cc a\r\n":                                 {"/bin/cc", "a"},
		"[Service]\nExecStart=/bin/cc \"\"\n":                                  {"/bin/cc", ""},
		"[Service]\nExecStart=\t/bin/cc\t\"a b\"\t\n":                          {"/bin/cc", "a b"},
	} {
		got, err := install.ParseExecStart([]byte(unit))
		if want == nil {
			if err == nil {
				t.Errorf("%q: parsed as %q, want an error", unit, got)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %q, %v; want %q", unit, got, err, want)
		}
	}
}

// FuzzParseExecStart: any unit file is read without a panic, and the unit
// install writes for any directories reads back as those directories.
func FuzzParseExecStart(f *testing.F) {
	f.Add([]byte("[Service]\nExecStart=/bin/cc agent\n"), "/var/tmp/cc $HOME", `/etc/c"c\%`)
	f.Add([]byte("[Service]\nExecStart=\"/a \\\"b\" %%\n"), "/s", "/c")
	f.Fuzz(func(t *testing.T, unit []byte, state, config string) {
		if words, err := install.ParseExecStart(unit); err == nil && len(words) == 0 {
			t.Fatalf("%q: no words and no error", unit)
		}
		if !filepath.IsAbs(state) || !filepath.IsAbs(config) {
			return
		}
		o := install.Options{Exe: "/bin/commandcore", UnitDir: "/", StateDir: state, ConfigDir: config}
		data, err := install.Render(o)
		if err != nil {
			return // control characters are refused
		}
		words, err := install.ParseExecStart(data)
		want := []string{"/bin/commandcore", "agent", "--installed", "--state-dir", filepath.Clean(state), "--config-dir", filepath.Clean(config)}
		if err != nil || !reflect.DeepEqual(words, want) {
			t.Fatalf("rendered %q, read back %q, %v; want %q", data, words, err, want)
		}
	})
}
