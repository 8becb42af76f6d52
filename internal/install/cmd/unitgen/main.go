// Command unitgen prints the agent's user unit rendered from the template in
// package install, for packaging and for the checked-in reference copy:
//
//	go run ./internal/install/cmd/unitgen               # the packaged unit (/usr/bin/commandcore)
//	go run ./internal/install/cmd/unitgen -o FILE       # written to FILE instead of stdout
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/commandcore/commandcore/internal/install"
)

func main() {
	exe := flag.String("exe", install.PackagedExe, "absolute path of the binary the unit runs")
	service := flag.String("service", install.DefaultService, "unit name")
	out := flag.String("o", "", "write to this file instead of stdout")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: unitgen [-exe PATH] [-service NAME] [-o FILE]")
		os.Exit(2)
	}
	unit, err := install.Render(install.Options{Service: *service, Exe: *exe, UnitDir: "/"})
	if err == nil {
		if *out == "" {
			_, err = os.Stdout.Write(unit)
		} else {
			err = os.WriteFile(*out, unit, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "unitgen:", err)
		os.Exit(1)
	}
}
