#!/bin/sh
# Fails when a tracked file is an ELF binary: built programs and test
# binaries belong in bin/ or dist/, never in the repository.
set -eu
cd "$(dirname "$0")/.."
found=$(git ls-files -z | xargs -0 -r sh -c 'for f; do [ -f "$f" ] && [ "$(head -c 4 "$f" | od -An -c | tr -d " ")" = "177ELF" ] && echo "$f"; done; true' sh)
if [ -n "$found" ]; then
	echo "tracked ELF binaries (remove them, see .gitignore):" >&2
	echo "$found" >&2
	exit 1
fi
