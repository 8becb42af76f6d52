package systemdtest

import (
	"os"
	"strings"
	"syscall"
)

// WithoutRaceExitPause is for a test binary that doubles as the main
// process of a unit (`EXE supervise DIR` in a TestMain): built with -race,
// it re-executes itself with GORACE's atexit_sleep_ms=0 added, so that its
// exit is not held back by the race runtime's default second of sleep
// before exiting, which the manager, and every test waiting for the unit
// or its job to end, would otherwise wait out. Races are still reported,
// and still make the exit status 66. It returns, doing nothing, when the
// binary is not built with -race, when GORACE already sets
// atexit_sleep_ms, or when the re-execution fails.
func WithoutRaceExitPause() {
	gorace := os.Getenv("GORACE")
	if !raceEnabled || strings.Contains(gorace, "atexit_sleep_ms") {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	env := []string{"GORACE=" + strings.TrimSpace(gorace+" atexit_sleep_ms=0")}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GORACE=") {
			env = append(env, kv)
		}
	}
	// The same process (PID, start time) runs on, with its descriptors.
	syscall.Exec(exe, os.Args, env)
}
