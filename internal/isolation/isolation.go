// Package isolation is what an agent tells its relay, at each link, of how
// its jobs are kept from the agent itself: whether they can replace the
// agent's binary, and whether they are cut off from the user manager as
// the device's owner asks. The relay shows it on the device's page. It is
// words from two small sets, never a path: it leaves the machine.
package isolation

// Capability is the experimental MCP capability under which the agent
// sends its Report at initialize.
const Capability = "commandcore/job-isolation"

// How jobs meet the directory of the agent's binary.
const (
	// BinaryReadOnly: job units and process.run commands see it
	// read-only.
	BinaryReadOnly = "read_only"
	// BinaryReadOnlyInUnits: job units see it read-only, process.run
	// commands (the host refuses them a mount namespace) do not.
	BinaryReadOnlyInUnits = "read_only_in_units"
	// BinaryWritable: the user can write it and the host could not make
	// it read-only to jobs: any job can replace the agent.
	BinaryWritable = "writable"
	// BinaryShared: a directory jobs need to write (the home directory,
	// /tmp, a system directory of commands), left writable.
	BinaryShared = "shared"
	// BinaryNotWritable: the agent's user cannot write it; nothing needed.
	BinaryNotWritable = "not_writable"
)

// Whether jobs reach the user manager.
const (
	// ManagerReachable: the owner lets jobs reach the user manager (start
	// units of their own).
	ManagerReachable = "reachable"
	// ManagerCutOff: the owner cuts jobs off and the host can, for job
	// units and process.run commands alike.
	ManagerCutOff = "cut_off"
	// ManagerCutPartly: the owner cuts jobs off; the host can for job
	// units or for process.run commands, not both, and the others are
	// refused.
	ManagerCutPartly = "cut_partly"
	// ManagerCutRefused: the owner cuts jobs off and the host cannot:
	// every job and command is refused.
	ManagerCutRefused = "cut_refused"
)

// Report is the capability's value.
type Report struct {
	AgentBinary string `json:"agent_binary"`
	UserManager string `json:"user_manager"`
}

// Binary is the agent's word for its binary's directory: whether the user
// can write it, whether it is one jobs need to write, and whether job
// units and process.run commands see it read-only.
func Binary(writable, shared, inUnits, inRun bool) string {
	switch {
	case !writable:
		return BinaryNotWritable
	case shared:
		return BinaryShared
	case inUnits && inRun:
		return BinaryReadOnly
	case inUnits:
		return BinaryReadOnlyInUnits
	default:
		return BinaryWritable
	}
}

// Manager is the agent's word for its jobs and the user manager: whether
// the owner cuts them off, and whether the host can for job units and for
// process.run commands.
func Manager(cut, canUnits, canRun bool) string {
	switch {
	case !cut:
		return ManagerReachable
	case canUnits && canRun:
		return ManagerCutOff
	case canUnits || canRun:
		return ManagerCutPartly
	default:
		return ManagerCutRefused
	}
}

// Capabilities is the Report as the experimental capability's value.
func (r Report) Capabilities() map[string]any {
	return map[string]any{"agent_binary": r.AgentBinary, "user_manager": r.UserManager}
}

// FromCapabilities reads the Report an agent sent under Capability,
// Known: it comes from the device.
func FromCapabilities(experimental map[string]any) Report {
	v, _ := experimental[Capability].(map[string]any)
	binary, _ := v["agent_binary"].(string)
	manager, _ := v["user_manager"].(string)
	return Report{AgentBinary: binary, UserManager: manager}.Known()
}

// Known is r with each word outside its set, which no agent sends, empty
// (unknown).
func (r Report) Known() Report {
	return Report{AgentBinary: oneOf(r.AgentBinary, BinaryReadOnly, BinaryReadOnlyInUnits, BinaryWritable, BinaryShared, BinaryNotWritable),
		UserManager: oneOf(r.UserManager, ManagerReachable, ManagerCutOff, ManagerCutPartly, ManagerCutRefused)}
}

func oneOf(s string, set ...string) string {
	for _, w := range set {
		if s == w {
			return s
		}
	}
	return ""
}
