// Package roles names the roles the one binary is re-executed as, which
// skip the command tree: main dispatches on these first arguments, the
// launcher and hide-exec start the binary with them, and process.list
// recognizes a job's supervisor by them.
package roles

const (
	// Supervise is a job's supervisor: `commandcore supervise DIR`, the
	// main process of the job's unit.
	Supervise = "supervise"
	// HideExec covers the agent's directories and execs a program:
	// `commandcore hide-exec …`, between the agent and each process.run
	// shell or fallback supervisor.
	HideExec = "hide-exec"
)
