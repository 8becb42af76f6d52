package launcher

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// TestBusThatNeverAnswers: a user bus socket that accepts connections but
// never completes the handshake makes Bus fail after its timeout instead
// of hanging every caller; the fallback domain is chosen, and an installed
// agent refuses.
func TestBusThatNeverAnswers(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "bus")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // accepted, never answered
		}
	}()
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path="+sock)
	l := &Launcher{ConnectTimeout: 200 * time.Millisecond}
	done := make(chan error, 1)
	go func() {
		_, err := l.Bus(context.Background())
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, errBusTimeout) {
			t.Fatalf("Bus: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Bus hung on a bus that never answers")
	}
	if d, err := l.Domain(context.Background()); err != nil || d != "shared_parent_cgroup" {
		t.Fatalf("domain without a usable bus: %q %v", d, err)
	}
	l.Installed = true
	if _, err := l.Domain(context.Background()); err == nil {
		t.Fatal("an installed agent accepted a bus that never answers")
	}
}
