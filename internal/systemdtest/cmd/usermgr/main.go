// Command usermgr boots, stops or describes the systemd user manager shared
// by the test suite (see package systemdtest).
//
//	go run ./internal/systemdtest/cmd/usermgr up    # boot or reuse; prints the manager PID
//	go run ./internal/systemdtest/cmd/usermgr down  # stop it and clean up (ok if not running)
//	go run ./internal/systemdtest/cmd/usermgr env   # export lines for a shell
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/commandcore/commandcore/internal/systemdtest"
)

func main() {
	if len(os.Args) != 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "up":
		var m *systemdtest.Manager
		if m, err = systemdtest.Ensure(); err == nil {
			fmt.Println(m.PID())
		}
	case "down":
		// Waits for test processes still using the manager.
		err = systemdtest.WithExclusive(func() error {
			return systemdtest.Attach().Shutdown()
		})
	case "env":
		for _, kv := range systemdtest.Attach().Env() {
			k, v, _ := strings.Cut(kv, "=")
			fmt.Printf("export %s='%s'\n", k, v)
		}
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "usermgr:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: usermgr up|down|env")
	os.Exit(2)
}
