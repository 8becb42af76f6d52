// Command imagegen writes the relay's container image for a release
// (packaging/release.sh): an OCI image layout of every architecture given
// and, for each, a tarball `docker load` and `podman load` take.
//
//	imagegen -out DIR -version V -commit C -created UNIX -ca FILE amd64=BIN arm64=BIN
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/commandcore/commandcore/internal/ociimage"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "imagegen:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("imagegen", flag.ContinueOnError)
	out := fs.String("out", "", "directory to write (the layout in DIR/oci, the tarballs beside it)")
	version := fs.String("version", "", "the release's version")
	commit := fs.String("commit", "", "the release's commit")
	created := fs.String("created", "0", "creation time, Unix seconds (SOURCE_DATE_EPOCH)")
	ca := fs.String("ca", "", "CA certificates (PEM bundle) to put in the image")
	if err := fs.Parse(args); err != nil {
		return err
	}
	secs, err := strconv.ParseInt(*created, 10, 64)
	if err != nil || *out == "" || *version == "" || fs.NArg() == 0 {
		return fmt.Errorf("usage: imagegen -out DIR -version V [-commit C] [-created UNIX] [-ca FILE] ARCH=BINARY...")
	}
	imgs := map[string]v1.Image{}
	for _, a := range fs.Args() {
		arch, bin, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("%q is not ARCH=BINARY", a)
		}
		img, err := ociimage.Build(ociimage.Config{Binary: bin, Arch: arch, CACerts: *ca, Version: *version, Commit: *commit, Created: time.Unix(secs, 0)})
		if err != nil {
			return err
		}
		imgs[arch] = img
		ref := "commandcore-relay:" + strings.TrimPrefix(*version, "v")
		if err := ociimage.WriteTarball(filepath.Join(*out, "commandcore-relay-image-linux-"+arch+".tar"), ref, img); err != nil {
			return err
		}
	}
	return ociimage.WriteLayout(filepath.Join(*out, "commandcore-relay-image-oci"), imgs)
}
