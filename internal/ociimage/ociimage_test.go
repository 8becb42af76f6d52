package ociimage

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

var created = time.Unix(1_800_000_000, 0)

// fixture writes a stand-in binary and CA bundle and returns a Config.
func fixture(t *testing.T, arch string) Config {
	t.Helper()
	dir := t.TempDir()
	bin, ca := filepath.Join(dir, "commandcore"), filepath.Join(dir, "ca.pem")
	os.WriteFile(bin, []byte("\x7fELF the static binary for "+arch), 0o755)
	os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o644)
	return Config{Binary: bin, Arch: arch, CACerts: ca, Version: "1.2.3", Commit: "abc1234", Created: created}
}

// entry is a file of the image's filesystem as a container sees it.
type entry struct {
	mode     int64
	uid, gid int
	dir      bool
	data     string
}

func filesOf(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	out := map[string]entry{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		out["/"+filepath.Clean(h.Name)] = entry{mode: h.Mode, uid: h.Uid, gid: h.Gid, dir: h.Typeflag == tar.TypeDir, data: string(data)}
	}
}

// TestTheImage: from scratch, the static binary alone runs, as a user
// that is not root, `relay serve` on port 8440 with its state in the
// volume the user owns; no shell or other program is in it; the labels
// name the version, commit and source.
func TestTheImage(t *testing.T) {
	cfg := fixture(t, "arm64")
	img, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.Architecture != "arm64" || cf.OS != "linux" || !cf.Created.Equal(created) {
		t.Errorf("platform %s/%s, created %v", cf.OS, cf.Architecture, cf.Created)
	}
	if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/usr/bin/commandcore", "relay", "serve"}) ||
		!slices.Equal(c.Cmd, []string{"--listen", "0.0.0.0:8440", "--state-dir", "/var/lib/commandcore-relay"}) {
		t.Errorf("user %q, entrypoint %q, cmd %q", c.User, c.Entrypoint, c.Cmd)
	}
	if _, ok := c.ExposedPorts["8440/tcp"]; !ok {
		t.Errorf("exposed ports %v", c.ExposedPorts)
	}
	if _, ok := c.Volumes["/var/lib/commandcore-relay"]; !ok {
		t.Errorf("volumes %v", c.Volumes)
	}
	for k, want := range map[string]string{"org.opencontainers.image.version": "1.2.3", "org.opencontainers.image.revision": "abc1234",
		"org.opencontainers.image.source": "https://github.com/commandcore/commandcore", "org.opencontainers.image.created": "2027-01-15T08:00:00Z"} {
		if c.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], want)
		}
	}
	files := filesOf(t, img)
	bin, _ := os.ReadFile(cfg.Binary)
	for name, want := range map[string]entry{
		"/usr/bin/commandcore":               {mode: 0o755, data: string(bin)},
		"/var/lib/commandcore-relay":         {mode: 0o700, uid: 65532, gid: 65532, dir: true},
		"/tmp":                               {mode: 0o1777, dir: true},
		"/etc/passwd":                        {mode: 0o644, data: "root:x:0:0:root:/root:/sbin/nologin\ncommandcore:x:65532:65532:commandcore:/var/lib/commandcore-relay:/sbin/nologin\n"},
		"/etc/group":                         {mode: 0o644, data: "root:x:0:\ncommandcore:x:65532:\n"},
		"/etc/ssl/certs/ca-certificates.crt": {mode: 0o644, data: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"},
	} {
		if got, ok := files[name]; !ok || got != want {
			t.Errorf("%s: %+v (present %v), want %+v", name, got, ok, want)
		}
	}
	var programs []string
	for name, e := range files {
		if !e.dir && e.mode&0o111 != 0 {
			programs = append(programs, name)
		}
	}
	if !slices.Equal(programs, []string{"/usr/bin/commandcore"}) {
		t.Errorf("programs in the image: %q, want the binary alone (no shell)", programs)
	}
}

// TestTheSameInputsGiveTheSameDigest: two builds of the same inputs have
// one digest; another version, binary or time another.
func TestTheSameInputsGiveTheSameDigest(t *testing.T) {
	cfg := fixture(t, "amd64")
	digest := func(c Config) v1.Hash {
		t.Helper()
		img, err := Build(c)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	first := digest(cfg)
	if again := digest(cfg); again != first {
		t.Fatalf("two builds: %s and %s", first, again)
	}
	other := cfg
	other.Version = "1.2.4"
	later := cfg
	later.Created = created.Add(time.Second)
	newer := cfg
	newer.Binary = filepath.Join(t.TempDir(), "commandcore")
	os.WriteFile(newer.Binary, []byte("\x7fELF another build"), 0o755)
	for name, c := range map[string]Config{"version": other, "time": later, "binary": newer} {
		if digest(c) == first {
			t.Errorf("another %s gave the same digest", name)
		}
	}
}

// TestWhatAReleaseWrites: the layout indexes each architecture under its
// platform and reads back as the images built; the tarball is one podman
// and docker load, tagged, of the same digest.
func TestWhatAReleaseWrites(t *testing.T) {
	imgs := map[string]v1.Image{}
	for _, arch := range []string{"amd64", "arm64"} {
		img, err := Build(fixture(t, arch))
		if err != nil {
			t.Fatal(err)
		}
		imgs[arch] = img
	}
	dir := filepath.Join(t.TempDir(), "oci")
	if err := WriteLayout(dir, imgs); err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) != 2 {
		t.Fatalf("the layout's index: %+v %v", m, err)
	}
	for _, d := range m.Manifests {
		want, _ := imgs[d.Platform.Architecture].Digest()
		if d.Platform.OS != "linux" || d.Digest != want {
			t.Errorf("%s/%s is %s, want %s", d.Platform.OS, d.Platform.Architecture, d.Digest, want)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := img.Digest(); got != want {
			t.Errorf("the layout's %s reads back as %s", d.Platform.Architecture, got)
		}
	}
	file := filepath.Join(t.TempDir(), "image.tar")
	if err := WriteTarball(file, "commandcore-relay:1.2.3", imgs["amd64"]); err != nil {
		t.Fatal(err)
	}
	// A docker tarball keeps the config and layers, not the manifest:
	// what loads is the same config and the same layer.
	loaded, err := tarball.ImageFromPath(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	gotCfg, _ := loaded.ConfigName()
	wantCfg, _ := imgs["amd64"].ConfigName()
	gotLayers, _ := loaded.Layers()
	wantLayers, _ := imgs["amd64"].Layers()
	if gotCfg != wantCfg || len(gotLayers) != 1 || len(wantLayers) != 1 {
		t.Fatalf("the tarball's image: config %s (want %s), %d layers", gotCfg, wantCfg, len(gotLayers))
	}
	if a, _ := gotLayers[0].DiffID(); a != mustDiffID(t, wantLayers[0]) {
		t.Errorf("the tarball's layer is %s", a)
	}
	tf, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer tf.Close()
	var manifest []struct{ RepoTags []string }
	tr := tar.NewReader(tf)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		if h.Name == "manifest.json" {
			json.NewDecoder(tr).Decode(&manifest)
		}
	}
	if len(manifest) != 1 || !slices.Equal(manifest[0].RepoTags, []string{"commandcore-relay:1.2.3"}) {
		t.Errorf("the tarball's manifest.json: %+v", manifest)
	}
	if err := WriteTarball(file, "not a tag!", imgs["amd64"]); err == nil {
		t.Error("a malformed tag was taken")
	}
}

func mustDiffID(t *testing.T, l v1.Layer) v1.Hash {
	t.Helper()
	d, err := l.DiffID()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
