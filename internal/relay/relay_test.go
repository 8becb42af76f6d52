package relay

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

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
	res := &mcp.CallToolResult{StructuredContent: map[string]any{
		"exit_code":      0,
		"output_capture": map[string]any{"observed_bytes": 10, "transport_complete": true},
	}}
	markIncomplete(res)
	oc := res.StructuredContent.(map[string]any)["output_capture"].(map[string]any)
	if oc["transport_complete"] != false || oc["observed_bytes"] != 10 {
		t.Fatalf("output_capture: %v", oc)
	}
	if len(res.Content) != 1 || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, `"transport_complete":false`) {
		t.Fatalf("text content: %v", res.Content)
	}
	// A result without output_capture is left alone.
	other := &mcp.CallToolResult{StructuredContent: map[string]any{"jobs": []any{}}}
	markIncomplete(other)
	if other.Content != nil {
		t.Fatal("a result without output_capture was rewritten")
	}
}

func TestDecodeEnrollMessages(t *testing.T) {
	if r, err := DecodeEnrollRequest([]byte(`{"code":"ccE-X","name":"box"}`)); err != nil || r.Code != "ccE-X" || r.Name != "box" {
		t.Fatalf("request: %+v %v", r, err)
	}
	for _, bad := range []string{``, `{}{}`, `{"code":"c","extra":1}`, `[]`, `{"code":7}`} {
		if _, err := DecodeEnrollRequest([]byte(bad)); errcode.From(err).Code != errcode.InvalidArgument {
			t.Errorf("request %q: %v", bad, err)
		}
	}
	key := "Lyn4RYnDXkmOrIiW3m6IFLu2spJELzkHz2lY4lRpDlo=" // 32 bytes
	good := `{"device_id":"d","name":"n","token":"t","secret":"MDEyMzQ1Njc4OWFiY2RlZg==","grant_key":"` + key + `"}`
	if r, err := DecodeEnrollResponse([]byte(good)); err != nil || r.Token != "t" || len(r.Secret) != 16 {
		t.Fatalf("response: %+v %v", r, err)
	}
	for _, bad := range []string{
		`{}`,
		strings.Replace(good, `"token":"t"`, `"token":""`, 1),
		strings.Replace(good, key, "AAAA", 1),
		strings.Replace(good, `"name":"n"`, `"name":"n","x":1`, 1),
		good + `{}`,
	} {
		if _, err := DecodeEnrollResponse([]byte(bad)); err == nil {
			t.Errorf("response %q accepted", bad)
		}
	}
}

func FuzzDecodeEnrollRequest(f *testing.F) {
	f.Add([]byte(`{"code":"ccE-X","name":"box"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeEnrollRequest(data)
		if err == nil && r == nil {
			t.Fatal("nil request without an error")
		}
	})
}

func FuzzDecodeEnrollResponse(f *testing.F) {
	f.Add([]byte(`{"device_id":"d","name":"n","token":"t","secret":"MDEyMzQ1Njc4OWFiY2RlZg==","grant_key":"Lyn4RYnDXkmOrIiW3m6IFLu2spJELzkHz2lY4lRpDlo="}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeEnrollResponse(data)
		if err != nil {
			return
		}
		if r.DeviceID == "" || r.Token == "" || len(r.Secret) < 16 {
			t.Fatalf("accepted an incomplete identity: %+v", r)
		}
	})
}
