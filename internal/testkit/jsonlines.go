package testkit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
)

// DecodeLines decodes the CLI's list output (one JSON object per line,
// see internal/cli/output.go) into one value per line.
func DecodeLines[T any](out []byte) ([]T, error) {
	var vs []T
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		vs = append(vs, v)
	}
	return vs, sc.Err()
}
