// Command commandcore is the CommandCore agent, job supervisor, local CLI,
// local MCP server and reference relay, in one binary.
package main

import (
	"os"

	"github.com/commandcore/commandcore/internal/cli"
	"github.com/commandcore/commandcore/internal/roles"
)

func main() {
	// The per-job supervisor and the hide-exec role skip the command
	// tree (see cli.Supervise, cli.HideExec).
	if len(os.Args) == 3 && os.Args[1] == roles.Supervise {
		os.Exit(cli.Supervise(os.Args[2], os.Stdin, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == roles.HideExec {
		os.Exit(cli.HideExec(os.Args[2:], os.Stderr))
	}
	os.Exit(cli.Main(os.Args[1:], cli.IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}))
}
