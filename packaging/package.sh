#!/bin/sh
# Builds the commandcore .deb and .rpm into dist/ with nfpm (`make package`).
#
#   BIN=dist/commandcore VERSION=v1.2.3 packaging/package.sh
#
# BIN      the binary to package (required; `make package` builds a static one)
# VERSION  the version in `git describe --tags --always --dirty` form (default:
#          from git); turned into a Debian/RPM version: v1.2.3 -> 1.2.3,
#          v1.2.3-4-gabc1234-dirty -> 1.2.3+4.gabc1234.dirty, and without a
#          tag abc1234 -> 0.0.0+abc1234 (pre-release tags get no special
#          ordering: v1.2.3-rc1 -> 1.2.3+rc1)
# NFPM     the nfpm command (default: go run of the pinned version)
# ARCH     the package architecture, in Go's spelling (default: go env GOARCH)
# MAINTAINER  the package maintainer field
set -eu
cd "$(dirname "$0")/.."

GO=${GO:-go}
# v2.46 and later need go.digitalxero.dev modules, which the module proxy
# on the build machines does not serve; v2.45.2 builds with Go 1.26.
NFPM=${NFPM:-"$GO run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2"}
: "${BIN:?set BIN to the commandcore binary to package}"
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
ARCH=${ARCH:-$($GO env GOARCH)}
MAINTAINER=${MAINTAINER:-CommandCore maintainers <maintainers@commandcore.invalid>}
DIST=${DIST:-dist}

[ -x "$BIN" ] || { echo "package.sh: $BIN is not an executable" >&2; exit 1; }

# The packaged unit is the template rendered for /usr/bin/commandcore; the
# copy in install/ must be current (go generate ./internal/install/).
unit=$(mktemp)
trap 'rm -f "$unit"' EXIT
$GO run ./internal/install/cmd/unitgen -o "$unit"
if ! cmp -s "$unit" install/commandcore.service; then
	echo "package.sh: install/commandcore.service is stale; run: go generate ./internal/install/" >&2
	diff -u install/commandcore.service "$unit" >&2 || true
	exit 1
fi

v=${VERSION#v}
case $v in
[0-9]*.[0-9]*.[0-9]*)
	base=$(printf '%s' "$v" | sed 's/^\([0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*\).*/\1/')
	rest=${v#"$base"}
	rest=${rest#-}
	;;
*)
	base=0.0.0
	rest=$v
	;;
esac
rest=$(printf '%s' "$rest" | tr -c 'A-Za-z0-9' '.')
PKG_VERSION=$base${rest:++$rest}

mkdir -p "$DIST"
export PKG_VERSION ARCH BIN MAINTAINER
for p in deb rpm; do
	$NFPM package --config packaging/nfpm.yaml --packager "$p" --target "$DIST/"
done
