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

// TestOutputSchemaTypesEachFieldOnce: a listed schema gives each field one
// type, or anyOf one schema a type where a result holds two: null only in
// a field not left out when empty, and a record's error word beside a
// failure's error object; never a type that is an array.
func TestOutputSchemaTypesEachFieldOnce(t *testing.T) {
	type result struct {
		Items []string `json:"items"`
		More  []string `json:"more,omitempty"`
		Code  *int     `json:"code"`
		Sum   *string  `json:"sum,omitempty"`
		Error string   `json:"error,omitempty"`
		Name  string   `json:"name"`
	}
	s, err := OutputSchema[*result]()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(s)
	var got, want any
	json.Unmarshal(raw, &got)
	json.Unmarshal([]byte(`{"type":"object","properties":{
		"items":{"anyOf":[{"type":"null"},{"type":"array"}]},"more":{"type":"array"},
		"code":{"anyOf":[{"type":"null"},{"type":"integer"}]},"sum":{"type":"string"},
		"error":{"anyOf":[{"type":"string"},{"type":"object"}]},"name":{"type":"string"}}}`), &want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("schema %s", raw)
	}
	resolved, err := s.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range []string{`{"items":null,"code":null,"name":"a"}`, `{"items":["x"],"more":["y"],"code":3,"sum":"ab","error":"exec_failed","name":"a"}`,
		`{"error":{"code":"not_found","message":"no such job"}}`} {
		var v any
		json.Unmarshal([]byte(doc), &v)
		if err := resolved.Validate(v); err != nil {
			t.Errorf("%s refused: %v", doc, err)
		}
	}
	for _, doc := range []string{`{"more":null}`, `{"sum":null}`, `{"code":"3"}`, `{"error":null}`, `{"name":null}`} {
		var v any
		json.Unmarshal([]byte(doc), &v)
		if resolved.Validate(v) == nil {
			t.Errorf("%s admitted", doc)
		}
	}
}
