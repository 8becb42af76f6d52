package toolresult

import (
	"fmt"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"
)

// OutputSchema is the outputSchema of a tool whose successful result is an
// Out (a struct, or a pointer to one): that result's schema, or the error
// result's, since a failure carries structuredContent too and a client
// that validates it (the TypeScript SDK does) must accept both.
func OutputSchema[Out any]() (*jsonschema.Schema, error) {
	t := reflect.TypeFor[Out]()
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("result type %v is not a struct", t)
	}
	ok, err := jsonschema.ForType(t, nil)
	if err != nil {
		return nil, fmt.Errorf("result schema: %w", err)
	}
	failed, err := jsonschema.For[ErrorResult](nil)
	if err != nil {
		return nil, fmt.Errorf("error schema: %w", err)
	}
	return &jsonschema.Schema{Type: "object", AnyOf: []*jsonschema.Schema{ok, failed}}, nil
}
