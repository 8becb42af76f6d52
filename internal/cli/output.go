package cli

import (
	"encoding/json"
	"io"
)

// The CLI's one JSON rule, for every --json flag:
//
//   - A command that reports one thing (status, jobs show, jobs stop,
//     jobs output, jobs reconcile) prints one JSON object, indented.
//   - A command that reports many things, a list or a stream (jobs list,
//     activity, relay token list, relay devices, relay audit), prints one
//     compact JSON object per line and nothing for none, so a follow never
//     has to close an array and line tools (grep, head, jq) take it as is.
//
// Fields only grow. writeJSON and writeJSONLines are the only places the
// CLI encodes JSON for people and scripts.

// writeJSON prints v as one indented JSON document.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeJSONLines prints each of vs as one line of JSON.
func writeJSONLines[T any](w io.Writer, vs ...T) error {
	enc := json.NewEncoder(w)
	for _, v := range vs {
		if err := enc.Encode(v); err != nil {
			return err
		}
	}
	return nil
}
