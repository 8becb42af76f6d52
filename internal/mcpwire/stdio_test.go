package mcpwire

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// serve runs an MCP server with one tool, "page", over Stdio on pipes and
// returns the client's ends: where it writes requests and where it reads
// the server's lines.
func serve(t *testing.T) (io.Writer, *bufio.Reader) {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	page := strings.Repeat("x", 65536)
	srv.AddTool(&mcp.Tool{Name: "page", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{
				Content:           []mcp.Content{&mcp.TextContent{Text: "running\n" + page}},
				StructuredContent: map[string]any{"data": page},
			}, nil
		})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, &Stdio{In: inR, Out: outW}) }()
	t.Cleanup(func() {
		cancel()
		inW.Close()
		outR.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("the server did not stop")
		}
	})
	return inW, bufio.NewReaderSize(outR, 1<<20)
}

// exchange writes one line and reads the server's next line.
func exchange(t *testing.T, w io.Writer, r *bufio.Reader, line string) string {
	t.Helper()
	if _, err := io.WriteString(w, line+"\n"); err != nil {
		t.Fatal(err)
	}
	got, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the answer to %.60s: %v", line, err)
	}
	return strings.TrimSuffix(got, "\n")
}

func initialize(t *testing.T, w io.Writer, r *bufio.Reader) {
	t.Helper()
	exchange(t, w, r, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`)
	if _, err := io.WriteString(w, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		t.Fatal(err)
	}
}

// TestStdioToolResult: a tool result arrives over Stdio as one line, a
// JSON-RPC response whose result holds the page in both the text and the
// structured content.
func TestStdioToolResult(t *testing.T) {
	w, r := serve(t)
	initialize(t, w, r)
	line := exchange(t, w, r, `{"jsonrpc":"2.0","id":"call-1","method":"tools/call","params":{"name":"page","arguments":{}}}`)
	var resp struct {
		JSONRPC string `json:"jsonrpc"`
		ID      string `json:"id"`
		Result  struct {
			Content []struct {
				Type, Text string
			} `json:"content"`
			StructuredContent struct {
				Data string `json:"data"`
			} `json:"structuredContent"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(line), &resp); err != nil {
		t.Fatalf("the answer is not one JSON value: %v (%.200s)", err, line)
	}
	page := strings.Repeat("x", 65536)
	if resp.JSONRPC != "2.0" || resp.ID != "call-1" || len(resp.Result.Content) != 1 ||
		resp.Result.Content[0].Type != "text" || resp.Result.Content[0].Text != "running\n"+page ||
		resp.Result.StructuredContent.Data != page {
		t.Fatalf("answer %.300s", line)
	}
	if !strings.HasPrefix(line, `{"jsonrpc":"2.0","id":"call-1","result":{"content":[{"type":"text","text":"running\n`) {
		t.Errorf("answer begins %.100s", line)
	}
}

// TestStdioBatch: a batch of calls is still answered as the SDK answers
// one, with one array holding every response, also after single calls
// were answered.
func TestStdioBatch(t *testing.T) {
	w, r := serve(t)
	initialize(t, w, r)
	if got := exchange(t, w, r, `{"jsonrpc":"2.0","id":1,"method":"ping"}`); got != `{"jsonrpc":"2.0","id":1,"result":{}}` {
		t.Fatalf("ping answered %s", got)
	}
	line := exchange(t, w, r, ` [{"jsonrpc":"2.0","id":2,"method":"ping"},{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"page","arguments":{}}}]`)
	var batch []struct {
		ID     int             `json:"id"`
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal([]byte(line), &batch); err != nil || len(batch) != 2 {
		t.Fatalf("batch answered with %.200s (%v)", line, err)
	}
	if batch[0].ID != 2 || string(batch[0].Result) != `{}` || batch[1].ID != 3 || !strings.Contains(string(batch[1].Result), `"structuredContent":{"data":"xxx`) {
		t.Fatalf("batch answered with %.300s", line)
	}
	// Later single calls are answered singly.
	if got := exchange(t, w, r, `{"jsonrpc":"2.0","id":4,"method":"ping"}`); got != `{"jsonrpc":"2.0","id":4,"result":{}}` {
		t.Fatalf("ping after the batch answered %s", got)
	}
}

func TestBatchWatch(t *testing.T) {
	for _, c := range []struct {
		in      string
		batched bool
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n", false},
		{`{"a":"[x]\n[y]"}` + "\n" + `{"b":[1]}` + "\n", false}, // brackets inside a message
		{"[{}]\n", true},
		{"{}\n \t\r[{}]\n", true},
		{"{}\n\n[{}]", true},
	} {
		// One byte a read, so the state carries across reads.
		b := &batchWatch{r: strings.NewReader(c.in), lineStart: true}
		if _, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{b}, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		if b.batched.Load() != c.batched {
			t.Errorf("%q: batched = %v", c.in, b.batched.Load())
		}
	}
}
