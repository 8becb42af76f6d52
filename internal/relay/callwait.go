package relay

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/humantime"
	"github.com/commandcore/commandcore/internal/jsonspan"
	"github.com/commandcore/commandcore/internal/limits"
)

// Chat clients end a tool call after a while (claude.ai after 300 s), and
// an answer that comes later is lost to the model. So no call through the
// relay blocks longer than its call wait (limits.RelayCallWait unless
// relay serve --max-call-wait says otherwise): a wait asked for longer
// is cut to it and returns what is true then, saying to call again; a
// process.run that would run longer is refused before it starts.

const runTool = "process.run"

// waitArgs are the arguments that make a tool block, each with the
// default the device applies when it is absent.
var waitArgs = map[string]struct {
	name string
	def  time.Duration
}{
	waitTool:         {"timeout_ms", limits.WaitTimeoutDefault},
	runTool:          {"timeout_ms", limits.RunTimeoutDefault},
	"process.start":  {"wait_ms", 0},
	"process.output": {"wait_ms", 0},
	"process.input":  {"wait_ms", 0},
}

// callWait is how long one call through the relay may block.
func (s *Server) callWait() time.Duration {
	if s.MaxCallWait > 0 {
		return s.MaxCallWait
	}
	return limits.RelayCallWait
}

// boundWait returns a call's arguments with its wait cut to the call
// wait, and whether it was cut. A process.run longer than the call wait
// is refused. Arguments the relay cannot take apart (not an object, an
// escaped or repeated key) are refused for a tool that may block.
func (s *Server) boundWait(tool string, args json.RawMessage) (json.RawMessage, bool, error) {
	w, ok := waitArgs[tool]
	if !ok {
		return args, false, nil
	}
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	ms, err := jsonspan.Object(args)
	if err != nil {
		return nil, false, errcode.New(errcode.InvalidArgument, "arguments must be a JSON object, each key once and unescaped")
	}
	bound := s.callWait().Milliseconds()
	asked := w.def.Milliseconds()
	// null is absent to the device: its default applies.
	if raw := jsonspan.Find(ms, w.name); raw != nil && string(raw) != "null" {
		if asked, err = strconv.ParseInt(string(raw), 10, 64); err != nil || asked < 0 {
			// Not a count of milliseconds: the device says what it wants.
			return args, false, nil
		}
	}
	if asked <= bound {
		return args, false, nil
	}
	if tool == runTool {
		return nil, false, errcode.New(errcode.InvalidArgument,
			"through this relay a call lasts at most %s (its clients give up on longer ones), so process.run's timeout_ms is at most %d here: for a longer command use process.start, then process.wait or process.output",
			humantime.Duration(s.callWait()), bound)
	}
	out := make([]byte, 0, len(args)+24)
	out = append(out, '{')
	set := false
	for _, m := range ms {
		v := m.Value
		if m.Key == w.name {
			v, set = []byte(strconv.FormatInt(bound, 10)), true
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, '"')
		out = append(out, m.Key...)
		out = append(out, `":`...)
		out = append(out, v...)
	}
	if !set {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, fmt.Sprintf("%q:%d", w.name, bound)...)
	}
	return append(out, '}'), true, nil
}

// callAgainNote is what a cut wait's result says when it ran out.
func (s *Server) callAgainNote() string {
	return fmt.Sprintf("This relay ends a wait after %s (its clients give up on longer calls): what is above is true now; call again to keep waiting.",
		humantime.Duration(s.callWait()))
}

// markCutWait adds callAgainNote to the result of a process.wait that was
// cut and ran out (met "timeout"), and call_again to its structured
// content. Other results are as they came: a cut wait_ms returns a page or
// a record, which is what is true then.
func (s *Server) markCutWait(tool string, raw []byte) []byte {
	if tool != waitTool {
		return raw
	}
	var res mcp.CallToolResult
	if json.Unmarshal(raw, &res) != nil || res.IsError {
		return raw
	}
	sc, ok := res.StructuredContent.(map[string]any)
	if !ok || sc["met"] != "timeout" {
		return raw
	}
	sc["call_again"] = true
	res.Content = append(res.Content, &mcp.TextContent{Text: s.callAgainNote()})
	out, err := json.Marshal(&res)
	if err != nil {
		return raw
	}
	return out
}

// withCallWait is tools with the call wait said in the descriptions of
// the tools it cuts short; the others are shared as they are.
func (s *Server) withCallWait(tools []*mcp.Tool) []*mcp.Tool {
	bound := humantime.Duration(s.callWait())
	out := make([]*mcp.Tool, len(tools))
	for i, t := range tools {
		out[i] = t
		var note string
		switch t.Name {
		case waitTool:
			note = fmt.Sprintf(" Through this relay a wait lasts at most %s (timeout_ms above %d is cut to it): it then returns what is true, with call_again, and you call again to keep waiting.",
				bound, s.callWait().Milliseconds())
		case runTool:
			note = fmt.Sprintf(" Through this relay a call lasts at most %s, so timeout_ms is at most %d here: start a longer command with process.start.",
				bound, s.callWait().Milliseconds())
		default:
			continue
		}
		c := *t
		c.Description += note
		out[i] = &c
	}
	return out
}
