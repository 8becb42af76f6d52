// Command gen writes tools.json, the relay's tool table, from the live tool
// registrations: `go generate ./internal/toolspec`.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/commandcore/commandcore/internal/tools"
)

func main() {
	defs, err := tools.Definitions(context.Background())
	if err == nil {
		var data []byte
		if data, err = json.MarshalIndent(defs, "", "  "); err == nil {
			err = os.WriteFile("tools.json", append(data, '\n'), 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
