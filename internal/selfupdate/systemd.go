package selfupdate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// WatchdogUnitPrefix starts the name of each update's watchdog unit; no
// job unit's name starts so.
const WatchdogUnitPrefix = "commandcore-update-"

// connect opens a connection to the user manager; the caller closes it.
func connect(ctx context.Context) (*sdbus.Conn, error) {
	if os.Getenv("DBUS_SESSION_BUS_ADDRESS") == "" && os.Getenv("XDG_RUNTIME_DIR") == "" {
		return nil, errors.New("no systemd user manager: neither DBUS_SESSION_BUS_ADDRESS nor XDG_RUNTIME_DIR is set")
	}
	conn, err := sdbus.NewUserConnectionContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to the systemd user manager: %w", err)
	}
	return conn, nil
}

// startWatchdog starts argv as a transient unit of the user manager, apart
// from the agent's own unit so that restarting that unit leaves it
// running. It passes on how to reach the user manager.
func startWatchdog(ctx context.Context, argv []string) (string, error) {
	conn, err := connect(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	unit := WatchdogUnitPrefix + strconv.FormatInt(time.Now().UnixNano(), 36) + ".service"
	var env []string
	for _, k := range []string{"DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	props := []sdbus.Property{
		sdbus.PropDescription("CommandCore update watchdog"),
		sdbus.PropExecStart(argv, false),
		sdbus.PropType("exec"),
		{Name: "Environment", Value: dbus.MakeVariant(env)},
		// Gone once it ended, failed or not: each update starts its own.
		{Name: "CollectMode", Value: dbus.MakeVariant("inactive-or-failed")},
	}
	done := make(chan string, 1)
	if _, err := conn.StartTransientUnitContext(ctx, unit, "fail", props, done); err != nil {
		return "", fmt.Errorf("start the update watchdog: %w", err)
	}
	select {
	case res := <-done:
		if res != "done" {
			return "", fmt.Errorf("start the update watchdog: %s", res)
		}
	case <-ctx.Done():
		return "", fmt.Errorf("start the update watchdog: %w", ctx.Err())
	}
	return unit, nil
}

// restart restarts service through the user manager, clearing a failed
// state (a unit at its start limit starts only once reset). With wait it
// returns once the start job ended; the result is not judged: the link
// note is what tells a good agent.
func restart(ctx context.Context, service string, wait bool) error {
	conn, err := connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.ResetFailedUnitContext(ctx, service)
	var done chan string
	if wait {
		done = make(chan string, 1)
	}
	if _, err := conn.RestartUnitContext(ctx, service, "replace", done); err != nil {
		return fmt.Errorf("restart %s: %w", service, err)
	}
	if wait {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	return nil
}
