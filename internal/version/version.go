// Package version reports the build's version, set at link time.
package version

import "runtime"

// Set with -ldflags "-X github.com/commandcore/commandcore/internal/version.Version=...".
var (
	Version = "dev"
	Commit  = "unknown"
)

// GoVersion is the Go toolchain that built the binary.
func GoVersion() string { return runtime.Version() }
