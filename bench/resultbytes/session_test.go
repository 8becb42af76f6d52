package resultbytes

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The session's steps, in order. interactive reads one line, answers it
// and ends a second later (so that Desktop Commander, which loses the
// output of a process that exits while it waits, sees the answer too).
const interactive = `echo ready; read -r line; echo "got: $line"; sleep 1`

type step struct{ key, what string }

var steps = []step{
	{"start-wait", "start `echo hello`, waiting for its end"},
	{"start-interactive", "start an interactive job (stdin)"},
	{"output", "read its output (`ready`)"},
	{"input-wait", "send it a line, wait for the answer"},
	{"wait", "wait for its end"},
	{"forget", "forget it"},
	{"read", "read a 21-line source file whole"},
	{"edit", "replace one line of it"},
}

// sourceFile is the file the session reads and edits.
const sourceFile = `package main

import (
	"fmt"
	"os"
	"strings"
)

// greet returns the greeting for name.
func greet(name string) string {
	if name == "" {
		name = "world"
	}
	return "hello, " + name
}

func main() {
	name := strings.Join(os.Args[1:], " ")
	fmt.Println(greet(name))
	os.Exit(0)
}
`

// sizes are one server's results of one session, by step key; a missing
// step has no equivalent on that server.
type sizes map[string]size

// calls names each step's tool call on a server, for the mapping table.
type calls map[string]string

// healthNote says what host_health a start result carried: its size
// depends on the host's load, not on the session (the current build sends
// the one-line verdict only when the host is healthy).
func healthNote(key string, res *mcp.CallToolResult) string {
	m, _ := res.StructuredContent.(map[string]any)
	h, ok := m["host_health"].(map[string]any)
	if !ok {
		return key + ": no host_health"
	}
	raw, _ := json.Marshal(h)
	verdict, _ := h["verdict"].(string)
	if verdict == "" {
		verdict = "(no verdict: the full block)"
	}
	var codes []string
	reasons, _ := h["reasons"].([]any)
	for _, r := range reasons {
		if c, ok := r.(map[string]any)["code"].(string); ok {
			codes = append(codes, c)
		}
	}
	if len(codes) > 0 {
		verdict += " (" + strings.Join(codes, ", ") + ")"
	}
	return fmt.Sprintf("%s: host_health %s, %d bytes of structuredContent", key, verdict, len(raw))
}

// sessionCC is the session against commandcore; old is the build of
// beforeCommit, which has no stdin jobs, process.input or files tools.
func sessionCC(b *testing.B, s *server, old bool) (sizes, calls, []string) {
	out, how := sizes{}, calls{}
	var notes []string
	id := func(res *mcp.CallToolResult) string {
		m, _ := res.StructuredContent.(map[string]any)
		pid, _ := m["process_id"].(string)
		if pid == "" {
			b.Fatalf("no process_id in %v", res.StructuredContent)
		}
		return pid
	}
	do := func(key, tool string, args map[string]any) *mcp.CallToolResult {
		res, sz := s.call(b, tool, args)
		out[key] = sz
		how[key] = tool + " " + shortArgs(args)
		if tool == "process.start" {
			notes = append(notes, healthNote(key, res))
		}
		return res
	}
	first := id(do("start-wait", "process.start", map[string]any{"command": "echo hello", "wait_ms": 5000}))
	start := map[string]any{"command": interactive, "stdin": true}
	if old {
		delete(start, "stdin")
	}
	job := id(do("start-interactive", "process.start", start))
	do("output", "process.output", map[string]any{"process_id": job, "wait_ms": 2000})
	if !old {
		do("input-wait", "process.input", map[string]any{"process_id": job, "data": "world\n", "wait_ms": 2000})
	}
	do("wait", "process.wait", map[string]any{"process_ids": []string{job}, "timeout_ms": 10000})
	do("forget", "process.forget", map[string]any{"process_id": job})
	s.call(b, "process.forget", map[string]any{"process_id": first})
	if old {
		return out, how, notes
	}
	path := writeSource(b)
	do("read", "files.read", map[string]any{"path": path})
	do("edit", "files.edit", map[string]any{"path": path, "edits": []map[string]any{{"old_text": "\tos.Exit(0)\n", "new_text": "\tos.Exit(1)\n"}}})
	return out, how, notes
}

// sessionDC is the same session through Desktop Commander's nearest
// tools. It has no wait: read_process_output reports the end. It has no
// forget either: a finished session is dropped by itself.
func sessionDC(b *testing.B, s *server) (sizes, calls, []string) {
	out, how := sizes{}, calls{}
	do := func(key, tool string, args map[string]any) *mcp.CallToolResult {
		res, sz := s.call(b, tool, args)
		out[key] = sz
		how[key] = tool + " " + shortArgs(args)
		return res
	}
	do("start-wait", "start_process", map[string]any{"command": "echo hello", "timeout_ms": 5000})
	res := do("start-interactive", "start_process", map[string]any{"command": interactive, "timeout_ms": 2000})
	var pid int
	if len(res.Content) == 0 {
		b.Fatal(errNoPID)
	}
	if t, ok := res.Content[0].(*mcp.TextContent); !ok {
		b.Fatal(errNoPID)
	} else if _, err := fmt.Sscanf(t.Text, "Process started with PID %d", &pid); err != nil {
		b.Fatalf("%v: %q", errNoPID, t.Text)
	}
	do("output", "read_process_output", map[string]any{"pid": pid, "timeout_ms": 2000})
	do("input-wait", "interact_with_process", map[string]any{"pid": pid, "input": "world", "timeout_ms": 2000})
	do("wait", "read_process_output", map[string]any{"pid": pid, "timeout_ms": 5000})
	path := writeSource(b)
	do("read", "read_file", map[string]any{"path": path})
	do("edit", "edit_block", map[string]any{"file_path": path, "old_string": "\tos.Exit(0)\n", "new_string": "\tos.Exit(1)\n"})
	return out, how, nil
}

func writeSource(b *testing.B) string {
	path := filepath.Join(b.TempDir(), "main.go")
	if err := os.WriteFile(path, []byte(sourceFile), 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// shortArgs is the arguments for the mapping table, with the values that
// change per run (ids, paths, file text) elided.
func shortArgs(args map[string]any) string {
	var keys []string
	for k := range args {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		switch v := args[k].(type) {
		case bool, int:
			if k == "pid" {
				parts = append(parts, k)
			} else {
				parts = append(parts, fmt.Sprintf("%s: %v", k, v))
			}
		case string:
			if k == "command" || k == "input" || k == "data" {
				parts = append(parts, fmt.Sprintf("%s: %q", k, v))
			} else {
				parts = append(parts, k)
			}
		default:
			parts = append(parts, k)
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// median is the per-field median of a step's results over the sessions
// (the upper middle one for an even count).
func median(ss []size) size {
	pick := func(f func(size) int) int {
		v := make([]int, len(ss))
		for i, s := range ss {
			v[i] = f(s)
		}
		sort.Ints(v)
		return v[len(v)/2]
	}
	return size{
		Whole: pick(func(s size) int { return s.Whole }),
		Text:  pick(func(s size) int { return s.Text }),
		Other: pick(func(s size) int { return s.Other }),
	}
}

// BenchmarkResultBytes runs the session b.N times against each server it
// can have and logs per step the median bytes, whole and text, with the
// after/DC text ratio against the target of 2.
func BenchmarkResultBytes(b *testing.B) {
	type variant struct {
		name    string
		session func() (sizes, calls, []string)
		runs    map[string][]size
		how     calls
		notes   []string
		skipped string
	}
	after := &variant{name: "after"}
	s := open(b, "after", ccCommand(b, ccBin))
	after.session = func() (sizes, calls, []string) { return sessionCC(b, s, false) }
	before := &variant{name: "before (" + beforeCommit + ")"}
	if bin, err := beforeBin(); err != nil {
		before.skipped = err.Error()
	} else {
		s := open(b, "before", ccCommand(b, bin))
		before.session = func() (sizes, calls, []string) { return sessionCC(b, s, true) }
	}
	dc := &variant{name: "Desktop Commander " + dcVersion}
	if entry, err := dcEntry(); err != nil {
		dc.skipped = err.Error()
	} else {
		s := open(b, "dc", dcCommand(b, entry))
		dc.session = func() (sizes, calls, []string) { return sessionDC(b, s) }
	}
	variants := []*variant{before, after, dc}
	for _, v := range variants {
		v.runs = map[string][]size{}
		if v.skipped != "" {
			b.Logf("%s skipped: %s", v.name, v.skipped)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, v := range variants {
			if v.session == nil {
				continue
			}
			sz, how, notes := v.session()
			v.how = how
			v.notes = append(v.notes, notes...)
			for k, s := range sz {
				v.runs[k] = append(v.runs[k], s)
			}
		}
	}
	b.StopTimer()

	cell := func(v *variant, key string) (size, bool) {
		if len(v.runs[key]) == 0 {
			return size{}, false
		}
		return median(v.runs[key]), true
	}
	num := func(n int, ok bool) string {
		if !ok {
			return "n/a"
		}
		return fmt.Sprint(n)
	}
	var tab strings.Builder
	fmt.Fprintf(&tab, "\nmedian bytes per result over %d sessions (whole = content + structuredContent + isError as sent; text = text content)\n", b.N)
	fmt.Fprintf(&tab, "| step | before whole | before text | after whole | after text | DC whole | DC text | after/DC text | ≤ 2× |\n|---|---|---|---|---|---|---|---|---|\n")
	var afterText, dcText, over, compared int
	worst := 0.0
	for _, st := range steps {
		bs, bok := cell(before, st.key)
		as, aok := cell(after, st.key)
		ds, dok := cell(dc, st.key)
		ratio, met := "n/a", "n/a"
		if aok && dok && ds.Text > 0 {
			r := float64(as.Text) / float64(ds.Text)
			ratio = fmt.Sprintf("%.2f", r)
			met = "yes"
			if r > 2 {
				met = "no"
				over++
			}
			worst = max(worst, r)
			compared++
			afterText += as.Text
			dcText += ds.Text
		}
		fmt.Fprintf(&tab, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", st.what,
			num(bs.Whole, bok), num(bs.Text, bok), num(as.Whole, aok), num(as.Text, aok),
			num(ds.Whole, dok), num(ds.Text, dok), ratio, met)
	}
	fmt.Fprintf(&tab, "\nbytes outside content/structuredContent/isError per result (_meta, resultType), median per step:\n")
	for _, v := range variants {
		var o []string
		for _, st := range steps {
			if s, ok := cell(v, st.key); ok {
				o = append(o, fmt.Sprintf("%s %d", st.key, s.Other))
			}
		}
		fmt.Fprintf(&tab, "  %s: %s\n", v.name, strings.Join(o, ", "))
	}
	fmt.Fprintf(&tab, "\nhost_health in the start results:\n")
	for _, v := range variants {
		seen := map[string]int{}
		var order []string
		for _, n := range v.notes {
			if seen[n] == 0 {
				order = append(order, n)
			}
			seen[n]++
		}
		for _, n := range order {
			fmt.Fprintf(&tab, "  %s / %s (%d of %d sessions)\n", v.name, n, seen[n], b.N)
		}
	}
	fmt.Fprintf(&tab, "\ncalls:\n")
	for _, v := range variants {
		for _, st := range steps {
			if c, ok := v.how[st.key]; ok {
				fmt.Fprintf(&tab, "  %s / %s: %s\n", v.name, st.key, c)
			}
		}
	}
	// Not b.Log: a benchmark's log is cut to its first lines.
	fmt.Print(tab.String())
	if compared > 0 {
		b.ReportMetric(float64(afterText), "after-text-B")
		b.ReportMetric(float64(dcText), "dc-text-B")
		b.ReportMetric(worst, "max-after/dc-text")
		b.ReportMetric(float64(over), "steps-over-2x")
	}
}
