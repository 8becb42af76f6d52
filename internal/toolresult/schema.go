package toolresult

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// OutputSchema is the outputSchema a tool whose successful result is an
// Out (a struct, or a pointer to one) lists: the result's fields and their
// JSON types, one level deep. It is lean on purpose: every client loads every tool's schema into each session,
// and the full one (ReferenceSchema) repeats the job record and its
// descriptions in five tools. No field is required and nested objects are
// only typed, and other fields are allowed, so the one schema admits a
// result and a failure's {error} alike (a client that validates a
// failure's structuredContent, as the TypeScript SDK does, must accept it)
// and a newer agent's extra field breaks no client.
//
// No type is an array, ["null","integer"]: the MCP Inspector's type-union
// rule (core/json/schemaLint.ts) flags it, as a client that translates a
// tool's schema into a dialect of single types (Gemini's function
// declarations, OpenAPI 3.0) refuses it. A field of two types is anyOf
// one schema each, as the rule suggests; null is one only where a result
// holds it, in a field that is not left out when empty.
func OutputSchema[Out any]() (*jsonschema.Schema, error) {
	full, err := resultSchema[Out]()
	if err != nil {
		return nil, err
	}
	props := make(map[string]*jsonschema.Schema, len(full.Properties))
	for name, p := range full.Properties {
		types := p.Types
		if p.Type != "" {
			types = []string{p.Type}
		}
		// A result's own error field (a job record's launch failure, a
		// word) must admit a failure's error object too.
		if name == "error" {
			types = append(slices.Clone(types), "object")
		}
		// A field left out when empty (omitempty: not required) is
		// never null.
		if !slices.Contains(full.Required, name) {
			types = slices.DeleteFunc(slices.Clone(types), func(t string) bool { return t == "null" })
		}
		props[name] = oneOf(types)
	}
	return &jsonschema.Schema{Type: "object", Properties: props}, nil
}

// oneOf is the schema of a value of one of types: the type, or anyOf a
// schema of each.
func oneOf(types []string) *jsonschema.Schema {
	if len(types) == 1 {
		return &jsonschema.Schema{Type: types[0]}
	}
	s := &jsonschema.Schema{}
	for _, t := range types {
		s.AnyOf = append(s.AnyOf, &jsonschema.Schema{Type: t})
	}
	return s
}

// ReferenceSchema is the whole schema of an Out result or a failure, with
// every nested field, its description, and what is required: what
// docs/tools.md documents and the tests hold every result to.
func ReferenceSchema[Out any]() (*jsonschema.Schema, error) {
	ok, err := resultSchema[Out]()
	if err != nil {
		return nil, err
	}
	failed, err := jsonschema.For[ErrorResult](nil)
	if err != nil {
		return nil, fmt.Errorf("error schema: %w", err)
	}
	return &jsonschema.Schema{Type: "object", AnyOf: []*jsonschema.Schema{ok, failed}}, nil
}

func resultSchema[Out any]() (*jsonschema.Schema, error) {
	t := reflect.TypeFor[Out]()
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("result type %v is not a struct", t)
	}
	s, err := jsonschema.ForType(t, nil)
	if err != nil {
		return nil, fmt.Errorf("result schema: %w", err)
	}
	return s, nil
}

// Annotate gives t its title and the hints a client reads: read-only (and
// so idempotent), destructive, and closed-world, as every tool here acts
// on this machine alone. The hints a client would assume anyway
// (destructiveHint of a read-only tool) are left out, and the title is
// said once, in the tool's own title field.
func Annotate(t *mcp.Tool, title string, readOnly, destructive bool) {
	closed := false
	t.Title = title
	t.Annotations = &mcp.ToolAnnotations{ReadOnlyHint: readOnly, IdempotentHint: readOnly, OpenWorldHint: &closed}
	if !readOnly {
		t.Annotations.DestructiveHint = &destructive
	}
}
