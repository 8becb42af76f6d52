package relay

import (
	"encoding/json"

	"github.com/commandcore/commandcore/internal/errcode"
)

// A process.wait with until.path tells whether a path exists, which is
// files.list's to tell: the relay forwards it only for a token that may
// call files.list. (The device cannot know: a call's grant names its one
// tool. It refuses the paths files.list refuses, and follows the owner's
// ceiling for files.list.)
const (
	waitTool      = "process.wait"
	filesListTool = "files.list"
)

var errUntilPath = errcode.New(errcode.PermissionDenied, "until.path needs a client token that may call %s", filesListTool)

// waitsOnPath reports whether a call is process.wait with until.path.
// Arguments that do not decode get the device's refusal.
func waitsOnPath(tool string, args json.RawMessage) bool {
	if tool != waitTool || len(args) == 0 {
		return false
	}
	var a struct {
		Until json.RawMessage `json:"until"`
	}
	if json.Unmarshal(args, &a) != nil || len(a.Until) == 0 {
		return false
	}
	var u struct {
		Path json.RawMessage `json:"path"`
	}
	if json.Unmarshal(a.Until, &u) != nil {
		return false
	}
	p := string(u.Path)
	return p != "" && p != "null" && p != `""`
}
