package testkit

import (
	"fmt"
	"os"
	"os/exec"
)

// Main is the commandcore binary's package.
const Main = "github.com/commandcore/commandcore/cmd/commandcore"

// Build runs `go build -trimpath -o out flags... pkg`, static and
// cgo-free as `make build` ships the binary, with env added to the
// environment; the compiler's messages go to our standard error. Callers
// build once per process (in TestMain) and share the binary.
func Build(out, pkg string, flags []string, env ...string) error {
	args := append(append([]string{"build", "-trimpath", "-o", out}, flags...), pkg)
	cmd := exec.Command("go", args...)
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0"), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build %s: %w", pkg, err)
	}
	return nil
}
