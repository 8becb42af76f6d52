// Package statedir resolves the agent's state and config directories and
// keeps the local device ID stored in the state directory.
package statedir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/uuid"

	"github.com/commandcore/commandcore/internal/atomicfile"
	"github.com/commandcore/commandcore/internal/uuidtext"
)

// Dirs are the directories one CommandCore installation uses.
type Dirs struct {
	State  string
	Config string
	// Service is the agent's unit name; an installation under a custom
	// name keeps its own directories. Empty means DefaultService.
	Service string
}

// ErrInvalidService reports a service name that cannot name a directory.
var ErrInvalidService = errors.New("invalid service name")

// DefaultService is the agent's user unit name.
const DefaultService = "commandcore.service"

// Resolve fills empty fields with the XDG defaults
// ($XDG_STATE_HOME/<name>, $XDG_CONFIG_HOME/<name>, where <name> is the
// service name without ".service": commandcore by default).
func Resolve(d Dirs) (Dirs, error) {
	if d.Service == "" {
		d.Service = DefaultService
	}
	name := strings.TrimSuffix(d.Service, ".service")
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return d, ErrInvalidService
	}
	home, herr := os.UserHomeDir()
	pick := func(given, xdgVar, fallback string) (string, error) {
		if given != "" {
			return filepath.Abs(given)
		}
		if base := os.Getenv(xdgVar); filepath.IsAbs(base) {
			return filepath.Join(base, name), nil
		}
		if herr != nil {
			return "", fmt.Errorf("no home directory for the default %s: %w", xdgVar, herr)
		}
		return filepath.Join(home, fallback, name), nil
	}
	var err error
	if d.State, err = pick(d.State, "XDG_STATE_HOME", ".local/state"); err != nil {
		return d, err
	}
	if d.Config, err = pick(d.Config, "XDG_CONFIG_HOME", ".config"); err != nil {
		return d, err
	}
	return d, nil
}

// localDeviceFile holds the local device ID; it is kept across reinstalls.
const localDeviceFile = "device.json"

type localDevice struct {
	Schema   int    `json:"schema"`
	DeviceID string `json:"device_id"`
}

// LocalDeviceID returns the local device ID stored in stateDir (the one
// job records name; an enrolled device's server-side ID is
// enrollment.Credential.DeviceID), creating the directory (0700) and a new
// ID on first use.
func LocalDeviceID(stateDir string) (string, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return "", fmt.Errorf("create state directory: %w", err)
	}
	path := filepath.Join(stateDir, localDeviceFile)
	for attempt := 0; ; attempt++ {
		id, err := readLocalDevice(path)
		if !errors.Is(err, os.ErrNotExist) || attempt > 0 {
			return id, err
		}
		if err := createLocalDevice(path); err != nil {
			return "", err
		}
	}
}

// Existing reports, naming stateDir, when it is not an existing
// directory. Commands that read or act on what an agent left there call it
// instead of creating the directory: a mistyped --state-dir is an error,
// never an empty answer.
func Existing(stateDir string) error {
	fi, err := os.Stat(stateDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("state directory %s does not exist (no agent has run with it; check --state-dir or --service)", stateDir)
	case err != nil:
		return fmt.Errorf("state directory: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("state directory %s is not a directory", stateDir)
	}
	return nil
}

// ExistingLocalDeviceID returns the local device ID stored in stateDir, or
// "" when none was ever created; it creates nothing.
func ExistingLocalDeviceID(stateDir string) (string, error) {
	id, err := readLocalDevice(filepath.Join(stateDir, localDeviceFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	return id, err
}

func readLocalDevice(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		return "", fmt.Errorf("read local device ID: %w", err)
	}
	var d localDevice
	if err := json.Unmarshal(data, &d); err != nil || !uuidtext.Canonical(d.DeviceID) {
		return "", fmt.Errorf("local device ID file is corrupt")
	}
	return d.DeviceID, nil
}

// createLocalDevice publishes a new local device ID unless another process
// (an agent and `commandcore mcp` starting together) got there first.
func createLocalDevice(path string) error {
	data, err := json.Marshal(&localDevice{Schema: 1, DeviceID: uuid.NewString()})
	if err != nil {
		return fmt.Errorf("encode local device ID: %w", err)
	}
	if err := atomicfile.Create(path, data, 0o600); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("publish local device ID: %w", err)
	}
	return nil
}

// JournalPath is the activity journal's database in stateDir.
func JournalPath(stateDir string) string { return filepath.Join(stateDir, "activity.db") }
