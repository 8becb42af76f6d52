// Command commandcore is the CommandCore agent, job supervisor, local CLI,
// local MCP server and reference relay, in one binary.
package main

import (
	"os"

	"github.com/commandcore/commandcore/internal/cli"
)

func main() {
	// The per-job supervisor skips the command tree (see cli.Supervise).
	if len(os.Args) == 3 && os.Args[1] == "supervise" {
		os.Exit(cli.Supervise(os.Args[2], os.Stdin, os.Stderr))
	}
	os.Exit(cli.Main(os.Args[1:], cli.IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}))
}
