package jobmeta_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/atomicfile"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/procid"
)

const testID = "0f8fad5b-d9cb-469f-a165-70867728950e"

var (
	t0 = time.Date(2031, 5, 6, 7, 8, 9, 123456789, time.UTC)
	t1 = t0.Add(90 * time.Second)
)

func ptr[T any](v T) *T { return &v }

func validJob() *jobmeta.Job {
	return &jobmeta.Job{
		Schema: jobmeta.SchemaVersion, ID: testID, DeviceID: "7c9e6679-7425-40de-944b-e07fc1f90ae7",
		Name: "build", Owner: "tok_0123456789ab", Unit: "commandcore-job-x.service", FailureDomain: jobmeta.DomainSystemdUnit,
		CreatedAt: t0, LaunchFailed: true, LaunchError: "internal", FailedAt: ptr(t1),
		Idempotency: &jobmeta.Idempotency{Key: strings.Repeat("0a", 32), Request: strings.Repeat("f9", 32)},
	}
}

func validClaim() *jobmeta.Claim {
	return &jobmeta.Claim{
		Schema:       jobmeta.SchemaVersion,
		Supervisor:   procid.Identity{PID: 4242, StartTicks: 987654},
		BootID:       "b1a2c3d4-0000-4000-8000-000000000001",
		InvocationID: "0123456789abcdef0123456789abcdef",
		Manager:      &procid.Identity{PID: 900, StartTicks: 12},
		ClaimedAt:    t0,
		Child:        &procid.Identity{PID: 4243, StartTicks: 987655},
		StartedAt:    ptr(t1),
	}
}

func validResult() *jobmeta.Result {
	return &jobmeta.Result{
		Schema: jobmeta.SchemaVersion, ExitCode: ptr(3), Signal: "SIGTERM", CompletedAt: t1,
		StopRequested: true, StartError: "shell_start_failed",
		Capture: jobmeta.Capture{
			Stdout: jobmeta.StreamCapture{ObservedBytes: ptr(int64(2 << 20)), RetainedBytes: ptr(int64(1 << 20)),
				DroppedBytes: ptr(int64(1 << 20)), Truncated: ptr(true), Complete: true, LastOutputAt: ptr(t0)},
			// Unknown counters stay unknown (null), not zero.
			Stderr: jobmeta.StreamCapture{},
		},
	}
}

func validStop() *jobmeta.StopRequest {
	return &jobmeta.StopRequest{Schema: jobmeta.SchemaVersion, RequestedAt: t0}
}

func validRead() *jobmeta.ReadMark {
	return &jobmeta.ReadMark{Schema: jobmeta.SchemaVersion, ReadAt: t1}
}

func validScreen() *jobmeta.Screen {
	return &jobmeta.Screen{Schema: jobmeta.SchemaVersion, Lines: []string{"top - 14:00", "", "  PID USER"}, Cols: 80, Rows: 3,
		Cursor: jobmeta.Cursor{Row: 2, Col: 80}, AlternateScreen: true, Title: "top", Offset: 4096}
}

func validReconciled() *jobmeta.Reconciled {
	return &jobmeta.Reconciled{Schema: jobmeta.SchemaVersion, State: jobmeta.HostRebooted, ReconciledAt: t1, Evidence: "boot_id_changed"}
}

// roundTrip writes v atomically and reads it back.
func roundTrip[T any, P interface {
	*T
	jobmeta.Versioned
}](t *testing.T, name string, v *T) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, name)
	if err := atomicfile.WriteJSON(path, v); err != nil {
		t.Fatalf("%s: WriteAtomic: %v", name, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 || !fi.Mode().IsRegular() {
		t.Errorf("%s: mode %v, want regular 0600", name, fi.Mode())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != name {
		t.Errorf("%s: directory holds %v, want only the file (no temporary left behind)", name, entries)
	}
	got, err := jobmeta.Read[T, P](path)
	if err != nil {
		t.Fatalf("%s: Read: %v", name, err)
	}
	if !reflect.DeepEqual(got, v) {
		t.Errorf("%s: round trip\n got %+v\nwant %+v", name, got, v)
	}
}

func TestRoundTrip(t *testing.T) {
	roundTrip(t, jobmeta.JobFile, validJob())
	roundTrip(t, jobmeta.ClaimFile, validClaim())
	roundTrip(t, jobmeta.ResultFile, validResult())
	roundTrip(t, jobmeta.StopFile, validStop())
	roundTrip(t, jobmeta.ReadMarkFile, validRead())
	roundTrip(t, jobmeta.ReconciledFile, validReconciled())
	roundTrip(t, jobmeta.ScreenFile, validScreen())
	// Minimal forms: optional fields absent.
	roundTrip(t, jobmeta.JobFile, &jobmeta.Job{Schema: 1, ID: testID, FailureDomain: jobmeta.DomainSharedParentCgroup, CreatedAt: t0})
	roundTrip(t, jobmeta.ClaimFile, &jobmeta.Claim{Schema: 1, Supervisor: procid.Identity{PID: 1, StartTicks: 1}, BootID: "b"})
	roundTrip(t, jobmeta.ResultFile, &jobmeta.Result{Schema: 1, CompletedAt: t0})
}

func TestResultNullCountersStayUnknown(t *testing.T) {
	path := filepath.Join(t.TempDir(), jobmeta.ResultFile)
	if err := atomicfile.WriteJSON(path, validResult()); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Capture struct {
			Stderr map[string]any `json:"stderr"`
		} `json:"capture"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"observed_bytes", "retained_bytes", "dropped_bytes", "truncated", "last_output_at"} {
		v, ok := doc.Capture.Stderr[k]
		if !ok || v != nil {
			t.Errorf("stderr.%s = %v (present %v), want explicit null", k, v, ok)
		}
	}
}

// TestWrittenMetadataReadsBack: a metadata file written over another
// file, owner-only, reads back as written.
func TestWrittenMetadataReadsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), jobmeta.ReadMarkFile)
	if err := os.WriteFile(path, []byte("old garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	want := validRead()
	if err := atomicfile.WriteJSON(path, want); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("replaced file has mode %v, want 0600", fi.Mode().Perm())
	}
	got, err := jobmeta.Read[jobmeta.ReadMark](path)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Read = %+v, %v; want %+v", got, err, want)
	}
}

// mutate encodes v, applies fn to its generic form and re-encodes it.
func mutate(t *testing.T, v any, fn func(m map[string]any)) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	fn(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func set(path string, val any) func(map[string]any) {
	return func(m map[string]any) {
		keys := strings.Split(path, ".")
		for _, k := range keys[:len(keys)-1] {
			m = m[k].(map[string]any)
		}
		m[keys[len(keys)-1]] = val
	}
}

func del(key string) func(map[string]any) {
	return func(m map[string]any) { delete(m, key) }
}

type readFunc func(path string) (any, error)

func reader[T any, P interface {
	*T
	jobmeta.Versioned
}]() readFunc {
	return func(path string) (any, error) {
		v, err := jobmeta.Read[T, P](path)
		if v == nil {
			return nil, err
		}
		return v, err
	}
}

type fileType struct {
	name  string
	valid any
	read  readFunc
	// bad are documents that violate the type's own validation.
	bad map[string]func(map[string]any)
}

func fileTypes() []fileType {
	return []fileType{
		{jobmeta.JobFile, validJob(), reader[jobmeta.Job](), map[string]func(map[string]any){
			"no id":                 del("id"),
			"empty id":              set("id", ""),
			"uppercase id":          set("id", strings.ToUpper(testID)),
			"path id":               set("id", "../x"),
			"id with newline":       set("id", testID+"\n"),
			"no failure domain":     del("failure_domain"),
			"unknown domain":        set("failure_domain", "container"),
			"no created_at":         del("created_at"),
			"zero created_at":       set("created_at", "0001-01-01T00:00:00Z"),
			"id of the wrong type":  set("id", 5),
			"created_at not a time": set("created_at", "yesterday"),
			"owner with a slash":    set("owner", "a/b"),
			"owner of 65 bytes":     set("owner", strings.Repeat("a", 65)),
			"owner Local":           set("owner", "LOCAL"),
			"owner not a string":    set("owner", 1),
			"key digest short":      set("idempotency.key", strings.Repeat("0a", 31)),
			"key digest uppercase":  set("idempotency.key", strings.Repeat("0A", 32)),
			"key digest not hex":    set("idempotency.key", strings.Repeat("0g", 32)),
			"key digest empty":      set("idempotency.key", ""),
			"request digest long":   set("idempotency.request", strings.Repeat("f9", 33)),
			"request digest absent": func(m map[string]any) { delete(m["idempotency"].(map[string]any), "request") },
			"request digest ':'":    set("idempotency.request", strings.Repeat("f:", 32)),
		}},
		{jobmeta.ClaimFile, validClaim(), reader[jobmeta.Claim](), map[string]func(map[string]any){
			"no supervisor":          del("supervisor"),
			"supervisor pid 0":       set("supervisor.pid", 0),
			"supervisor pid -1":      set("supervisor.pid", -1),
			"supervisor no ticks":    set("supervisor.start_ticks", 0),
			"negative ticks":         set("supervisor.start_ticks", -1),
			"no boot id":             del("boot_id"),
			"empty boot id":          set("boot_id", ""),
			"child pid 0":            set("child.pid", 0),
			"child no ticks":         set("child.start_ticks", 0),
			"child negative pid":     set("child.pid", -7),
			"supervisor not objects": set("supervisor", "4242"),
		}},
		{jobmeta.ResultFile, validResult(), reader[jobmeta.Result](), map[string]func(map[string]any){
			"no completed_at":      del("completed_at"),
			"zero completed_at":    set("completed_at", "0001-01-01T00:00:00Z"),
			"exit code not an int": set("exit_code", 1.5),
		}},
		{jobmeta.StopFile, validStop(), reader[jobmeta.StopRequest](), map[string]func(map[string]any){
			"requested_at not a time": set("requested_at", 1),
		}},
		{jobmeta.ReadMarkFile, validRead(), reader[jobmeta.ReadMark](), map[string]func(map[string]any){
			"read_at not a time": set("read_at", true),
		}},
		{jobmeta.ScreenFile, validScreen(), reader[jobmeta.Screen](), map[string]func(map[string]any){
			"no cols":          del("cols"),
			"rows over 1000":   set("rows", 1001),
			"a row missing":    set("lines", []string{"a", "b"}),
			"a row too many":   set("lines", []string{"a", "b", "c", "d"}),
			"cursor below":     set("cursor.row", 3),
			"cursor above":     set("cursor.row", -1),
			"cursor past cols": set("cursor.col", 81),
			"cursor left":      set("cursor.col", -1),
			"negative offset":  set("offset", -1),
			"lines not text":   set("lines", []int{1, 2, 3}),
		}},
		{jobmeta.ReconciledFile, validReconciled(), reader[jobmeta.Reconciled](), map[string]func(map[string]any){
			"no state":           del("state"),
			"live state":         set("state", string(jobmeta.Running)),
			"stopping state":     set("state", string(jobmeta.Stopping)),
			"corrupt state":      set("state", string(jobmeta.Corrupt)),
			"unknown state":      set("state", "vanished"),
			"uppercase state":    set("state", "WORKER_LOST"),
			"state not a string": set("state", 1),
		}},
	}
}

func TestReadRejectsCorrupt(t *testing.T) {
	for _, ft := range fileTypes() {
		dir := t.TempDir()
		path := filepath.Join(dir, ft.name)
		good, err := json.Marshal(ft.valid)
		if err != nil {
			t.Fatal(err)
		}
		check := func(label string, data []byte, wantOK bool) {
			t.Helper()
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			v, err := ft.read(path)
			if wantOK {
				if err != nil || v == nil {
					t.Errorf("%s %s: Read = %v, %v; want success", ft.name, label, v, err)
				}
				return
			}
			if !errors.Is(err, jobmeta.ErrCorrupt) {
				t.Errorf("%s %s: err = %v, want ErrCorrupt", ft.name, label, err)
			}
			if errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s %s: corrupt file reported as missing", ft.name, label)
			}
			if err != nil && v != nil {
				t.Errorf("%s %s: returned a value with the error: %+v", ft.name, label, v)
			}
		}
		// The untouched document is accepted, so each rejection below is
		// caused by its one change; so are unknown fields and whitespace.
		check("valid", good, true)
		check("valid with surrounding whitespace", append(append([]byte(" \n\t"), good...), "\n\n "...), true)
		check("valid with an unknown field", mutate(t, ft.valid, set("added_by_a_newer_version", 1)), true)

		check("empty file", nil, false)
		check("whitespace only", []byte("  \n"), false)
		check("null", []byte("null"), false)
		check("array", []byte("[]"), false)
		check("not json", []byte("garbage"), false)
		for _, n := range []int{1, len(good) / 2, len(good) - 1} {
			check("truncated", good[:n], false)
		}
		for _, tail := range []string{"x", "{}", " {}", "]", "}", "\n}", "null", "0", `"s"`} {
			check("trailing "+tail, append(append([]byte{}, good...), tail...), false)
		}
		check("schema 0", mutate(t, ft.valid, set("schema", 0)), false)
		check("schema -1", mutate(t, ft.valid, set("schema", -1)), false)
		check("schema next", mutate(t, ft.valid, set("schema", jobmeta.SchemaVersion+1)), false)
		check("schema huge", mutate(t, ft.valid, set("schema", 1e30)), false)
		check("schema string", mutate(t, ft.valid, set("schema", "1")), false)
		check("no schema", mutate(t, ft.valid, del("schema")), false)
		for label, fn := range ft.bad {
			check(label, mutate(t, ft.valid, fn), false)
		}

		// Size bound: exactly the limit is read, one byte more is not.
		pad := func(n int) []byte {
			b := append([]byte{}, good...)
			return append(b, bytes.Repeat([]byte(" "), n-len(b))...)
		}
		check("at the size limit", pad(limits.MaxMetadataBytes), true)
		check("over the size limit", pad(limits.MaxMetadataBytes+1), false)
		check("far over the size limit", pad(3*limits.MaxMetadataBytes), false)
		big := mutate(t, ft.valid, set("padding", strings.Repeat("a", limits.MaxMetadataBytes)))
		check("oversized by an unknown field", big, false)

		// A directory in place of the file is corrupt, not missing.
		os.Remove(path)
		if err := os.Mkdir(path, 0o700); err != nil {
			t.Fatal(err)
		}
		if v, err := ft.read(path); !errors.Is(err, jobmeta.ErrCorrupt) || v != nil {
			t.Errorf("%s: directory in place of the file: %v, %v; want ErrCorrupt", ft.name, v, err)
		}
		// A FIFO is corrupt at once (a plain open would block forever), and
		// a symlink to a valid file is not followed.
		os.Remove(path)
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			t.Fatal(err)
		}
		if v, err := ft.read(path); !errors.Is(err, jobmeta.ErrCorrupt) || v != nil {
			t.Errorf("%s: FIFO in place of the file: %v, %v; want ErrCorrupt", ft.name, v, err)
		}
		os.Remove(path)
		elsewhere := filepath.Join(dir, "elsewhere")
		os.WriteFile(elsewhere, good, 0o600)
		os.Symlink(elsewhere, path)
		if v, err := ft.read(path); !errors.Is(err, jobmeta.ErrCorrupt) || v != nil {
			t.Errorf("%s: symlink to a valid file: %v, %v; want ErrCorrupt", ft.name, v, err)
		}
	}
}

func TestReadMissing(t *testing.T) {
	for _, ft := range fileTypes() {
		v, err := ft.read(filepath.Join(t.TempDir(), ft.name))
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: missing file: err = %v, want os.ErrNotExist", ft.name, err)
		}
		if errors.Is(err, jobmeta.ErrCorrupt) {
			t.Errorf("%s: missing file reported as corrupt", ft.name)
		}
		if v != nil {
			t.Errorf("%s: missing file returned %+v", ft.name, v)
		}
	}
}

func TestDecodeSizeLimit(t *testing.T) {
	good, _ := json.Marshal(validStop())
	data := append(good, bytes.Repeat([]byte("\n"), limits.MaxMetadataBytes+1-len(good))...)
	if _, err := jobmeta.Decode[jobmeta.StopRequest](data); !errors.Is(err, jobmeta.ErrCorrupt) {
		t.Errorf("Decode of %d bytes: %v, want ErrCorrupt", len(data), err)
	}
	if _, err := jobmeta.Decode[jobmeta.StopRequest](data[:limits.MaxMetadataBytes]); err != nil {
		t.Errorf("Decode of exactly the limit: %v", err)
	}
}

func TestValidID(t *testing.T) {
	valid := []string{testID, "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff"}
	for _, s := range valid {
		if !jobmeta.ValidID(s) {
			t.Errorf("ValidID(%q) = false, want true", s)
		}
	}
	hostile := []string{
		"", ".", "..", "../x", "x", "/", "/etc/passwd",
		"../" + testID, testID + "/..", testID + "/x", "./" + testID,
		strings.ToUpper(testID),
		"0F8FAD5B-d9cb-469f-a165-70867728950e",
		testID + "\n", "\n" + testID, testID + " ", " " + testID, testID + "\x00",
		testID + "0", testID[1:], "{" + testID + "}",
		strings.ReplaceAll(testID, "-", ""),
		strings.Replace(testID, "0f8", "0g8", 1),
		"0f8fad5b_d9cb_469f_a165_70867728950e",
		"0f8fad5b-d9cb-469f-a165-70867728950\u0435", // Cyrillic е
	}
	for _, s := range hostile {
		if jobmeta.ValidID(s) {
			t.Errorf("ValidID(%q) = true, want false", s)
		}
	}
}

func TestStates(t *testing.T) {
	terminal := []jobmeta.State{jobmeta.Exited, jobmeta.StoppedByRequest, jobmeta.WorkloadOOM,
		jobmeta.WorkerLost, jobmeta.HostRebooted, jobmeta.UserManagerLost, jobmeta.LaunchFailed}
	live := []jobmeta.State{jobmeta.Starting, jobmeta.Running, jobmeta.Stopping}
	for _, s := range terminal {
		if !s.Terminal() || s.Live() {
			t.Errorf("%s: Terminal=%v Live=%v, want terminal", s, s.Terminal(), s.Live())
		}
	}
	for _, s := range live {
		if s.Terminal() || !s.Live() {
			t.Errorf("%s: Terminal=%v Live=%v, want live", s, s.Terminal(), s.Live())
		}
	}
	for _, s := range []jobmeta.State{jobmeta.Corrupt, "", "EXITED", "unknown"} {
		if s.Terminal() || s.Live() {
			t.Errorf("%q: Terminal=%v Live=%v, want neither", s, s.Terminal(), s.Live())
		}
	}
}
