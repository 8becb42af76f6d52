package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
)

// TestPreviousTokenOnlyForAnUnknownToken: the agent presents its previous
// token only after the server said it does not know the newest one; a
// refused device, a busy device or a server in trouble gets no second try.
func TestPreviousTokenOnlyForAnUnknownToken(t *testing.T) {
	for refusal, want := range map[error]string{
		ErrUnauthorized:  "new,old",
		ErrDeviceRefused: "new",
		ErrBusy:          "new",
		errors.New("link: the server refused (HTTP 503)"): "new",
	} {
		var tried []string
		cr := &credentials{token: "new", previous: "old"}
		_, used, err := cr.dial(context.Background(), func(_ context.Context, _, token string) (*websocket.Conn, error) {
			tried = append(tried, token)
			if token == "new" {
				return nil, fmt.Errorf("dial: %w", refusal)
			}
			return nil, nil
		}, "server")
		if strings.Join(tried, ",") != want {
			t.Errorf("after %v: presented %v, want %s", refusal, tried, want)
		}
		if want == "new,old" && (err != nil || used != "old") {
			t.Errorf("the previous token's link: %q %v", used, err)
		}
	}
	// Without a previous token there is nothing else to present.
	var tried int
	cr := &credentials{token: "new"}
	cr.dial(context.Background(), func(context.Context, string, string) (*websocket.Conn, error) {
		tried++
		return nil, ErrUnauthorized
	}, "server")
	if tried != 1 {
		t.Fatalf("dialled %d times without a previous token", tried)
	}
}
