// Package resultbytes measures how many bytes a model reads per tool
// result in a typical session: start a short command and wait for it, start
// an interactive job, read its output, give it input, wait for its end,
// forget it, read a small file, edit one line of it. The same session runs
// against three servers, each over stdio and driven by the go-sdk client:
// the current `commandcore mcp` ("after"), the one of commit c9465b3, before
// compact results ("before"), and Desktop Commander 0.2.52 through its
// nearest tools ("dc"). These are measurements, not assertions: nothing
// fails on a missed target.
//
//	go test ./bench/resultbytes -run '^$' -bench . -benchtime 3x
//
// Opt-in beyond the benchmark flag: "before" needs git and the Go
// toolchain (it is built from `git archive c9465b3`, once, into the
// temporary directory; COMMANDCORE_BEFORE_BIN names a prebuilt one), and
// "dc" needs node and npm (the package is installed once into the temporary
// directory with PUPPETEER_SKIP_DOWNLOAD=1 and its install scripts off;
// DESKTOP_COMMANDER_DIR names an npm prefix that already has it). A server
// that cannot be had is skipped with the reason and its columns read n/a.
//
// Like the e2e tests, the benchmark uses the shared systemd user manager
// (package systemdtest boots or reuses it). Set COMMANDCORE_BIN to measure a
// prebuilt binary; otherwise TestMain builds one.
package resultbytes

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/commandcore/commandcore/bench/benchkit"
	"github.com/commandcore/commandcore/internal/systemdtest"
	"github.com/commandcore/commandcore/internal/testkit"
)

// ccBin is the current commandcore binary.
var ccBin string

func TestMain(m *testing.M) {
	// `go test ./...` visits this package too; only benchmark runs need
	// the binaries and the user manager.
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run())
	}
	var err error
	if ccBin, err = benchkit.Build("COMMANDCORE_BIN", "resultbytes-commandcore", testkit.Main, ""); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Holds the shared users lock and exports XDG_RUNTIME_DIR /
	// DBUS_SESSION_BUS_ADDRESS for the launched servers and their jobs.
	systemdtest.Main(m)
}
