package authz

import (
	"slices"
	"testing"
)

// TestPresetsGrantWhatTheyName: reading changes nothing, running adds
// the job tools, writing the file tools, and everything is the wildcard.
func TestPresetsGrantWhatTheyName(t *testing.T) {
	read, ok := PresetTools([]string{"read"})
	if !ok || !slices.Contains(read, "process.output") || slices.Contains(read, "process.start") || slices.Contains(read, "files.write") {
		t.Fatalf("read: %v %v", read, ok)
	}
	run, _ := PresetTools([]string{"run"})
	if !slices.Contains(run, "process.start") || !slices.Contains(run, "process.jobs") || slices.Contains(run, "files.write") {
		t.Fatalf("run: %v", run)
	}
	both, _ := PresetTools([]string{"write", "run"})
	if !slices.Contains(both, "files.edit") || !slices.Contains(both, "process.stop") || len(both) != len(readTools)+8 {
		t.Fatalf("write+run: %d tools %v", len(both), both)
	}
	if all, _ := PresetTools([]string{"read", "all"}); !slices.Equal(all, []string{"*"}) {
		t.Fatalf("all: %v", all)
	}
	if _, ok := PresetTools([]string{"read", "root"}); ok {
		t.Fatal("an unknown preset was accepted")
	}
	for _, p := range Presets {
		for _, tool := range p.Tools {
			if !ValidScope(tool) {
				t.Errorf("%s: %q is not a scope entry", p.Name, tool)
			}
		}
	}
}

func TestPresetScopeKeepsOnlyPresets(t *testing.T) {
	if got := ParsePresetScope("  run openid run\tall admin "); !slices.Equal(got, []string{"run", "all"}) {
		t.Fatalf("got %v", got)
	}
	if got := ParsePresetScope(""); got != nil {
		t.Fatalf("empty scope: %v", got)
	}
	if got := PresetNames(); !slices.Equal(got, []string{"read", "run", "write", "all"}) {
		t.Fatalf("names: %v", got)
	}
}
