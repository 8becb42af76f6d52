package transport

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestRemoteClose(t *testing.T) {
	t.Run("close frame", func(t *testing.T) {
		cws, peer := pipeWS(t)
		c := Agent(cws, secret, Options{})
		drain(peer)
		if err := peer.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseGoingAway, ""), time.Now().Add(patience)); err != nil {
			t.Fatal(err)
		}
		waitEnd(t, c, EndRemoteClose)
	})
	t.Run("eof", func(t *testing.T) {
		cws, peer := tcpWS(t, nil)
		c := Server(cws, secret, noBeat)
		_ = peer.Close()
		waitEnd(t, c, EndRemoteClose)
	})
}

func TestLocalClose(t *testing.T) {
	cws, peer := pipeWS(t)
	got := drain(peer)
	c := Agent(cws, secret, Options{})
	tr, err := c.Connect(context.Background())
	if err != nil || tr != mcp.Connection(c) {
		t.Fatalf("Connect: %v", err)
	}
	if _, err := c.Connect(context.Background()); err == nil {
		t.Fatal("second Connect succeeded")
	}
	if c.SessionID() != "" {
		t.Fatal("SessionID not empty")
	}
	reading := make(chan error, 1)
	go func() {
		_, err := c.Read(context.Background())
		reading <- err
	}()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	waitEnd(t, c, EndLocalShutdown)
	select {
	case err := <-reading:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("Read: %v", err)
		}
	case <-time.After(patience):
		t.Fatal("Close did not unblock Read")
	}
	if code := got.closeCode(t); code != websocket.CloseNormalClosure {
		t.Fatalf("close code %d", code)
	}
	if err := c.Write(context.Background(), notif(t, "x/y")); !errors.Is(err, ErrEnded) {
		t.Fatalf("Write after Close: %v", err)
	}
	// Close again, concurrently: no panic, the first end stays.
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.Close() }()
	}
	wg.Wait()
	if c.End() != EndLocalShutdown {
		t.Fatalf("End changed to %s", c.End())
	}
}

// TestFirstEndWins: after a silence end, a local Close does not rewrite it.
func TestFirstEndWins(t *testing.T) {
	cws, _ := pipeWS(t)
	c := Agent(cws, secret, Options{SilenceTimeout: 10 * time.Millisecond, SendTimeout: 50 * time.Millisecond})
	waitEnd(t, c, EndSilence)
	_ = c.Close()
	if c.End() != EndSilence {
		t.Fatalf("End = %s", c.End())
	}
}
