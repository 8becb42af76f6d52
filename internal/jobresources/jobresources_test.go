package jobresources

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
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
	if p, err := Load(write(t, `{}`, 0o644)); err != nil || p.MemoryMaxBytes != 0 || p.Nice != nil || p.CPUWeight != 0 {
		t.Fatalf("empty object: %+v %v", p, err)
	}
	p, err = Load(write(t, `{"nice": 10, "cpu_weight": 50}`, 0o600))
	if err != nil || p.Nice == nil || *p.Nice != 10 || p.CPUWeight != 50 || p.MemoryMaxBytes != 0 {
		t.Fatalf("nice and cpu_weight: %+v, %v", p, err)
	}
	// nice 0 is a choice (run jobs at niceness 0), not the absence of one.
	if p, err := Decode([]byte(`{"nice": 0}`)); err != nil || p.Nice == nil || *p.Nice != 0 {
		t.Fatalf("nice 0: %+v, %v", p, err)
	}
}

// TestJobNice: a job runs at the owner's niceness, 0 included, and at 19
// where the policy names none.
func TestJobNice(t *testing.T) {
	ten, zero := 10, 0
	for caps, want := range map[*Caps]int{{}: 19, {Nice: &ten}: 10, {Nice: &zero}: 0} {
		if got := caps.JobNice(); got != want {
			t.Errorf("%+v: JobNice %d, want %d", *caps, got, want)
		}
	}
}

// TestSame: caps are the same when every job under them gets the same
// resources, a default niceness and the owner's 19 included.
func TestSame(t *testing.T) {
	nineteen, ten := 19, 10
	same := [][2]Caps{{{}, {}}, {{}, {Nice: &nineteen}}, {{MemoryMaxBytes: 1 << 30, CPUWeight: 50}, {MemoryMaxBytes: 1 << 30, CPUWeight: 50}}}
	differ := [][2]Caps{{{}, {Nice: &ten}}, {{}, {MemoryMaxBytes: 1 << 30}}, {{}, {CPUWeight: 50}}}
	for _, p := range same {
		if !p[0].Same(p[1]) || !p[1].Same(p[0]) {
			t.Errorf("%+v and %+v differ", p[0], p[1])
		}
	}
	for _, p := range differ {
		if p[0].Same(p[1]) || p[1].Same(p[0]) {
			t.Errorf("%+v and %+v are the same", p[0], p[1])
		}
	}
}

// TestFailsClosed: every broken policy refuses launches, and says why in
// the words `commandcore status` shows the owner.
func TestFailsClosed(t *testing.T) {
	cases := []struct {
		name, content string
		mode          os.FileMode
		why           string
	}{
		{"malformed", `{"memory_max_bytes": `, 0o600, "empty or truncated JSON"},
		{"syntax error", `{"memory_max_bytes": x}`, 0o600, "malformed JSON at byte 22"},
		{"unknown field", `{"memory_max_bytes": 268435456, "cpu": 2}`, 0o600, "unknown field (only memory_max_bytes, nice and cpu_weight are allowed)"},
		// A misspelt key with a plausible cap must not become the cap.
		{"misspelt field", `{"memory_max": 268435456}`, 0o600, "unknown field (only memory_max_bytes, nice and cpu_weight are allowed)"},
		{"case-folded field", `{"Memory_Max_Bytes": 268435456}`, 0o600, "unknown field (only memory_max_bytes, nice and cpu_weight are allowed)"},
		{"field given twice", `{"memory_max_bytes": 1, "memory_max_bytes": 268435456}`, 0o600, "a field is given twice"},
		{"wrong type", `{"memory_max_bytes": "256M"}`, 0o600, "memory_max_bytes must be a non-negative integer"},
		{"fraction", `{"memory_max_bytes": 2.5e8}`, 0o600, "memory_max_bytes must be a non-negative integer"},
		{"negative", `{"memory_max_bytes": -1}`, 0o600, "memory_max_bytes must be a non-negative integer"},
		{"null", `{"memory_max_bytes": null}`, 0o600, "memory_max_bytes must be a number"},
		{"too small", `{"memory_max_bytes": 1}`, 0o600, "memory_max_bytes must be at least 16777216"},
		{"just under 16 MiB", `{"memory_max_bytes": 16777215}`, 0o600, "memory_max_bytes must be at least 16777216"},
		// Jobs may be made lower priority than the agent, never higher.
		{"negative nice", `{"nice": -1}`, 0o600, "nice must be an integer from 0 to 19"},
		{"nice over 19", `{"nice": 20}`, 0o600, "nice must be an integer from 0 to 19"},
		{"fractional nice", `{"nice": 10.5}`, 0o600, "nice must be an integer from 0 to 19"},
		{"nice as exponent", `{"nice": 1e1}`, 0o600, "nice must be an integer from 0 to 19"},
		{"nice as string", `{"nice": "10"}`, 0o600, "nice must be an integer from 0 to 19"},
		{"nice null", `{"nice": null}`, 0o600, "nice must be an integer from 0 to 19"},
		{"nice as bool", `{"nice": true}`, 0o600, "nice must be an integer from 0 to 19"},
		{"nice overflowing", `{"nice": 18446744073709551626}`, 0o600, "nice must be an integer from 0 to 19"},
		{"nice given twice", `{"nice": 19, "nice": 0}`, 0o600, "a field is given twice"},
		{"case-folded nice", `{"Nice": 10}`, 0o600, "unknown field (only memory_max_bytes, nice and cpu_weight are allowed)"},
		{"cpu_weight 0", `{"cpu_weight": 0}`, 0o600, "cpu_weight must be an integer from 1 to 10000"},
		{"negative cpu_weight", `{"cpu_weight": -5}`, 0o600, "cpu_weight must be an integer from 1 to 10000"},
		{"cpu_weight over 10000", `{"cpu_weight": 10001}`, 0o600, "cpu_weight must be an integer from 1 to 10000"},
		{"fractional cpu_weight", `{"cpu_weight": 100.0}`, 0o600, "cpu_weight must be an integer from 1 to 10000"},
		{"cpu_weight as string", `{"cpu_weight": "idle"}`, 0o600, "cpu_weight must be an integer from 1 to 10000"},
		{"cpu_weight null", `{"cpu_weight": null}`, 0o600, "cpu_weight must be an integer from 1 to 10000"},
		{"cpu_weight given twice", `{"cpu_weight": 1, "cpu_weight": 100}`, 0o600, "a field is given twice"},
		{"misspelt cpu_weight", `{"CPUWeight": 100}`, 0o600, "unknown field (only memory_max_bytes, nice and cpu_weight are allowed)"},
		// One bad field refuses the whole file, not only itself.
		{"good cap, bad nice", `{"memory_max_bytes": 268435456, "nice": -20}`, 0o600, "nice must be an integer from 0 to 19"},
		{"trailing", `{} {}`, 0o600, "trailing data after the JSON object"},
		{"empty file", ``, 0o600, "empty or truncated JSON"},
		// A null document is not "no policy": the file exists, so it fails closed.
		{"null document", `null`, 0o600, "the policy must be a JSON object"},
		{"array document", `[268435456]`, 0o600, "the policy must be a JSON object"},
		{"string document", `"x"`, 0o600, "the policy must be a JSON object"},
		{"one byte over 64 KiB", padded(64<<10 + 1), 0o600, "it is larger than 65536 bytes"},
		{"group writable", `{"memory_max_bytes": 268435456}`, 0o620, "it is writable by group or others"},
		{"world writable", `{"memory_max_bytes": 268435456}`, 0o602, "it is writable by group or others"},
	}
	for _, c := range cases {
		p, err := Load(write(t, c.content, c.mode))
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %+v, %v, want ErrInvalid", c.name, p, err)
			continue
		}
		if want := "policy invalid: " + c.why; err.Error() != want {
			t.Errorf("%s: %q, want %q", c.name, err.Error(), want)
		}
	}
}

// padded is a valid policy of 256 MiB padded with spaces to n bytes.
func padded(n int) string {
	const doc = `{"memory_max_bytes": 268435456}`
	return doc + strings.Repeat(" ", n-len(doc))
}

// TestBounds: the 16 MiB minimum cap and the 64 KiB file are both allowed
// exactly.
func TestBounds(t *testing.T) {
	p, err := Load(write(t, `{"memory_max_bytes": 16777216}`, 0o600))
	if err != nil || p.MemoryMaxBytes != 16<<20 {
		t.Fatalf("a 16 MiB cap: %+v, %v", p, err)
	}
	p, err = Load(write(t, padded(64<<10), 0o600))
	if err != nil || p.MemoryMaxBytes != 256<<20 {
		t.Fatalf("a 64 KiB file: %+v, %v", p, err)
	}
	if _, err := Decode([]byte(padded(64<<10 + 1))); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Decode of 64 KiB + 1: %v", err)
	}
	if p, err := Decode([]byte(padded(64 << 10))); err != nil || p.MemoryMaxBytes != 256<<20 {
		t.Fatalf("Decode of 64 KiB: %+v, %v", p, err)
	}
	// nice 0–19 and cpu_weight 1–10000, both ends included.
	for _, n := range []int{0, 19} {
		if p, err := Decode(fmt.Appendf(nil, `{"nice": %d}`, n)); err != nil || p.Nice == nil || *p.Nice != n {
			t.Fatalf("nice %d: %+v, %v", n, p, err)
		}
	}
	for _, w := range []uint64{1, 10000} {
		if p, err := Decode(fmt.Appendf(nil, `{"cpu_weight": %d}`, w)); err != nil || p.CPUWeight != w {
			t.Fatalf("cpu_weight %d: %+v, %v", w, p, err)
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
	if _, err := Load(dir); !errors.Is(err, ErrInvalid) || err.Error() != "policy invalid: it is not a regular file" {
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
		if !errors.Is(err, ErrInvalid) || err.Error() != "policy invalid: it is not a regular file" {
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
	f.Add([]byte(`{"nice": 10, "cpu_weight": 100}`))
	f.Add([]byte(`{"nice": -1}`))
	f.Add([]byte(`{"cpu_weight": 10001}`))
	f.Add([]byte(`{"memory_max_bytes": 268435456, "nice": 19, "cpu_weight": 1}`))
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
		if p.Nice != nil && (*p.Nice < 0 || *p.Nice > 19) {
			t.Fatalf("accepted nice %d", *p.Nice)
		}
		if p.CPUWeight != 0 && (p.CPUWeight < 1 || p.CPUWeight > 10000) {
			t.Fatalf("accepted cpu_weight %d", p.CPUWeight)
		}
		// Whatever was accepted reads back the same (the vmtest guest and
		// the benchmark write policies by marshalling Caps).
		again, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if q, err := Decode(again); err != nil || !reflect.DeepEqual(p, q) {
			t.Fatalf("%s reads back as %+v, %v", again, q, err)
		}
	})
}
