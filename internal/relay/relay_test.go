package relay

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/errcode"
)

func TestSplitDevice(t *testing.T) {
	name, rest, err := splitDevice(json.RawMessage(`{"device":"dev1","process_id":"x"}`))
	if err != nil || name != "dev1" || string(rest) != `{"process_id":"x"}` {
		t.Fatalf("split: %q %s %v", name, rest, err)
	}
	for _, bad := range []string{``, `null`, `[]`, `{}`, `{"device":""}`, `{"device":7}`, `"dev1"`, `{"device":"a"`} {
		if _, _, err := splitDevice(json.RawMessage(bad)); errcode.From(err).Code != errcode.InvalidArgument {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

func TestWithDeviceKeepsTheToolsArguments(t *testing.T) {
	s := withDevice(map[string]any{"type": "object", "properties": map[string]any{"process_id": map[string]any{"type": "string"}}, "required": []any{"process_id"}})
	raw, _ := json.Marshal(s)
	var m struct {
		Properties map[string]any `json:"properties"`
		Required   []string       `json:"required"`
	}
	json.Unmarshal(raw, &m)
	if m.Properties["process_id"] == nil || m.Properties["device"] == nil || len(m.Required) != 2 || m.Required[1] != "device" {
		t.Fatalf("schema with device: %s", raw)
	}
}

func FuzzSplitDevice(f *testing.F) {
	f.Add([]byte(`{"device":"dev1","command":"true"}`))
	f.Add([]byte(`{"device":"d","device":"e"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		name, rest, err := splitDevice(data)
		if err != nil {
			return
		}
		var m map[string]json.RawMessage
		if name == "" || json.Unmarshal(rest, &m) != nil {
			t.Fatalf("accepted %q: name %q rest %s", data, name, rest)
		}
		if _, ok := m["device"]; ok {
			t.Fatal("the device argument reached the device")
		}
	})
}

func TestMarkIncompleteAdmitsLostOutput(t *testing.T) {
	raw := markIncomplete([]byte(`{"content":[{"type":"text","text":"exit 0"}],"structuredContent":{"exit_code":0,"output_capture":{"observed_bytes":10,"transport_complete":true}},"resultType":"complete"}`))
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		StructuredContent struct {
			OutputCapture map[string]any `json:"output_capture"`
		} `json:"structuredContent"`
		ResultType string `json:"resultType"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	if oc := res.StructuredContent.OutputCapture; oc["transport_complete"] != false || oc["observed_bytes"] != 10.0 {
		t.Fatalf("output_capture: %v", oc)
	}
	if len(res.Content) != 1 || !strings.Contains(res.Content[0].Text, `"transport_complete":false`) || res.ResultType != "complete" {
		t.Fatalf("result: %s", raw)
	}
	// A result without output_capture is left alone.
	other := `{"content":[],"structuredContent":{"jobs":[]}}`
	if got := markIncomplete([]byte(other)); string(got) != other {
		t.Fatalf("a result without output_capture was rewritten: %s", got)
	}
}
