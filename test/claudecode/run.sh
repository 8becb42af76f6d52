#!/bin/sh
# Claude Code's own health check (`claude mcp list`) against the relay as
# `make run` sets it up: added without a header, the server is reported as
# needing authentication (Claude Code found the relay's OAuth metadata from
# the 401 and would sign in through the panel), not as failed; added with
# the static token's header, it is connected. Opt-in (`make
# claude-code-test`): it installs the pinned Claude Code from the npm
# registry into test/claudecode/node_modules, and needs no Anthropic
# account (the health check talks to the MCP server only).
set -eu
bin=${1:?usage: run.sh BIN}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$here"
if [ ! -x node_modules/.bin/claude ]; then
	npm install --no-audit --no-fund >/dev/null
fi
name=claude-code-test
. "$root/test/runlocal.sh"

# Claude Code keeps its configuration under HOME: a throw-away one.
HOME=$work/home
export HOME
mkdir -p "$HOME/project"
cd "$HOME/project"
claude=$here/node_modules/.bin/claude
"$claude" --version
"$claude" mcp add --transport http signs-in "$url" >/dev/null
"$claude" mcp add --transport http static "$url" --header "Authorization: Bearer $token" >/dev/null
"$claude" mcp list >"$work/list.out" 2>&1 || true
cat "$work/list.out"
fail=0
grep -q "^signs-in: .* - ! Needs authentication" "$work/list.out" || { echo "claude-code-test: without a header the relay is not reported as needing authentication" >&2; fail=1; }
grep -q "^static: .* - ✔ Connected" "$work/list.out" || { echo "claude-code-test: with the static token's header the relay is not connected" >&2; fail=1; }
[ "$fail" = 0 ] && echo "claude-code-test: ok"
exit "$fail"
