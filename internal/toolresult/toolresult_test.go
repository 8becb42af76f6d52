package toolresult

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/errcode"
)

func TestFailure(t *testing.T) {
	res := Failure(errcode.New(errcode.NotFound, "no managed job has this process_id"))
	if !res.IsError {
		t.Error("Failure result is not an error")
	}
	er, ok := res.StructuredContent.(ErrorResult)
	if !ok || er.Error == nil || er.Error.Code != errcode.NotFound || er.Error.Message != "no managed job has this process_id" {
		t.Fatalf("structured content = %#v", res.StructuredContent)
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil || string(b) != `{"error":{"code":"not_found","message":"no managed job has this process_id"}}` {
		t.Errorf("structured content encodes as %s, %v", b, err)
	}
	if len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "not_found: no managed job has this process_id" {
		t.Errorf("content = %#v", res.Content)
	}

	// An uncoded error becomes internal without leaking its text.
	_, perr := os.Open("/nonexistent/secret/path")
	res = Failure(fmt.Errorf("open state: %w", perr))
	er = res.StructuredContent.(ErrorResult)
	if !res.IsError || er.Error.Code != errcode.Internal {
		t.Errorf("uncoded error: %#v", er.Error)
	}
	b, _ = json.Marshal(res)
	if strings.Contains(string(b), "secret") {
		t.Errorf("internal error leaks its cause: %s", b)
	}
	// A wrapped coded error keeps its code.
	res = Failure(fmt.Errorf("context: %w", errcode.New(errcode.JobTableFull, "full")))
	if res.StructuredContent.(ErrorResult).Error.Code != errcode.JobTableFull {
		t.Errorf("wrapped code lost: %#v", res.StructuredContent)
	}
}

func TestSuccess(t *testing.T) {
	out := struct {
		ProcessID string `json:"process_id"`
		Forgotten bool   `json:"forgotten"`
	}{"p", true}
	res := Success(out)
	if res.IsError || !reflect.DeepEqual(res.StructuredContent, out) {
		t.Fatalf("Success = %#v", res)
	}
	if len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != `{"process_id":"p","forgotten":true}` {
		t.Errorf("content = %#v", res.Content)
	}
	// The text keeps what JSON would escape for HTML as it is.
	res = Success(map[string]string{"text": "if a < b && c > d {"})
	if text := res.Content[0].(*mcp.TextContent).Text; text != `{"text":"if a < b && c > d {"}` {
		t.Errorf("text = %s", text)
	}
	// A result that cannot be encoded is an internal failure, not a panic.
	res = Success(map[string]any{"f": func() {}})
	if !res.IsError || res.StructuredContent.(ErrorResult).Error.Code != errcode.Internal {
		t.Errorf("unencodable result: %#v", res)
	}
}
