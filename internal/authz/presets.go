package authz

import (
	"slices"
	"strings"
)

// A Preset is a named set of tools a person grants at once: on the
// panel's consent page, and as an OAuth scope a client may ask for.
type Preset struct {
	Name  string
	Title string
	Tools []string
}

// readTools see and read jobs, their output, files and the host's
// metrics, and change nothing.
var readTools = []string{"process.jobs", "process.list", "process.status", "process.output", "process.wait",
	"process.screen", "files.list", "files.read", "files.search", "system.metrics"}

// Presets are the powers consent offers, each a superset of what it
// names: running commands and writing files both come with reading.
var Presets = []Preset{
	{Name: "read", Title: "See and read jobs, output, files and metrics", Tools: readTools},
	{Name: "run", Title: "Run commands", Tools: append(slices.Clone(readTools),
		"process.start", "process.run", "process.input", "process.resize", "process.stop", "process.forget")},
	{Name: "write", Title: "Write files", Tools: append(slices.Clone(readTools), "files.write", "files.edit")},
	{Name: "all", Title: "Everything", Tools: []string{ScopeAll}},
}

// PresetTools returns the union of the named presets' tools, in the
// order of Presets and then of each preset, or false when a name is not
// a preset's.
func PresetTools(names []string) ([]string, bool) {
	var out []string
	for _, n := range names {
		i := slices.IndexFunc(Presets, func(p Preset) bool { return p.Name == n })
		if i < 0 {
			return nil, false
		}
		for _, t := range Presets[i].Tools {
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	if slices.Contains(out, ScopeAll) {
		return []string{ScopeAll}, true
	}
	return out, true
}

// PresetNames returns the presets' names, as OAuth's scopes_supported
// lists them.
func PresetNames() []string {
	out := make([]string, len(Presets))
	for i, p := range Presets {
		out[i] = p.Name
	}
	return out
}

// ParsePresetScope reads an OAuth scope string (names separated by
// spaces) as presets, keeping the ones it knows: a client's request only
// preselects what the person then chooses.
func ParsePresetScope(scope string) []string {
	var out []string
	for _, n := range strings.Fields(scope) {
		if _, ok := PresetTools([]string{n}); ok && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}
