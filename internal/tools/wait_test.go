package tools

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobs"
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

// TestUntilPathNeedsFilesList: until.path is refused where the owner's
// permissions.json refuses files.list (or is broken), whatever the path;
// the other conditions are not.
func TestUntilPathNeedsFilesList(t *testing.T) {
	ceiling := func(body string) string {
		dir := t.TempDir()
		if body != "" {
			if err := os.WriteFile(filepath.Join(dir, authz.CeilingFile), []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	port := 80
	path := jobs.WaitRequest{ProcessIDs: []string{"p"}, Until: &jobs.Until{Path: "/tmp"}}
	for name, tc := range map[string]struct {
		dir    string
		req    jobs.WaitRequest
		denied bool
	}{
		"no permissions.json":         {ceiling(""), path, false},
		"files.list allowed":          {ceiling(`{"schema_version":1,"tools":["process.*","files.list"]}`), path, false},
		"files.* allowed":             {ceiling(`{"schema_version":1,"tools":["process.wait","files.*"]}`), path, false},
		"files.list not allowed":      {ceiling(`{"schema_version":1,"tools":["process.*","files.read"]}`), path, true},
		"a broken permissions.json":   {ceiling(`{"tools":`), path, true},
		"a port without files.list":   {ceiling(`{"schema_version":1,"tools":["process.*"]}`), jobs.WaitRequest{Until: &jobs.Until{Port: &port}}, false},
		"no until without files.list": {ceiling(`{"schema_version":1,"tools":["process.*"]}`), jobs.WaitRequest{}, false},
	} {
		err := untilPathAllowed(tc.dir, tc.req)
		if denied := errcode.Is(err, errcode.PermissionDenied); denied != tc.denied || !denied && err != nil {
			t.Errorf("%s: %v, want denied %v", name, err, tc.denied)
		}
	}
}
