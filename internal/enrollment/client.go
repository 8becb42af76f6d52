package enrollment

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// client follows no redirect: the identity it obtains is bound to the
// server asked, and a redirect would hand the code to another server.
var client = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// Enroll posts req to server and decodes the identity it answers with.
func Enroll(ctx context.Context, server string, req Request) (*Response, error) {
	body, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(server, "/")+EnrollPath, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("enroll: %w", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	res, err := client.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("enroll: %w", err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, MaxResponseBytes))
	if err != nil {
		return nil, fmt.Errorf("enroll: read response: %w", err)
	}
	if res.StatusCode >= 300 && res.StatusCode < 400 {
		return nil, fmt.Errorf("enroll: the server answered with a redirect (%s), and enrollment follows none; give --server the relay's own URL", res.Status)
	}
	if res.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(data, &e) == nil && e.Error.Message != "" {
			return nil, fmt.Errorf("enroll: the server refused: %s", e.Error.Message)
		}
		return nil, fmt.Errorf("enroll: the server answered %s", res.Status)
	}
	out, err := DecodeResponse(data)
	if err != nil {
		return nil, fmt.Errorf("enroll: %w", err)
	}
	return out, nil
}

// Leave tells the server at each of id's URLs in turn, until one answers,
// that this device leaves for good (LeavePath), with the device's own
// token. It returns the URL that answered, or why none did.
func Leave(ctx context.Context, id *Credential) (string, error) {
	var last error
	for _, server := range id.ServerList() {
		if last = leave(ctx, server, id.Token); last == nil {
			return server, nil
		}
	}
	return "", last
}

func leave(ctx context.Context, server, token string) error {
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(server, "/")+LeavePath, nil)
	if err != nil {
		return fmt.Errorf("leave: %w", err)
	}
	hr.Header.Set("Authorization", "Bearer "+token)
	res, err := client.Do(hr)
	if err != nil {
		return fmt.Errorf("leave: %w", err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(res.Body, MaxResponseBytes))
	if res.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(data, &e) == nil && e.Error.Message != "" {
			return fmt.Errorf("leave: the server refused: %s", e.Error.Message)
		}
		return fmt.Errorf("leave: the server answered %s", res.Status)
	}
	return nil
}
