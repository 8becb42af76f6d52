// Package ociimage builds the relay's container image from the static
// binaries of a release, with no daemon and no base image: one layer
// holding the binary, a non-root user, the CA certificates and the state
// directory, `commandcore relay serve` as the entrypoint. The same inputs
// give the same bytes, so the same digest. It is a build tool's library:
// nothing in the commandcore binary imports it.
package ociimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed facts.
const (
	// UID and GID are the relay's user in the image: not root, and no user
	// of a usual host (65532 is distroless's nonroot).
	UID, GID = 65532, 65532
	// User is its name in the image's /etc/passwd.
	User = "commandcore"
	// StateDir is the relay's state directory in the image, the volume to
	// mount.
	StateDir = "/var/lib/commandcore-relay"
	// Binary is where the static binary is.
	Binary = "/usr/bin/commandcore"
	// Port is the port the relay listens on in the image.
	Port = 8440
	// Source is the labels' source URL.
	Source = "https://github.com/commandcore/commandcore"
)

// Config is what an image is made of.
type Config struct {
	// Binary is the static commandcore binary for Arch (amd64, arm64).
	Binary, Arch string
	// CACerts is a PEM bundle of CA certificates for the relay's outbound
	// HTTPS (SSO, client metadata documents); empty for none.
	CACerts string
	// Version and Commit label the image; Created is its creation time
	// and every file's (a release's SOURCE_DATE_EPOCH).
	Version, Commit string
	Created         time.Time
}

// Build makes the image for cfg.
func Build(cfg Config) (v1.Image, error) {
	bin, err := os.ReadFile(cfg.Binary)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	files := []file{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/passwd", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:%s:/sbin/nologin\n", User, UID, GID, User, StateDir))},
		{name: "etc/group", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:\n%s:x:%d:\n", User, GID))},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/bin/", mode: 0o755, dir: true},
		{name: Binary[1:], mode: 0o755, data: bin},
		{name: "var/", mode: 0o755, dir: true},
		{name: "var/lib/", mode: 0o755, dir: true},
		{name: StateDir[1:] + "/", mode: 0o700, dir: true, uid: UID, gid: GID},
	}
	if cfg.CACerts != "" {
		pem, err := os.ReadFile(cfg.CACerts)
		if err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
		files = append(files, file{name: "etc/ssl/", mode: 0o755, dir: true}, file{name: "etc/ssl/certs/", mode: 0o755, dir: true},
			file{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: pem})
	}
	layerTar, err := tarOf(files, cfg.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = cfg.Arch, "linux"
	cf.Created = v1.Time{Time: cfg.Created.UTC()}
	cf.Config = v1.Config{
		User:         fmt.Sprintf("%d:%d", UID, GID),
		Entrypoint:   []string{Binary, "relay", "serve"},
		Cmd:          []string{"--listen", fmt.Sprintf("0.0.0.0:%d", Port), "--state-dir", StateDir},
		WorkingDir:   StateDir,
		Env:          []string{"HOME=" + StateDir, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		ExposedPorts: map[string]struct{}{fmt.Sprintf("%d/tcp", Port): {}},
		Volumes:      map[string]struct{}{StateDir: {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":    "commandcore relay",
			"org.opencontainers.image.version":  cfg.Version,
			"org.opencontainers.image.revision": cfg.Commit,
			"org.opencontainers.image.source":   Source,
			"org.opencontainers.image.created":  cfg.Created.UTC().Format(time.RFC3339),
		},
	}
	cf.History = nil
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	return img, nil
}

// file is one entry of the layer: a directory (name ending in /) or a
// regular file, root's unless uid says otherwise.
type file struct {
	name     string
	mode     int64
	data     []byte
	dir      bool
	uid, gid int
}

// tarOf is the layer's tar: entries sorted by name, each with the one
// time, so that the bytes depend on the inputs alone.
func tarOf(files []file, at time.Time) ([]byte, error) {
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: at.UTC(), Format: tar.FormatPAX}
		if f.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("image layer %s: %w", path.Clean(f.name), err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("image layer %s: %w", path.Clean(f.name), err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	return b.Bytes(), nil
}

// WriteLayout writes imgs, an image per architecture, as an OCI image
// layout at dir: one index naming each with its platform.
func WriteLayout(dir string, imgs map[string]v1.Image) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("image layout: %w", err)
	}
	var adds []mutate.IndexAddendum
	for _, arch := range sortedKeys(imgs) {
		adds = append(adds, mutate.IndexAddendum{Add: imgs[arch], Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	if _, err := layout.Write(dir, idx); err != nil {
		return fmt.Errorf("image layout: %w", err)
	}
	return nil
}

// WriteTarball writes img as a tarball `docker load` and `podman load`
// take, tagged ref.
func WriteTarball(file, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image tag: %w", err)
	}
	if err := tarball.WriteToFile(file, tag, img); err != nil {
		return fmt.Errorf("image tarball: %w", err)
	}
	return nil
}

func sortedKeys(m map[string]v1.Image) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
