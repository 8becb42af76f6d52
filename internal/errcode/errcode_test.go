package errcode

import (
	"encoding/json"
	"testing"
)

// TestDeviceBusyOnTheWire: the refusal of a second device link carries the
// word SPEC §4 names.
func TestDeviceBusyOnTheWire(t *testing.T) {
	raw, err := json.Marshal(New(DeviceBusy, "busy"))
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != `{"code":"device_busy","message":"busy"}` {
		t.Fatalf("wire form %s", raw)
	}
}
