// Command layoutgen writes the README's layout table from each package's
// doc comment (package layout): `make generate`.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/commandcore/commandcore/internal/docs/layout"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "layoutgen:", err)
		os.Exit(1)
	}
}

// run rewrites README.md in the repository root, the working directory's
// ancestor that holds go.mod.
func run() error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		if root == "/" {
			return fmt.Errorf("no go.mod above the working directory")
		}
		root = filepath.Dir(root)
	}
	pkgs, err := layout.Packages(root)
	if err != nil {
		return err
	}
	path := filepath.Join(root, "README.md")
	readme, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := layout.Replace(readme, layout.Table(pkgs))
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}
