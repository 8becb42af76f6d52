package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/testkit"
)

// TestRelayCarriesTheLargestToolInput: through the relay, with the
// official Go SDK client, files.write takes its whole 8 MiB (as base64,
// 10.7 MiB of request) and the file holds exactly those bytes; a request
// larger than the relay takes is answered as the tool's failure, with a
// code and a way out in its message, and audited, not dropped as an HTTP
// error.
func TestRelayCarriesTheLargestToolInput(t *testing.T) {
	e := startRelay(t)
	c := e.online()
	content := make([]byte, limits.FileWriteMax)
	rand.Read(content)
	path := filepath.Join(t.TempDir(), "eight-mib.bin")
	var wrote struct {
		BytesWritten int64  `json:"bytes_written"`
		SHA256       string `json:"sha256"`
	}
	c.ok("files.write", map[string]any{"path": path, "content": base64.StdEncoding.EncodeToString(content), "encoding": "base64"}, &wrote)
	sum := sha256.Sum256(content)
	if wrote.BytesWritten != int64(len(content)) || wrote.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("files.write of 8 MiB through the relay: %+v", wrote)
	}
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, content) {
		t.Fatalf("the file holds other bytes (%v)", err)
	}

	huge := strings.Repeat("x", limits.MaxRelayRequestBytes+1)
	code, msg := c.fail("files.write", map[string]any{"path": path + ".huge", "content": huge})
	if code != "invalid_argument" || !strings.Contains(msg, "larger than the relay takes") || !strings.Contains(msg, "mode append") {
		t.Fatalf("an oversized request: %s %q, want invalid_argument saying how to write in parts", code, msg)
	}
	if _, err := os.Stat(path + ".huge"); err == nil {
		t.Fatal("the oversized write reached the device")
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		out := e.relayCmd("audit", "--last", "1", "--json")
		var a store.AuditEntry
		if json.Unmarshal([]byte(out), &a) != nil || a.Tool != "files.write" || a.Outcome != store.AuditFailed || a.Code != "invalid_argument" {
			return fmt.Errorf("the oversized call is not the last audit entry:\n%s", out)
		}
		return nil
	})
}
