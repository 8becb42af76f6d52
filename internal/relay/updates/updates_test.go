package updates

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/commandcore/commandcore/internal/relay/downloads"
)

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// release writes a release directory: binaries for amd64 and arm64,
// SHA256SUMS over them, and VERSION when version is set.
func release(t *testing.T, version string) string {
	t.Helper()
	dir := t.TempDir()
	var sums strings.Builder
	for _, arch := range []string{"amd64", "arm64"} {
		body := []byte("binary for " + arch)
		os.WriteFile(filepath.Join(dir, downloads.BinaryName(arch)), body, 0o755)
		sums.WriteString(hexSum(body) + "  " + downloads.BinaryName(arch) + "\n")
	}
	if version != "" {
		os.WriteFile(filepath.Join(dir, VersionFile), []byte(version+"\n"), 0o644)
		sums.WriteString(hexSum([]byte(version+"\n")) + "  " + VersionFile + "\n")
	}
	os.WriteFile(filepath.Join(dir, downloads.SumsName), []byte(sums.String()), 0o644)
	return dir
}

// catalog is a catalog over what a real downloads server serves from dir
// and a relay binary of its own.
func catalog(t *testing.T, mode Mode, dir string) (*Catalog, string) {
	t.Helper()
	self := filepath.Join(t.TempDir(), "relay")
	os.WriteFile(self, []byte("the relay"), 0o755)
	dl, err := downloads.New(downloads.Config{PublicURL: "http://127.0.0.1:1", Dir: dir, Self: self})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dl.Close() })
	c, err := New(Config{Mode: mode, Version: "1.1.0", Dir: dir, Sums: dl.Sums})
	if err != nil {
		t.Fatal(err)
	}
	return c, hexSum([]byte("the relay"))
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": Notify, "off": Off, "notify": Notify, "auto": Auto} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseMode("always"); err == nil {
		t.Error("an unknown mode parsed")
	}
}

func TestTheRelaysOwnBinaryIsOffered(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a relay serves its own binary to agents only on Linux")
	}
	c, sum := catalog(t, Notify, "")
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			o, ok := c.For(runtime.GOARCH, "1.0.0")
			if !ok || o.Version != "1.1.0" || o.SHA256 != sum || o.Name != downloads.BinaryName(runtime.GOARCH) || o.Apply {
				t.Errorf("offer %+v, %v", o, ok)
			}
		})
	}
	wg.Wait()
	if _, ok := c.For(runtime.GOARCH, "1.1.0"); ok {
		t.Error("an agent of the relay's version is offered an update")
	}
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	if _, ok := c.For(other, "1.0.0"); ok {
		t.Error("an architecture nothing is served for is offered an update")
	}
	if _, ok := c.For("AMD64/..", "1.0.0"); ok {
		t.Error("a malformed architecture is offered an update")
	}
}

func TestAReleaseIsOfferedWithItsVersion(t *testing.T) {
	c, _ := catalog(t, Auto, release(t, "2.0.0"))
	for _, arch := range []string{"amd64", "arm64"} {
		o, ok := c.For(arch, "1.1.0")
		if !ok || o.Version != "2.0.0" || o.SHA256 != hexSum([]byte("binary for "+arch)) || o.Name != downloads.BinaryName(arch) || !o.Apply {
			t.Errorf("%s: offer %+v, %v", arch, o, ok)
		}
	}
	if _, ok := c.For("amd64", "2.0.0"); ok {
		t.Error("a current agent is offered an update")
	}
}

func TestAReleaseWithoutVersionOffersNothingOfItsOwn(t *testing.T) {
	c, _ := catalog(t, "", release(t, ""))
	if c.Mode() != Notify {
		t.Errorf("mode %q", c.Mode())
	}
	for _, arch := range []string{"amd64", "arm64"} {
		if o, ok := c.For(arch, "1.0.0"); ok {
			t.Errorf("%s: a release of no stated version is offered: %+v", arch, o)
		}
	}
}

func TestBadReleasesAreRefused(t *testing.T) {
	for name, spoil := range map[string]func(dir string){
		"two-line version": func(dir string) { os.WriteFile(filepath.Join(dir, VersionFile), []byte("1.0\n2.0\n"), 0o644) },
		"huge version": func(dir string) {
			os.WriteFile(filepath.Join(dir, VersionFile), []byte(strings.Repeat("9", 200)), 0o644)
		},
		"no sums": func(dir string) { os.Remove(filepath.Join(dir, downloads.SumsName)) },
		"bad sums": func(dir string) {
			os.WriteFile(filepath.Join(dir, downloads.SumsName), []byte(strings.Repeat("Z", 64)+"  commandcore-linux-amd64\n"), 0o644)
		},
	} {
		dir := release(t, "2.0.0")
		spoil(dir)
		if _, err := New(Config{Version: "1.1.0", Dir: dir}); err == nil {
			t.Errorf("%s: a bad release was taken", name)
		}
	}
}

func TestOffOffersNothing(t *testing.T) {
	c, _ := catalog(t, Off, release(t, "2.0.0"))
	if _, ok := c.For("amd64", "1.0.0"); ok {
		t.Error("off offered an update")
	}
	if _, ok := (&Catalog{mode: Notify, version: "1.1.0"}).For(runtime.GOARCH, "1.0.0"); ok {
		t.Error("an offer without sums")
	}
}

// TestNamesAndVersionsAtTheirBounds: an architecture is 1 to 16 lowercase
// letters and digits, a version 1 to 64 bytes of printable ASCII without
// spaces; one past either bound, or a character just outside a range, is
// no name or version at all.
func TestNamesAndVersionsAtTheirBounds(t *testing.T) {
	for arch, want := range map[string]bool{
		"amd64": true, "a": true, "z9": true, "0": true, strings.Repeat("a", 16): true,
		"": false, strings.Repeat("a", 17): false, "Amd64": false, "amd`": false, "amd{": false, "amd/": false, "amd:": false, "arm-64": false,
	} {
		if got := validArch(arch); got != want {
			t.Errorf("validArch(%q) = %v, want %v", arch, got, want)
		}
	}
	for v, want := range map[string]bool{
		"1.0.0": true, "!": true, "~": true, strings.Repeat("9", 64): true,
		"": false, strings.Repeat("9", 65): false, "1.0 beta": false, "1.0\x7f": false, "1.0\x1f": false, "1.0é": false,
	} {
		if got := validVersion(v); got != want {
			t.Errorf("validVersion(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestAVersionFileAtItsBound: VERSION is read up to its bound and refused
// one byte past it.
func TestAVersionFileAtItsBound(t *testing.T) {
	for size, ok := range map[int]bool{maxVersionFile: true, maxVersionFile + 1: false} {
		path := filepath.Join(t.TempDir(), VersionFile)
		os.WriteFile(path, []byte(strings.Repeat("9", size)), 0o644)
		b, err := readBounded(path, maxVersionFile)
		if (err == nil) != ok || ok && len(b) != size {
			t.Errorf("a %d-byte VERSION: %d bytes, %v", size, len(b), err)
		}
	}
}

// TestTheSumsAreReadOnce: the sums a catalog offers are read on the first
// offer only (they are fixed from the relay's start), and a catalog
// whose sums cannot be had offers nothing.
func TestTheSumsAreReadOnce(t *testing.T) {
	reads := 0
	sums := "0000000000000000000000000000000000000000000000000000000000000000  " + downloads.BinaryName(runtime.GOARCH) + "\n"
	c, err := New(Config{Mode: Notify, Version: "2.0.0", Sums: func() ([]byte, error) { reads++; return []byte(sums), nil }})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if o, ok := c.For(runtime.GOARCH, "1.0.0"); runtime.GOOS == "linux" && (!ok || o.SHA256 != strings.Repeat("0", 64)) {
			t.Fatalf("offer %+v, %v", o, ok)
		}
	}
	if runtime.GOOS == "linux" && reads != 1 {
		t.Errorf("the sums were read %d times", reads)
	}
	none, err := New(Config{Mode: Notify, Version: "2.0.0", Sums: func() ([]byte, error) { return nil, os.ErrNotExist }})
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := none.For(runtime.GOARCH, "1.0.0"); ok {
		t.Errorf("a catalog without sums offers %+v", o)
	}
}
