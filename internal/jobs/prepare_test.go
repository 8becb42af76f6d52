package jobs

import (
	"context"
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/principal"
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

// TestStartRefusesBadTimeLimits: timeout_s is 1-2592000, 0 or absent for
// none (docs/tools.md); anything else is invalid_argument before any job exists.
func TestStartRefusesBadTimeLimits(t *testing.T) {
	svc := service(t, "/nonexistent")
	for _, secs := range []int{-1, 2592001, 1 << 40} {
		_, err := svc.Start(context.Background(), principal.Local, StartRequest{Command: "true", TimeoutS: secs})
		if !errcode.Is(err, errcode.InvalidArgument) {
			t.Errorf("timeout_s %d: %v, want invalid_argument", secs, err)
		}
	}
	if jobs, err := svc.store.List(); err != nil || len(jobs) != 0 {
		t.Fatalf("refused starts left %d jobs (%v)", len(jobs), err)
	}
	for _, secs := range []int{0, 1, 2592000} {
		env, err := svc.validateStart(&StartRequest{Command: "true", Cwd: "/", TimeoutS: secs})
		if err != nil || env.TimeoutS != secs {
			t.Errorf("timeout_s %d: %v, envelope limit %v", secs, err, env)
		}
	}
}
