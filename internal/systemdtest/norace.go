//go:build !race

package systemdtest

const raceEnabled = false
