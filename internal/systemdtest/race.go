//go:build race

package systemdtest

const raceEnabled = true
