package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// tsClientEnv opts into the tests that run the official TypeScript SDK
// (make ts-client-test installs it with npm first).
const tsClientEnv = "COMMANDCORE_TSCLIENT"

// TestTypeScriptSDKOAuthClient: the official TypeScript SDK's OAuth client
// (test/tsclient/oauth.mjs), given only a device's MCP URL of the real
// relay, registers dynamically and sends the person to the authorization
// URL; the person signs in and allows process.jobs and process.status in
// Chromium; the client exchanges the code, lists the agent's jobs and is
// refused process.start.
func TestTypeScriptSDKOAuthClient(t *testing.T) {
	if os.Getenv(tsClientEnv) == "" {
		t.Skip("the TypeScript SDK runs in make ts-client-test (" + tsClientEnv + "=1)")
	}
	p := startPanel(t)
	consent := newConsentInBrowser(t, p, func() {
		eval[bool](p.b, `document.querySelectorAll('input[name=preset]').forEach(i => i.checked = false),
			document.querySelectorAll('input[name=tool]').forEach(i => i.checked = ['process.jobs', 'process.status'].includes(i.value)), true`)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "../../test/tsclient/oauth.mjs", p.url+"/mcp/dev1", consent.callback)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	said := map[string]string{}
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		word, rest, _ := strings.Cut(lines.Text(), " ")
		said[word] = rest
		if word == "AUTHORIZE" {
			res, err := consent.fetch(ctx, &auth.AuthorizationArgs{URL: rest})
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(stdin, "CODE %s\n", res.Code)
		}
	}
	io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("oauth.mjs: %v (said %v)", err, said)
	}
	if said["AUTHORIZE"] == "" || said["JOBS"] == "" || said["START"] != "refused" {
		t.Fatalf("oauth.mjs said %v: want the authorization URL, the job count and process.start refused", said)
	}
}
