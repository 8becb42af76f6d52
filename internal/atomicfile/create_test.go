package atomicfile_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/commandcore/commandcore/internal/atomicfile"
)

// TestCreateHasOneWinner: of writers racing to create one file, exactly
// one succeeds, the others get fs.ErrExist, and the file holds the
// winner's content, owner-only; no temporary file is left.
func TestCreateHasOneWinner(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "device.json")
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			err := atomicfile.Create(path, []byte{byte('a' + i)}, 0o600)
			switch {
			case err == nil:
				wins.Add(1)
			case !errors.Is(err, fs.ErrExist):
				t.Errorf("writer %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d writers created the file", wins.Load())
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != 1 {
		t.Fatalf("the file: %v, %v", fi, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("left in the directory: %v", entries)
	}
}

// jsonWriters are the two JSON writers, which differ only in syncing.
var jsonWriters = map[string]func(string, any) error{"WriteJSON": atomicfile.WriteJSON, "WriteCacheJSON": atomicfile.WriteCacheJSON}

// TestWriteJSONIsOwnerOnly: the value as JSON, mode 0600 whatever the
// umask, replacing what was there; a value JSON cannot encode leaves the
// old file.
func TestWriteJSONIsOwnerOnly(t *testing.T) {
	for name, write := range jsonWriters {
		t.Run(name, func(t *testing.T) { checkOwnerOnly(t, write) })
	}
}

func checkOwnerOnly(t *testing.T, write func(string, any) error) {
	path := filepath.Join(t.TempDir(), "state.json")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := write(path, map[string]int{"schema": 1}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	fi, _ := os.Stat(path)
	if err != nil || string(data) != `{"schema":1}` || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%q %v %v", data, fi.Mode(), err)
	}
	if err := write(path, func() {}); err == nil {
		t.Fatal("a function was encoded")
	}
	if data, _ := os.ReadFile(path); string(data) != `{"schema":1}` {
		t.Errorf("a failed encoding changed the file: %q", data)
	}
}

// TestWriteJSONFailuresLeaveNothing: a value JSON cannot encode, a
// missing directory and a directory in the way fail, and leave no
// temporary file.
func TestWriteJSONFailuresLeaveNothing(t *testing.T) {
	for name, write := range jsonWriters {
		t.Run(name, func(t *testing.T) { checkFailuresLeaveNothing(t, write) })
	}
}

func checkFailuresLeaveNothing(t *testing.T, write func(string, any) error) {
	dir := t.TempDir()
	// Unencodable value: nothing is created.
	if err := write(filepath.Join(dir, "x.json"), func() {}); err == nil {
		t.Error("a write of a func succeeded")
	}
	// Missing directory.
	if err := write(filepath.Join(dir, "missing", "x.json"), map[string]int{"schema": 1}); err == nil {
		t.Error("a write into a missing directory succeeded")
	}
	// Target is a non-empty directory: the rename fails and the temporary is removed.
	target := filepath.Join(dir, "target")
	if err := os.MkdirAll(filepath.Join(target, "inner"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := write(target, map[string]int{"schema": 1}); err == nil {
		t.Error("a write over a non-empty directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "target" {
		t.Errorf("directory holds %v after failures, want only [target]", names)
	}
}
