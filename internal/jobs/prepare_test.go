package jobs

import (
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/errcode"
)

// TestPrepareRefusesEnvStringsExecCannotPass: exec refuses one environment
// string of 128 KiB (131072 bytes) counting its trailing NUL; such a
// request is invalid_argument up front instead of a launch that fails.
func TestPrepareRefusesEnvStringsExecCannotPass(t *testing.T) {
	const maxArgStrlen = 131072
	fits := strings.Repeat("v", maxArgStrlen-1-len("BIG="))
	if _, env, err := Prepare("true", "/", map[string]string{"BIG": fits}, nil); err != nil || len(env) != 1 || len(env[0]) != maxArgStrlen-1 {
		t.Fatalf("a %d-byte env string: %v", maxArgStrlen-1, err)
	}
	_, _, err := Prepare("true", "/", map[string]string{"BIG": fits + "v"}, nil)
	if !errcode.Is(err, errcode.InvalidArgument) {
		t.Fatalf("a %d-byte env string: %v, want invalid_argument", maxArgStrlen, err)
	}
	if strings.Contains(err.Error(), "vvvv") || strings.Contains(err.Error(), "BIG") {
		t.Fatalf("the refusal echoes the entry: %v", err)
	}
}
