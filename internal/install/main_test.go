package install_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/commandcore/commandcore/internal/systemdtest"
	"github.com/commandcore/commandcore/internal/testkit"
)

// bin is the real commandcore binary the installed units run.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "commandcore-install-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// A directory name with a space and a "%" proves ExecStart quoting.
	bin = filepath.Join(dir, "bin dir 100%", "commandcore")
	if err := testkit.Build(bin, testkit.Main, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	// Like internal/e2e, the binary stays in $TMPDIR: systemdtest.Main
	// exits the process.
	systemdtest.Main(m)
}
