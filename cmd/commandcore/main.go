// Command commandcore is the CommandCore agent, job supervisor, local CLI,
// local MCP server and reference relay, in one binary.
package main

import (
	"os"

	"github.com/commandcore/commandcore/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], cli.IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}))
}
