package tools

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/owndirs"
)

// TestUntilPathResolvesAsTheFileTools: until.path exists for a file, a
// directory and a link to either, not for a dangling link or a name under
// a missing directory; inside the agent's own directories, or through a
// link into them, it is refused rather than answered, and so is a
// per-process file under /proc.
func TestUntilPathResolvesAsTheFileTools(t *testing.T) {
	base := t.TempDir()
	state := filepath.Join(base, "state")
	os.MkdirAll(filepath.Join(state, "jobs"), 0o700)
	own, err := owndirs.New(state)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o600)
	os.Symlink(file, filepath.Join(base, "to-file"))
	os.Symlink(filepath.Join(base, "none"), filepath.Join(base, "dangling"))
	os.Symlink(state, filepath.Join(base, "to-state"))
	exists := pathExists(own)
	for name, want := range map[string]bool{
		file: true, base: true, "/": true, filepath.Join(base, "to-file"): true,
		filepath.Join(base, "none"): false, filepath.Join(base, "dangling"): false, filepath.Join(base, "no", "such", "dir"): false,
		filepath.Join(base, "file", "under-a-file"): false,
	} {
		if got, err := exists(name); err != nil || got != want {
			t.Errorf("%s: %v, %v; want %v", name, got, err, want)
		}
	}
	for _, refused := range []string{state, filepath.Join(state, "jobs"), filepath.Join(base, "to-state", "jobs"), filepath.Join(state, "missing"), "/proc/self/environ"} {
		if got, err := exists(refused); !errcode.Is(err, errcode.PermissionDenied) || got {
			t.Errorf("%s: %v, %v; want permission_denied", refused, got, err)
		}
	}
}
