package relay

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/enrollment"
)

// postEnroll posts an enrollment request and returns the status and body.
func postEnroll(tb testing.TB, base, code, name string) (int, string) {
	tb.Helper()
	body, _ := json.Marshal(enrollment.Request{Code: code, Name: name})
	res, err := http.Post(base+"/v1/enroll", "application/json", bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(data)
}

// TestEnrollRefusalsAreIdentical: a valid code with a bad proposed name is
// answered byte for byte as a wrong code is, and is not used up.
func TestEnrollRefusalsAreIdentical(t *testing.T) {
	h := newHarness(t, nil)
	code, err := h.st.CreateEnrollCode("", time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	wrongStatus, wrongBody := postEnroll(t, h.hs.URL, "ccE-AAAAAAAAAAAAAAAAAAAA", "box")
	if wrongStatus != http.StatusForbidden {
		t.Fatalf("wrong code: %d %s", wrongStatus, wrongBody)
	}
	for _, bad := range []string{"", "a b", "0f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a", "0F8E7D6C-5B4A-4392-8170-6F5E4D3C2B1A", h.dev.ID} {
		if status, body := postEnroll(t, h.hs.URL, code, bad); status != wrongStatus || body != wrongBody {
			t.Errorf("valid code, name %q: %d %s; a wrong code gets %d %s", bad, status, body, wrongStatus, wrongBody)
		}
	}
	status, body := postEnroll(t, h.hs.URL, code, "box")
	if status != http.StatusOK {
		t.Fatalf("the refusals used the code up: %d %s", status, body)
	}
	if resp, err := enrollment.DecodeResponse([]byte(body)); err != nil || resp.Name != "box" {
		t.Fatalf("enrolled: %+v %v", resp, err)
	}
}
