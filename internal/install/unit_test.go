package install_test

import (
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/install"
)

// The packaged unit in install/ is the template rendered for /usr/bin.
func TestPackagedUnitIsCurrent(t *testing.T) {
	got, err := os.ReadFile("../../install/commandcore.service")
	if err != nil {
		t.Fatal(err)
	}
	want, err := install.Render(install.Options{Exe: install.PackagedExe, UnitDir: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("install/commandcore.service is stale; run `go generate ./internal/install/`\nwant:\n%s", want)
	}
}

func TestRenderDefault(t *testing.T) {
	unit, err := install.Render(install.Options{Exe: "/usr/bin/commandcore", UnitDir: "/"})
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"Description=CommandCore agent\n",
		"StartLimitIntervalSec=120\n",
		"StartLimitBurst=5\n",
		"Type=notify\n",
		"NotifyAccess=main\n",
		"ExecStart=/usr/bin/commandcore agent --installed\n",
		"WatchdogSec=30s\n",
		"Restart=on-failure\n",
		"RestartSec=5s\n",
		"WantedBy=default.target\n",
	} {
		if !strings.Contains(string(unit), "\n"+line) {
			t.Errorf("unit lacks %q:\n%s", line, unit)
		}
	}
	if strings.Index(string(unit), "StartLimitBurst") > strings.Index(string(unit), "[Service]") {
		t.Errorf("start limits belong in [Unit]:\n%s", unit)
	}
}

func TestRenderCustom(t *testing.T) {
	unit, err := install.Render(install.Options{
		Service:   "cc-dev",
		Exe:       "/opt/my tools/100%/commandcore",
		UnitDir:   "/",
		StateDir:  "/var/tmp/cc $HOME",
		ConfigDir: `/etc/cc"x\y`,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `ExecStart="/opt/my tools/100%%/commandcore" agent --installed --service cc-dev.service --state-dir "/var/tmp/cc $$HOME" --config-dir "/etc/cc\"x\\y"` + "\n"
	if !strings.Contains(string(unit), "\n"+want) {
		t.Errorf("want %s in:\n%s", want, unit)
	}
	if !strings.Contains(string(unit), "\nDescription=CommandCore agent (cc-dev.service)\n") {
		t.Errorf("description:\n%s", unit)
	}
}

func TestServiceName(t *testing.T) {
	for in, want := range map[string]string{
		"":                    "commandcore.service",
		"commandcore":         "commandcore.service",
		"cc-dev.service":      "cc-dev.service",
		"cc_dev:2.beta":       "cc_dev:2.beta.service",
		"commandcore.service": "commandcore.service",
	} {
		if got, err := install.ServiceName(in); err != nil || got != want {
			t.Errorf("ServiceName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{
		".service", "../x", "a/b.service", "x@y.service", "a b", "-x", ".hidden",
		"commandcore-job-1-2.service", "x\n.service", strings.Repeat("x", 250),
	} {
		if got, err := install.ServiceName(bad); err == nil {
			t.Errorf("ServiceName(%q) = %q, want an error", bad, got)
		}
	}
}

func TestRenderRejects(t *testing.T) {
	for name, o := range map[string]install.Options{
		"relative exe":   {Exe: "bin/commandcore", UnitDir: "/"},
		"bad service":    {Service: "a/b", Exe: "/x", UnitDir: "/"},
		"newline in dir": {Exe: "/x", UnitDir: "/", StateDir: "/tmp/a\nb"},
	} {
		if _, err := install.Render(o); err == nil {
			t.Errorf("%s: rendered", name)
		}
	}
}

func TestLingering(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(install.SetLingerDir(dir))
	if on, err := install.Lingering(); err != nil || on {
		t.Fatalf("without a linger file: %v, %v", on, err)
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, u.Username), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if on, err := install.Lingering(); err != nil || !on {
		t.Fatalf("with a linger file: %v, %v", on, err)
	}
}
