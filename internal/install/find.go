package install

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// ErrNotInstalled reports a service with no unit in the user's unit
// directory.
var ErrNotInstalled = errors.New("not installed")

// maxUnitBytes bounds a unit file read back; ours is under 2 KiB.
const maxUnitBytes = 64 << 10

// Installed is an agent unit as the user's systemd configuration has it.
type Installed struct {
	// Path is the unit file: the user's own, or the packaged one that
	// `systemctl --user enable` linked into default.target.wants/.
	Path string
	// StateDir and ConfigDir are the directories its ExecStart gives the
	// agent; empty where the agent resolves its defaults.
	StateDir, ConfigDir string
}

// Find returns the installed unit of service, ErrNotInstalled when there is
// none, or the unit's path with an error when its ExecStart cannot be read
// back.
func Find(service string) (*Installed, error) {
	name, err := ServiceName(service)
	if err != nil {
		return nil, err
	}
	dir, err := unitDir("")
	if err != nil {
		return nil, err
	}
	for _, path := range []string{filepath.Join(dir, name), filepath.Join(dir, "default.target.wants", name)} {
		fi, err := os.Stat(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		in := &Installed{Path: path}
		if err == nil && !fi.Mode().IsRegular() {
			err = errors.New("not a regular file")
		}
		if err == nil {
			err = in.read(dir, name)
		}
		if err != nil {
			return in, fmt.Errorf("unit file %s: %w", path, err)
		}
		return in, nil
	}
	return nil, ErrNotInstalled
}

// read reads the unit's ExecStart back, then that of its drop-ins beside
// it (NAME.d/*.conf, in name order, as systemd applies them; `systemctl
// --user edit` writes one there), so an override of ExecStart is what
// counts.
func (in *Installed) read(dir, name string) error {
	data, err := readUnitFile(in.Path)
	if err != nil {
		return err
	}
	words, found, err := execStart(data, nil, false)
	if err != nil {
		return err
	}
	dropIns, _ := filepath.Glob(filepath.Join(dir, name+".d", "*.conf"))
	for _, path := range dropIns {
		data, err := readUnitFile(path)
		if err != nil {
			return fmt.Errorf("drop-in %s: %w", path, err)
		}
		if words, found, err = execStart(data, words, found); err != nil {
			return fmt.Errorf("drop-in %s: %w", path, err)
		}
	}
	if !found {
		return errors.New("no ExecStart= in [Service]")
	}
	in.StateDir, in.ConfigDir = flagValue(words, "--state-dir"), flagValue(words, "--config-dir")
	return nil
}

// readUnitFile reads one unit file or drop-in, bounded.
func readUnitFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxUnitBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxUnitBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxUnitBytes)
	}
	return data, nil
}

// flagValue is the value of --name in args ("--name v" or "--name=v").
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// parseExecStart returns the words of the last ExecStart= of a unit's
// [Service] section, reading back what render wrote: plain words, and
// double-quoted ones with \" and \\ escapes, "%%" and "$$" undoubled. A
// line it cannot read exactly (a specifier, a variable, another escape, a
// continuation) is an error rather than a guess.
func parseExecStart(unit []byte) ([]string, error) {
	words, found, err := execStart(unit, nil, false)
	if err == nil && !found {
		err = errors.New("no ExecStart= in [Service]")
	}
	return words, err
}

// execStart applies one unit file's ExecStart= lines to the words so far:
// each one replaces them, and an empty one resets them, as in a drop-in.
func execStart(unit []byte, words []string, found bool) ([]string, bool, error) {
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(unit))
	sc.Buffer(make([]byte, 0, 4096), maxUnitBytes)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "["):
			section = line
			continue
		case section != "[Service]":
			continue
		}
		value, ok := strings.CutPrefix(line, "ExecStart=")
		if !ok {
			continue
		}
		w, err := splitExec(value)
		if err != nil {
			return nil, false, err
		}
		words, found = w, len(w) > 0
	}
	if err := sc.Err(); err != nil {
		return nil, false, err
	}
	return words, found, nil
}

// splitExec splits one ExecStart= value into its words.
func splitExec(s string) ([]string, error) {
	if strings.HasSuffix(s, `\`) {
		return nil, errors.New("ExecStart= continues on the next line")
	}
	var words []string
	for {
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			return words, nil
		}
		var w strings.Builder
		if s[0] == '"' {
			i := 1
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' {
					if i+1 == len(s) || s[i+1] != '"' && s[i+1] != '\\' {
						return nil, errors.New("ExecStart= has an escape other than \\\" and \\\\")
					}
					i++
				}
				w.WriteByte(s[i])
			}
			if i == len(s) {
				return nil, errors.New("ExecStart= has an unterminated quote")
			}
			s = s[i+1:]
			if s != "" && s[0] != ' ' && s[0] != '\t' {
				return nil, errors.New("ExecStart= has a quote inside a word")
			}
		} else {
			end := strings.IndexAny(s, " \t")
			if end < 0 {
				end = len(s)
			}
			if strings.ContainsAny(s[:end], `"\'`) {
				return nil, errors.New("ExecStart= has a quote or escape inside a word")
			}
			w.WriteString(s[:end])
			s = s[end:]
		}
		word, err := undouble(w.String())
		if err != nil {
			return nil, err
		}
		words = append(words, word)
	}
}

// undouble reverses the doubling of "%" and "$"; a single one is a
// specifier or a variable, which only systemd can expand.
func undouble(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' || c == '$' {
			if i+1 == len(s) || s[i+1] != c {
				return "", fmt.Errorf("ExecStart= uses a %q specifier or variable", c)
			}
			i++
		}
		b.WriteByte(c)
	}
	return b.String(), nil
}
