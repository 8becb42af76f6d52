package selfupdate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// serve serves body as /download/NAME and returns the offer of want's hash.
func serve(t *testing.T, body, want []byte) (string, Offer) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != DownloadPath+"commandcore-linux-amd64" {
			http.NotFound(w, r)
			return
		}
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	sum := sha256.Sum256(want)
	return srv.URL, Offer{Version: "1.2.0", SHA256: hex.EncodeToString(sum[:]), Name: "commandcore-linux-amd64"}
}

// installed writes an installed binary into a fresh directory.
func installed(t *testing.T, content string) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "commandcore")
	if err := os.WriteFile(exe, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	return exe
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAMismatchLeavesTheInstalledBinaryUntouched(t *testing.T) {
	exe := installed(t, "old")
	server, offer := serve(t, []byte("tampered"), []byte("new"))
	u := Update{Server: server, Offer: offer, Current: "1.1.0", Exe: exe, Service: "cc.service", StateDir: t.TempDir()}
	if err := u.Apply(context.Background()); !errors.Is(err, ErrMismatch) {
		t.Fatalf("Apply = %v, want ErrMismatch", err)
	}
	if got := read(t, exe); got != "old" {
		t.Errorf("installed binary is %q after a mismatch", got)
	}
	if names := entries(t, filepath.Dir(exe)); len(names) != 1 {
		t.Errorf("a mismatch left %v beside the binary", names)
	}
	if r, _ := ReadRecord(u.StateDir); r != nil {
		t.Errorf("a mismatch was recorded as an update: %+v", r)
	}
}

func TestFetchVerifiesAndWritesAnExecutable(t *testing.T) {
	dir := t.TempDir()
	server, offer := serve(t, []byte("new"), []byte("new"))
	path, err := Fetch(context.Background(), http.DefaultClient, server, offer, dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o755 || read(t, path) != "new" || filepath.Dir(path) != dir {
		t.Fatalf("fetched %s: %v %v", path, fi, err)
	}
	offer.Name = "commandcore-linux-arm64"
	if _, err := Fetch(context.Background(), http.DefaultClient, server, offer, dir); err == nil {
		t.Error("a 404 was fetched")
	}
	if names := entries(t, dir); len(names) != 1 {
		t.Errorf("a failed fetch left %v", names)
	}
}

func TestSwapKeepsThePreviousBinary(t *testing.T) {
	exe := installed(t, "old")
	// A process holding the old binary open keeps reading it.
	held, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	next := filepath.Join(filepath.Dir(exe), ".next")
	os.WriteFile(next, []byte("new"), 0o755)
	if err := Swap(exe, next); err != nil {
		t.Fatal(err)
	}
	if read(t, exe) != "new" || read(t, PreviousPath(exe)) != "old" {
		t.Fatalf("after the swap: %q, previous %q", read(t, exe), read(t, PreviousPath(exe)))
	}
	buf := make([]byte, 3)
	if n, _ := held.ReadAt(buf, 0); string(buf[:n]) != "old" {
		t.Errorf("the open binary reads %q after the swap", buf[:n])
	}
	if names := entries(t, filepath.Dir(exe)); len(names) != 2 {
		t.Errorf("the swap left %v", names)
	}
	// A second update keeps the binary it replaced, not the first one.
	os.WriteFile(next, []byte("newer"), 0o755)
	if err := Swap(exe, next); err != nil {
		t.Fatal(err)
	}
	if read(t, exe) != "newer" || read(t, PreviousPath(exe)) != "new" {
		t.Fatalf("after a second swap: %q, previous %q", read(t, exe), read(t, PreviousPath(exe)))
	}
	if err := Restore(exe); err != nil {
		t.Fatal(err)
	}
	if read(t, exe) != "new" || read(t, PreviousPath(exe)) != "new" {
		t.Errorf("after a restore: %q, previous %q", read(t, exe), read(t, PreviousPath(exe)))
	}
}

func TestSwapRefusesWithoutAnInstalledBinary(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "commandcore")
	next := exe + ".next"
	os.WriteFile(next, []byte("new"), 0o755)
	if err := Swap(exe, next); err == nil {
		t.Fatal("swapped in a binary where none was installed")
	}
	if _, err := os.Stat(exe); err == nil {
		t.Error("the new binary was put in place anyway")
	}
}

func TestCheckRefuses(t *testing.T) {
	exe := installed(t, "old")
	ok := Update{Offer: Offer{Version: "1.2.0", SHA256: hex.EncodeToString(make([]byte, 32)), Name: "commandcore-linux-amd64"},
		Current: "1.1.0", Exe: exe, Service: "cc.service"}
	if err := ok.Check(); err != nil {
		t.Fatalf("Check = %v", err)
	}
	for name, tc := range map[string]struct {
		change func(*Update)
		want   error
	}{
		"current":        {func(u *Update) { u.Current = "1.2.0" }, ErrCurrent},
		"downgrade":      {func(u *Update) { u.Current = "1.10.0" }, ErrDowngrade},
		"release to dev": {func(u *Update) { u.Offer.Version = "dev" }, ErrDowngrade},
		"no service":     {func(u *Update) { u.Service = "" }, ErrNotService},
		"read-only":      {func(u *Update) { u.Exe = "/proc/self/exe" }, ErrNotWritable},
	} {
		u := ok
		tc.change(&u)
		if err := u.Check(); !errors.Is(err, tc.want) {
			t.Errorf("%s: Check = %v, want %v", name, err, tc.want)
		}
	}
	down := ok
	down.Current, down.AllowDowngrade = "2.0.0", true
	if err := down.Check(); err != nil {
		t.Errorf("an allowed downgrade: %v", err)
	}
}

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"1.2.3", "1.2.3", 0}, {"v1.2.3", "1.2.3", 0}, {"1.2.3", "1.10.0", -1}, {"2.0.0", "1.99.99", 1},
		{"dev", "0.0.1", -1}, {"0.0.1", "dev", 1}, {"dev", "unknown", 0}, {"1.2", "1.2.0", -1}, {"1.2.3-rc1", "1.2.3", 0},
	} {
		if got := Compare(tc.a, tc.b); got != tc.want {
			t.Errorf("Compare(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	if IsDowngrade("1.0.0", "1.0.1") || !IsDowngrade("1.0.1", "1.0.0") || IsDowngrade("dev", "1.0.0") || !IsDowngrade("dev", "dev2") {
		t.Error("IsDowngrade")
	}
}

func TestOfferValid(t *testing.T) {
	good := Offer{Version: "1.2.3", SHA256: hex.EncodeToString(make([]byte, 32)), Name: "commandcore-linux-amd64"}
	if !good.Valid() {
		t.Fatal("a good offer is refused")
	}
	for _, bad := range []Offer{
		{Version: "", SHA256: good.SHA256, Name: good.Name},
		{Version: "1 2", SHA256: good.SHA256, Name: good.Name},
		{Version: good.Version, SHA256: good.SHA256[1:], Name: good.Name},
		{Version: good.Version, SHA256: "A" + good.SHA256[1:], Name: good.Name},
		{Version: good.Version, SHA256: good.SHA256, Name: "../x"},
		{Version: good.Version, SHA256: good.SHA256, Name: ".hidden"},
	} {
		if bad.Valid() {
			t.Errorf("%+v is valid", bad)
		}
	}
}

// The watchdog's decision: only a link note of the new version, written
// after the watchdog began, is the new agent linked.
func TestNewAgentLinked(t *testing.T) {
	since := time.Now()
	if !NewAgentLinked(Linked{Version: "1.2.0", At: since.Add(time.Second)}, "1.2.0", since) {
		t.Error("the new agent's note is not taken")
	}
	if NewAgentLinked(Linked{Version: "1.1.0", At: since.Add(time.Second)}, "1.2.0", since) {
		t.Error("the previous agent's note is taken")
	}
	if NewAgentLinked(Linked{Version: "1.2.0", At: since.Add(-time.Second)}, "1.2.0", since) {
		t.Error("a note from before the update is taken")
	}
}

func TestNoteLinkedRewritesOnlyWhatIsNew(t *testing.T) {
	dir := t.TempDir()
	start := time.Now().UTC()
	if err := NoteLinked(dir, "1.2.0", start); err != nil {
		t.Fatal(err)
	}
	first, err := readLinked(dir)
	if err != nil || first.Version != "1.2.0" || first.At.Before(start) {
		t.Fatalf("note %+v, %v", first, err)
	}
	NoteLinked(dir, "1.2.0", start)
	if again, _ := readLinked(dir); !again.At.Equal(first.At) {
		t.Error("a second link of the same agent rewrote the note")
	}
	time.Sleep(time.Millisecond)
	later := time.Now().UTC()
	NoteLinked(dir, "1.2.0", later)
	if again, _ := readLinked(dir); again.At.Before(later) {
		t.Error("a restarted agent's first link was not noted")
	}
}

// The watchdog without a user manager to restart anything: the new agent
// never links, so the previous binary is put back and the record says so.
func TestWatchdogRollsBackWhenTheNewAgentDoesNotLink(t *testing.T) {
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "")
	t.Setenv("XDG_RUNTIME_DIR", "")
	exe := installed(t, "old")
	next := exe + ".next"
	os.WriteFile(next, []byte("new"), 0o755)
	if err := Swap(exe, next); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	NoteLinked(state, "1.1.0", time.Now())
	w := Watch{Service: "cc.service", Exe: exe, StateDir: state, From: "1.1.0", To: "1.2.0", Wait: 300 * time.Millisecond, Poll: 10 * time.Millisecond}
	if got := w.Run(context.Background()); got != StateRolledBack {
		t.Fatalf("Run = %s", got)
	}
	if read(t, exe) != "old" {
		t.Error("the previous binary is not back")
	}
	r, err := ReadRecord(state)
	if err != nil || r == nil || r.State != StateRolledBack || r.From != "1.1.0" || r.To != "1.2.0" || r.EndedAt == nil {
		t.Errorf("record %+v, %v", r, err)
	}
}

func TestWatchdogKeepsAnAgentThatLinked(t *testing.T) {
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "")
	t.Setenv("XDG_RUNTIME_DIR", "")
	exe := installed(t, "old")
	next := exe + ".next"
	os.WriteFile(next, []byte("new"), 0o755)
	Swap(exe, next)
	state := t.TempDir()
	go func() {
		time.Sleep(50 * time.Millisecond)
		NoteLinked(state, "1.2.0", time.Now())
	}()
	w := Watch{Service: "cc.service", Exe: exe, StateDir: state, From: "1.1.0", To: "1.2.0", Wait: time.Minute, Poll: 10 * time.Millisecond}
	if got := w.Run(context.Background()); got != StateDone {
		t.Fatalf("Run = %s", got)
	}
	if read(t, exe) != "new" {
		t.Error("the new binary was taken back")
	}
	if r, _ := ReadRecord(state); r == nil || r.State != StateDone {
		t.Errorf("record %+v", r)
	}
}

func FuzzCompare(f *testing.F) {
	f.Add("1.2.3", "v1.2.4")
	f.Add("dev", "1.0.0-rc1")
	f.Fuzz(func(t *testing.T, a, b string) {
		if Compare(a, b) != -Compare(b, a) {
			t.Fatalf("Compare(%q, %q) is not antisymmetric", a, b)
		}
		if a == b && IsDowngrade(a, b) {
			t.Fatal("a version is a downgrade of itself")
		}
	})
}
