package isolation

import (
	"encoding/json"
	"testing"
)

// TestBinary: each combination of what the agent found of its binary's
// directory gives the word the device's page shows.
func TestBinary(t *testing.T) {
	for _, c := range []struct {
		writable, shared, inUnits, inRun bool
		want                             string
	}{
		{false, false, false, false, "not_writable"},
		{false, true, true, true, "not_writable"},
		{true, true, false, false, "shared"},
		{true, true, true, true, "shared"},
		{true, false, true, true, "read_only"},
		{true, false, true, false, "read_only_in_units"},
		{true, false, false, true, "writable"},
		{true, false, false, false, "writable"},
	} {
		if got := Binary(c.writable, c.shared, c.inUnits, c.inRun); got != c.want {
			t.Errorf("Binary(writable %v, shared %v, units %v, run %v) = %q, want %q", c.writable, c.shared, c.inUnits, c.inRun, got, c.want)
		}
	}
}

// TestManager: the owner's cut and what the host can do of it.
func TestManager(t *testing.T) {
	for _, c := range []struct {
		cut, units, run bool
		want            string
	}{
		{false, false, false, "reachable"},
		{false, true, true, "reachable"},
		{true, true, true, "cut_off"},
		{true, true, false, "cut_partly"},
		{true, false, true, "cut_partly"},
		{true, false, false, "cut_refused"},
	} {
		if got := Manager(c.cut, c.units, c.run); got != c.want {
			t.Errorf("Manager(cut %v, units %v, run %v) = %q, want %q", c.cut, c.units, c.run, got, c.want)
		}
	}
}

// TestTheCapabilityCrossesTheWire: what the agent puts in its capabilities
// reads back the same after JSON, under the capability's name; anything
// else an agent might send reads as unknown.
func TestTheCapabilityCrossesTheWire(t *testing.T) {
	if Capability != "commandcore/job-isolation" {
		t.Fatalf("the capability is named %q; relays look for commandcore/job-isolation", Capability)
	}
	sent := Report{AgentBinary: BinaryReadOnlyInUnits, UserManager: ManagerCutPartly}
	raw, err := json.Marshal(map[string]any{Capability: sent.Capabilities()})
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != `{"commandcore/job-isolation":{"agent_binary":"read_only_in_units","user_manager":"cut_partly"}}` {
		t.Fatalf("sent %s", raw)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if r := FromCapabilities(got); r != sent {
		t.Fatalf("read %+v, want %+v", r, sent)
	}
	for _, in := range []string{
		`{}`,
		`{"commandcore/job-isolation":"read_only"}`,
		`{"commandcore/job-isolation":{"agent_binary":1,"user_manager":true}}`,
		`{"commandcore/job-isolation":{"agent_binary":"READ_ONLY","user_manager":"cut_off "}}`,
		`{"commandcore/job-isolation":{"agent_binary":"/home/u/.local/bin","user_manager":"<b>"}}`,
	} {
		var m map[string]any
		if err := json.Unmarshal([]byte(in), &m); err != nil {
			t.Fatal(err)
		}
		if r := FromCapabilities(m); r != (Report{}) {
			t.Errorf("%s read as %+v, want unknown", in, r)
		}
	}
	for _, w := range []string{"read_only", "read_only_in_units", "writable", "shared", "not_writable"} {
		if r := (Report{AgentBinary: w}).Known(); r.AgentBinary != w {
			t.Errorf("%q is not known", w)
		}
	}
	for _, w := range []string{"reachable", "cut_off", "cut_partly", "cut_refused"} {
		if r := (Report{UserManager: w}).Known(); r.UserManager != w {
			t.Errorf("%q is not known", w)
		}
	}
	if r := (Report{AgentBinary: "cut_off", UserManager: "read_only"}).Known(); r != (Report{}) {
		t.Errorf("words of the other set known: %+v", r)
	}
}
