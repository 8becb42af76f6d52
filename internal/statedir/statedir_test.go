package statedir

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestLocalDeviceIDIsStableAndShared(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	var wg sync.WaitGroup
	ids := make([]string, 8)
	for i := range ids {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			id, err := LocalDeviceID(dir)
			if err != nil {
				t.Error(err)
			}
			ids[i] = id
		}(i)
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] || id == "" {
			t.Fatalf("concurrent first uses got different identities: %v", ids)
		}
	}
	again, err := LocalDeviceID(dir)
	if err != nil || again != ids[0] {
		t.Fatalf("identity changed: %q %v", again, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("state directory holds %d entries, want only device.json", len(entries))
	}
	if fi, _ := os.Stat(filepath.Join(dir, localDeviceFile)); fi.Mode().Perm() != 0o600 {
		t.Fatalf("device.json mode %v", fi.Mode().Perm())
	}
}

func TestCorruptDeviceFileIsAnError(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, localDeviceFile), []byte("{garbage"), 0o600)
	if _, err := LocalDeviceID(dir); err == nil {
		t.Fatal("a corrupt identity was accepted (or replaced)")
	}
	if data, _ := os.ReadFile(filepath.Join(dir, localDeviceFile)); string(data) != "{garbage" {
		t.Fatal("the corrupt identity file was rewritten")
	}
}

func TestResolve(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/xdg/state")
	t.Setenv("XDG_CONFIG_HOME", "/xdg/config")
	d, err := Resolve(Dirs{})
	if err != nil || d.State != "/xdg/state/commandcore" || d.Config != "/xdg/config/commandcore" {
		t.Fatalf("defaults: %+v %v", d, err)
	}
	d, err = Resolve(Dirs{Service: "other.service"})
	if err != nil || d.State != "/xdg/state/other" {
		t.Fatalf("custom service: %+v %v", d, err)
	}
	for _, bad := range []string{"a/b", "..", ".service"} {
		if _, err := Resolve(Dirs{Service: bad}); err == nil {
			t.Errorf("service %q accepted", bad)
		}
	}
}

func TestExistingCreatesNothing(t *testing.T) {
	parent := t.TempDir()
	missing := filepath.Join(parent, "nonexistent")
	err := Existing(missing)
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("a missing state directory: %v", err)
	}
	if id, err := ExistingLocalDeviceID(missing); id != "" || err != nil {
		t.Fatalf("device ID of a missing directory: %q %v", id, err)
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Fatalf("checking created %d entries", len(entries))
	}
	file := filepath.Join(parent, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Existing(file); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("a file as state directory: %v", err)
	}
	if err := Existing(parent); err != nil {
		t.Fatal(err)
	}
	id, err := LocalDeviceID(parent)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ExistingLocalDeviceID(parent); got != id || err != nil {
		t.Fatalf("ExistingLocalDeviceID = %q %v, want %q", got, err, id)
	}
}
