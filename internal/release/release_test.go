// Package release holds the test that `make release` is reproducible: two
// builds of the same tree and version into two directories give the same
// SHA256SUMS, byte for byte, over static binaries and packages for
// linux/amd64 and linux/arm64.
package release

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// version is the release version the test builds.
const version = "9.8.7"

// want is every file `make release` writes for version, sorted.
var want = []string{
	"SHA256SUMS", "VERSION",
	"commandcore-9.8.7-1.aarch64.rpm", "commandcore-9.8.7-1.x86_64.rpm",
	"commandcore-linux-amd64", "commandcore-linux-arm64",
	"commandcore_9.8.7_amd64.deb", "commandcore_9.8.7_arm64.deb", "image",
}

// nfpm installs, into a new directory, the nfpm that packaging/package.sh
// runs by default (go run of the version it pins) and returns its path: the
// same program, built once, where package.sh would go run it for each of a
// release's four packages.
func nfpm(t *testing.T) string {
	t.Helper()
	script, err := os.ReadFile("../../packaging/package.sh")
	if err != nil {
		t.Fatal(err)
	}
	pinned := regexp.MustCompile(`github\.com/goreleaser/nfpm/v2/cmd/nfpm@v[0-9][0-9.]*`).Find(script)
	if pinned == nil {
		t.Fatal("packaging/package.sh pins no nfpm version")
	}
	bin := t.TempDir()
	cmd := exec.Command("go", "install", string(pinned))
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "GOBIN="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install %s: %v\n%s", pinned, err, out)
	}
	return filepath.Join(bin, "nfpm")
}

// release runs packaging/release.sh, packaging with the nfpm at nfpmPath, into
// a new directory and returns it.
func release(t *testing.T, nfpmPath string) string {
	t.Helper()
	dist := filepath.Join(t.TempDir(), "dist")
	cmd := exec.Command("packaging/release.sh")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "VERSION="+version, "DIST="+dist, "NFPM="+nfpmPath)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("release.sh: %v\n%s", err, out)
	}
	return dist
}

// TestReleaseIsReproducible builds the release twice, from one tree, and
// compares what the two wrote.
func TestReleaseIsReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries and four packages twice (about 35 s)")
	}
	tool := nfpm(t)
	a, b := release(t, tool), release(t, tool)
	entries, err := os.ReadDir(a)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, want) {
		t.Fatalf("dist/ holds %q, want %q", names, want)
	}
	sumsA, errA := os.ReadFile(filepath.Join(a, "SHA256SUMS"))
	sumsB, errB := os.ReadFile(filepath.Join(b, "SHA256SUMS"))
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if !bytes.Equal(sumsA, sumsB) {
		t.Fatalf("two builds differ:\n%s\n%s", sumsA, sumsB)
	}
	// Every file but the sums themselves is in them; the image, which no
	// device downloads, is not.
	if n := strings.Count(string(sumsA), "\n"); n != len(want)-2 || strings.Contains(string(sumsA), "image") {
		t.Errorf("SHA256SUMS has %d lines, want %d, none of the image:\n%s", n, len(want)-2, sumsA)
	}
	// The relay's container image is the same bytes too: each
	// architecture's tarball and the layout's index, so the same digests.
	for _, f := range []string{"image/commandcore-relay-image-linux-amd64.tar", "image/commandcore-relay-image-linux-arm64.tar", "image/commandcore-relay-image-oci/index.json"} {
		x, errX := os.ReadFile(filepath.Join(a, f))
		y, errY := os.ReadFile(filepath.Join(b, f))
		if errX != nil || errY != nil || len(x) == 0 || !bytes.Equal(x, y) {
			t.Errorf("%s differs between two builds (%v, %v)", f, errX, errY)
		}
	}
	check := exec.Command("sha256sum", "--check", "--quiet", "SHA256SUMS")
	check.Dir = b
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("sha256sum --check in the second build: %v\n%s", err, out)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		f, err := elf.Open(filepath.Join(a, "commandcore-linux-"+arch))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("commandcore-linux-%s is not static: it has %v", arch, p.Type)
			}
		}
		if wantMachine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]; f.Machine != wantMachine {
			t.Errorf("commandcore-linux-%s is for %v", arch, f.Machine)
		}
		f.Close()
	}
	out, err := exec.Command(filepath.Join(a, "commandcore-linux-"+runtime.GOARCH), "version").Output()
	if err != nil || !strings.Contains(string(out), version) {
		t.Errorf("commandcore version: %v: %s", err, out)
	}
}
