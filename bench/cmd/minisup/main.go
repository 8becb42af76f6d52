// Command minisup is a measurement prototype, not a product binary: the job
// supervisor alone (`minisup supervise JOB_DIR`, the same argv the launcher
// gives commandcore), linked without the MCP SDK, cobra, D-Bus, JSON schema
// and the rest of the agent. The bench package launches jobs with it in
// place of commandcore to show what a separate, small supervisor executable
// would save in start-up latency and resident memory. Build it with
// CGO_ENABLED=0 for a static binary; -ldflags '-X main.maxProcs=1' builds
// the variant that runs with GOMAXPROCS=1.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"

	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/supervisor"
)

// maxProcs, when set at link time, is the supervisor's GOMAXPROCS.
var maxProcs string

func main() {
	if n, err := strconv.Atoi(maxProcs); err == nil && n > 0 {
		runtime.GOMAXPROCS(n)
	}
	if len(os.Args) != 3 || os.Args[1] != "supervise" {
		fmt.Fprintln(os.Stderr, "usage: minisup supervise JOB_DIR")
		os.Exit(2)
	}
	if err := supervisor.Run(os.Args[2], os.Stdin, procid.Default()); err != nil {
		fmt.Fprintf(os.Stderr, "commandcore: %v\n", err)
		os.Exit(1)
	}
}
