package policy

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func write(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, FileName)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestAbsentIsEmpty(t *testing.T) {
	p, err := Load(t.TempDir())
	if err != nil || p.MemoryMaxBytes != 0 {
		t.Fatalf("got %+v, %v", p, err)
	}
}

func TestValid(t *testing.T) {
	p, err := Load(write(t, `{"memory_max_bytes": 268435456}`, 0o600))
	if err != nil {
		t.Fatal(err)
	}
	if p.MemoryMaxBytes != 268435456 {
		t.Fatalf("got %d", p.MemoryMaxBytes)
	}
	if p, err := Load(write(t, `{}`, 0o644)); err != nil || p.MemoryMaxBytes != 0 {
		t.Fatalf("empty object: %+v %v", p, err)
	}
}

func TestFailsClosed(t *testing.T) {
	cases := []struct {
		name, content string
		mode          os.FileMode
	}{
		{"malformed", `{"memory_max_bytes": `, 0o600},
		{"unknown field", `{"memory_max_bytes": 268435456, "cpu": 2}`, 0o600},
		{"wrong type", `{"memory_max_bytes": "256M"}`, 0o600},
		{"negative", `{"memory_max_bytes": -1}`, 0o600},
		{"null", `{"memory_max_bytes": null}`, 0o600},
		{"too small", `{"memory_max_bytes": 1}`, 0o600},
		{"trailing", `{} {}`, 0o600},
		{"empty file", ``, 0o600},
		{"group writable", `{"memory_max_bytes": 268435456}`, 0o620},
		{"world writable", `{"memory_max_bytes": 268435456}`, 0o602},
	}
	for _, c := range cases {
		if _, err := Load(write(t, c.content, c.mode)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", c.name, err)
		}
	}
}

func TestNotOwned(t *testing.T) {
	dir := write(t, `{"memory_max_bytes": 268435456}`, 0o600)
	if err := os.Chown(filepath.Join(dir, FileName), 65534, 65534); err != nil {
		t.Skipf("cannot chown here (not root): %v", err)
	}
	if _, err := Load(dir); !errors.Is(err, ErrInvalid) {
		t.Fatalf("got %v, want ErrInvalid", err)
	}
}

func TestDirectoryInstead(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, FileName), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); !errors.Is(err, ErrInvalid) {
		t.Fatalf("got %v, want ErrInvalid", err)
	}
}

// TestFIFOAndSymlinkRefused: a FIFO answers at once instead of blocking
// each launch, and a link to a valid policy is not followed.
func TestFIFOAndSymlinkRefused(t *testing.T) {
	fifo := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(fifo, FileName), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := Load(fifo); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("FIFO: got %v, want ErrInvalid", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Load blocked on a FIFO")
	}

	link := t.TempDir()
	if err := os.Symlink(filepath.Join(write(t, `{"memory_max_bytes": 268435456}`, 0o600), FileName), filepath.Join(link, FileName)); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(link); !errors.Is(err, ErrInvalid) || err.Error() != "policy invalid: it is a symbolic link" {
		t.Fatalf("symlink: got %v, want ErrInvalid", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"memory_max_bytes": 268435456}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"x":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error not ErrInvalid: %v", err)
			}
			return
		}
		if p.MemoryMaxBytes != 0 && p.MemoryMaxBytes < minMemoryMax {
			t.Fatalf("accepted a cap below the minimum: %d", p.MemoryMaxBytes)
		}
	})
}
