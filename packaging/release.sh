#!/bin/sh
# Writes a release into dist/ (`make release VERSION=X.Y.Z`): a static
# commandcore for each of linux/amd64 and linux/arm64, named
# commandcore-linux-ARCH (the names a relay's install.sh downloads), the .deb
# and .rpm of each (packaging/package.sh), and SHA256SUMS over them all.
# The same tree and VERSION give the same bytes: the binaries carry no build
# ID, no paths and no VCS stamp, and the packages' times are the commit's
# (SOURCE_DATE_EPOCH).
#
# VERSION  X.Y.Z, with an optional v (required): no suffix, so every file
#          name is one a relay serves (letters, digits, '.', '_', '-')
# COMMIT   what `commandcore version` names as the commit (default: git's)
# DIST     the directory to write, emptied first (default dist)
set -eu
export LC_ALL=C
cd "$(dirname "$0")/.."

GO=${GO:-go}
DIST=${DIST:-dist}
: "${VERSION:?set VERSION=X.Y.Z}"
case ${VERSION#v} in
*[!0-9.]* | .* | *. | *..* | *.*.*.*) bad=1 ;;
*.*.*) bad= ;;
*) bad=1 ;;
esac
case $bad in
1)
	echo "release.sh: VERSION $VERSION is not X.Y.Z" >&2
	exit 2
	;;
esac
COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
# The packages' file and archive times: the commit's, so that a rebuild of
# the same commit gives the same packages.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
export SOURCE_DATE_EPOCH

rm -rf "$DIST"
mkdir -p "$DIST"
pkg=github.com/commandcore/commandcore/internal/version
for arch in amd64 arm64; do
	bin=$DIST/commandcore-linux-$arch
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch $GO build -trimpath -buildvcs=false \
		-ldflags "-buildid= -X $pkg.Version=$VERSION -X $pkg.Commit=$COMMIT" -o "$bin" ./cmd/commandcore
	# The packaged binary's mode and time come from nfpm's configuration,
	# not from the file.
	BIN=$bin ARCH=$arch VERSION=$VERSION DIST=$DIST GO=$GO packaging/package.sh
done
# The relay's container image, built without a daemon from the binaries
# just made (internal/ociimage): a docker/podman tarball per architecture
# and one OCI image layout of both, in DIST/image. Nothing a device
# downloads, so outside SHA256SUMS.
ca=
[ ! -r /etc/ssl/certs/ca-certificates.crt ] || ca=/etc/ssl/certs/ca-certificates.crt
mkdir -p "$DIST/image"
$GO run ./internal/ociimage/cmd/imagegen -out "$DIST/image" -version "$VERSION" -commit "$COMMIT" \
	-created "$SOURCE_DATE_EPOCH" ${ca:+-ca "$ca"} amd64="$DIST/commandcore-linux-amd64" arm64="$DIST/commandcore-linux-arm64"
# The version the binaries report, for a relay serving this directory to
# tell an outdated agent (relay serve --downloads).
printf '%s\n' "$VERSION" >"$DIST/VERSION"
(cd "$DIST" && find . -maxdepth 1 -type f ! -name 'SHA256SUMS*' | sed 's|^\./||' | sort | xargs sha256sum -- >SHA256SUMS.new && mv SHA256SUMS.new SHA256SUMS)
