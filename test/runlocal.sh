# Sourced by the opt-in client checks (test/*/run.sh): starts make run's
# set-up (scripts/run-local.sh) for BIN in a throw-away directory, waits
# until it printed the MCP URL and the client token, and stops it on exit.
# Sets work, url, token and runner; needs root (the repository) and name
# (the check's, for its messages).
work=$(mktemp -d "${TMPDIR:-/tmp}/commandcore-$name.XXXXXX")
runner=
cleanup() {
	rc=$?
	set +e
	[ -n "$runner" ] && kill "$runner" 2>/dev/null && wait "$runner" 2>/dev/null
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
RUN_DIR=$work/run "$root/scripts/run-local.sh" "$bin" >"$work/run.out" 2>&1 &
runner=$!
url= token=
for _ in $(seq 200); do
	url=$(sed -n 's/^  MCP endpoint (Streamable HTTP): //p' "$work/run.out")
	token=$(sed -n 's/^  Authorization: Bearer //p' "$work/run.out")
	[ -n "$url" ] && [ -n "$token" ] && break
	kill -0 "$runner" 2>/dev/null || { cat "$work/run.out" >&2; exit 1; }
	sleep 0.1
done
[ -n "$url" ] || { echo "$name: make run's set-up did not come up" >&2; exit 1; }
