package launcher

import (
	"context"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
)

// watchInterval is how often an unclaimed launch asks systemd whether the
// unit already ended; identity claims normally arrive within milliseconds.
const watchInterval = 100 * time.Millisecond

// watchUnit closes failed when the unit stops being active before ctx ends.
func watchUnit(ctx context.Context, conn *sdbus.Conn, unit string, failed chan<- struct{}) {
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p, err := conn.GetUnitPropertyContext(ctx, unit, "ActiveState")
		if err != nil {
			continue
		}
		if s, _ := p.Value.Value().(string); s == "failed" || s == "inactive" {
			close(failed)
			return
		}
	}
}
