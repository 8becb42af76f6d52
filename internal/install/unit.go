// Package install writes, enables and starts the agent's systemd user unit
// (`commandcore install`) and takes it away again (`commandcore uninstall`).
//
// It never touches the agent's state directory: the local device ID, the job
// metadata and the activity journal are the agent's, created on its first run
// and kept across reinstalls and uninstalls.
package install

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/template"

	"github.com/commandcore/commandcore/internal/jobmeta"
)

// DefaultService is the agent's unit name unless --service says otherwise.
const DefaultService = "commandcore.service"

// PackagedExe is where the .deb and .rpm put the binary; the packaged unit
// (install/commandcore.service) is the template rendered for it.
const PackagedExe = "/usr/bin/commandcore"

// jobUnitPrefix starts the names of the agent's transient job units; the
// agent's own unit must not be mistaken for one.
const jobUnitPrefix = jobmeta.UnitPrefix

//go:embed commandcore.service.tmpl
var unitTemplate string

// unitTmpl is parsed on first use, not at init: every role of the binary
// (the per-job supervisor too) runs every package's init.
var unitTmpl = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("unit").Option("missingkey=error").Parse(unitTemplate))
})

// Options say which unit to install and what it runs.
type Options struct {
	// Service is the unit name. Empty means DefaultService; a name without
	// the ".service" suffix gets it.
	Service string
	// Exe is the absolute path of the binary the unit runs. Empty means
	// this process's own executable.
	Exe string
	// UnitDir is where the unit file goes. Empty means
	// $XDG_CONFIG_HOME/systemd/user, else ~/.config/systemd/user. It must be
	// a directory the user manager loads units from.
	UnitDir string
	// StateDir and ConfigDir reach the agent as --state-dir and
	// --config-dir, only when set; otherwise the agent resolves its own
	// defaults (which follow the service name).
	StateDir  string
	ConfigDir string
}

// resolved is Options with every default filled in and every value checked.
type resolved struct {
	Service, Exe, UnitDir, StateDir, ConfigDir string
}

// UnitPath is where the unit file goes.
func (r *resolved) UnitPath() string { return filepath.Join(r.UnitDir, r.Service) }

// ServiceName validates a unit name for the agent and returns it with the
// ".service" suffix: a plain name of letters, digits and ":_.-", not a
// template instance, not a path.
func ServiceName(name string) (string, error) {
	if name == "" {
		return DefaultService, nil
	}
	if !strings.HasSuffix(name, ".service") {
		name += ".service"
	}
	base := strings.TrimSuffix(name, ".service")
	switch {
	case base == "":
		return "", errors.New("invalid service name: empty")
	case len(name) > 255:
		return "", errors.New("invalid service name: longer than 255 bytes")
	case base[0] == '.' || base[0] == '-':
		return "", fmt.Errorf("invalid service name %q: must not start with %q", name, base[0])
	case strings.HasPrefix(name, jobUnitPrefix):
		return "", fmt.Errorf("invalid service name %q: %s* names belong to managed jobs", name, jobUnitPrefix)
	}
	for _, c := range base {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune(":_.-", c)) {
			return "", fmt.Errorf("invalid service name %q: only letters, digits and \":_.-\" are allowed", name)
		}
	}
	return name, nil
}

// resolve fills in the defaults and validates o. It reads nothing but the
// environment and does not check that Exe exists.
func (o Options) resolve() (*resolved, error) {
	r := &resolved{}
	var err error
	if r.Service, err = ServiceName(o.Service); err != nil {
		return nil, err
	}
	r.Exe = o.Exe
	if r.Exe == "" {
		if r.Exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find own executable: %w", err)
		}
	}
	if !filepath.IsAbs(r.Exe) {
		return nil, fmt.Errorf("executable path %q is not absolute", r.Exe)
	}
	r.Exe = filepath.Clean(r.Exe)
	if r.UnitDir, err = unitDir(o.UnitDir); err != nil {
		return nil, err
	}
	for _, d := range []struct {
		dst  *string
		src  string
		what string
	}{{&r.StateDir, o.StateDir, "state"}, {&r.ConfigDir, o.ConfigDir, "config"}} {
		if d.src == "" {
			continue
		}
		if *d.dst, err = filepath.Abs(d.src); err != nil {
			return nil, fmt.Errorf("%s directory: %w", d.what, err)
		}
	}
	for _, p := range []string{r.Exe, r.UnitDir, r.StateDir, r.ConfigDir} {
		if strings.ContainsFunc(p, isControl) {
			return nil, fmt.Errorf("path %q contains a control character", p)
		}
	}
	return r, nil
}

// unitDir returns dir, or the user's default unit directory.
func unitDir(dir string) (string, error) {
	if dir != "" {
		return filepath.Abs(dir)
	}
	if base := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(base) {
		return filepath.Join(base, "systemd", "user"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory for the default unit directory: %w", err)
	}
	return filepath.Join(home, ".config", "systemd", "user"), nil
}

func isControl(c rune) bool { return c < 0x20 || c == 0x7f }

// args is the agent's command line after the executable.
func (r *resolved) args() []string {
	args := []string{"agent", "--installed"}
	if r.Service != DefaultService {
		args = append(args, "--service", r.Service)
	}
	if r.StateDir != "" {
		args = append(args, "--state-dir", r.StateDir)
	}
	if r.ConfigDir != "" {
		args = append(args, "--config-dir", r.ConfigDir)
	}
	return args
}

// Render returns the unit file for o.
func Render(o Options) ([]byte, error) {
	r, err := o.resolve()
	if err != nil {
		return nil, err
	}
	return r.render()
}

func (r *resolved) render() ([]byte, error) {
	words := []string{execQuote(r.Exe)}
	for _, a := range r.args() {
		words = append(words, execQuote(a))
	}
	desc := "CommandCore agent"
	if r.Service != DefaultService {
		desc += " (" + r.Service + ")"
	}
	var b bytes.Buffer
	err := unitTmpl().Execute(&b, map[string]string{
		"Name":        r.Service,
		"Description": desc,
		"ExecStart":   strings.Join(words, " "),
	})
	if err != nil {
		return nil, fmt.Errorf("render unit: %w", err)
	}
	return b.Bytes(), nil
}

// execQuote writes one ExecStart= word so that systemd reads back exactly s:
// "%" and "$" are doubled (no specifier or variable expansion), and a word
// with anything but plain path characters is double-quoted with C escapes.
func execQuote(s string) string {
	s = strings.NewReplacer("%", "%%", "$", "$$").Replace(s)
	plain := s != "" && !strings.ContainsFunc(s, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("/._-+=:,@%$", c))
	})
	if plain {
		return s
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// The packaged unit is this template rendered for PackagedExe; a test checks
// that the copy in install/ is current.
//go:generate go run ./cmd/unitgen -o ../../install/commandcore.service
