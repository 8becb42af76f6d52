package relay

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/limits"
)

// postFrom sends body to url from c and returns the status.
func postFrom(t *testing.T, c *http.Client, url, contentType, body string, header http.Header) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	for k, vs := range header {
		req.Header[k] = vs
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

const registration = `{"redirect_uris":["http://127.0.0.1:9/callback"],"client_name":"flood"}`

// One anonymous client registering from an address (a shared NAT, a
// proxy) spends the registrations' budget only: the panel's sign-in and
// device enrollment from that address are not refused for it.
func TestEachSurfaceHasItsOwnBudget(t *testing.T) {
	h := newOAuthHarness(t, nil)
	ps, err := h.srv.PanelServer(false)
	if err != nil {
		t.Fatal(err)
	}
	panel := httptest.NewUnstartedServer(nil)
	panel.Config = ps
	panel.Start()
	t.Cleanup(panel.Close)
	from := clientFrom("127.0.3.1")
	for i := range enrollBurst {
		if status := postFrom(t, from, h.hs.URL+"/register", "application/json", registration, nil); status != http.StatusCreated {
			t.Fatalf("registration %d: %d", i+1, status)
		}
	}
	if status := postFrom(t, from, h.hs.URL+"/register", "application/json", registration, nil); status != http.StatusTooManyRequests {
		t.Fatalf("registration %d: %d, want 429", enrollBurst+1, status)
	}
	code, err := h.st.CreateSignIn("olga", time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if status := postFrom(t, noRedirectsFrom("127.0.3.1"), panel.URL+"/panel/login", "application/x-www-form-urlencoded", "code="+code,
		http.Header{"Sec-Fetch-Site": {"same-origin"}}); status != http.StatusSeeOther {
		t.Errorf("a person's sign-in with a valid code after the registrations: %d", status)
	}
	if status, body := postEnrollFrom(t, from, h.hs.URL, "ccE-AAAAAAAAAAAAAAAAAAAA", "box"); status != http.StatusForbidden {
		t.Errorf("an enrollment after the registrations: %d %s", status, body)
	}
}

func noRedirectsFrom(source string) *http.Client {
	c := clientFrom(source)
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

func postEnrollFrom(t *testing.T, c *http.Client, base, code, name string) (int, string) {
	t.Helper()
	res, err := c.Post(base+"/v1/enroll", "application/json", strings.NewReader(fmt.Sprintf(`{"code":%q,"name":%q}`, code, name)))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// Many sources (an attacker with many IPv6 /64s, here named by a trusted
// proxy) each get a fresh bucket, but the surface's ceiling over all
// sources holds: past it the answer is 503, and enrollment is untouched.
func TestASurfaceHasACeilingOverAllSources(t *testing.T) {
	h := newOAuthHarness(t, nil)
	if err := h.srv.SetTrustedProxies([]string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	ceiling := budgets[surfaceRegister].allBurst
	refused := 0
	for i := range ceiling + 20 {
		hdr := http.Header{"X-Forwarded-For": {fmt.Sprintf("2001:db8:%x::1", i)}}
		switch status := postFrom(t, http.DefaultClient, h.hs.URL+"/register", "application/json", registration, hdr); status {
		case http.StatusCreated:
		case http.StatusServiceUnavailable:
			refused++
		default:
			t.Fatalf("registration from source %d: %d", i, status)
		}
	}
	if refused < 15 {
		t.Errorf("%d of %d registrations from as many /64s refused; the ceiling is %d", refused, ceiling+20, ceiling)
	}
	if status, body := postEnroll(t, h.hs.URL, "ccE-AAAAAAAAAAAAAAAAAAAA", "box"); status != http.StatusForbidden {
		t.Errorf("an enrollment past the registrations' ceiling: %d %s", status, body)
	}
}

// Behind a trusted proxy each client has its own budget; an untrusted peer's
// forwarding headers are ignored, so it cannot take another's address.
func TestTrustedProxiesNameTheClient(t *testing.T) {
	h := newHarness(t, nil)
	if err := h.srv.SetTrustedProxies([]string{"127.0.4.0/24"}); err != nil {
		t.Fatal(err)
	}
	proxy := clientFrom("127.0.4.9")
	for i := range enrollBurst {
		hdr := http.Header{"X-Forwarded-For": {"198.51.100.7, 127.0.4.1"}}
		if status := postFrom(t, proxy, h.hs.URL+"/v1/enroll", "application/json", `{"code":"ccE-AAAAAAAAAAAAAAAAAAAA","name":"box"}`, hdr); status != http.StatusForbidden {
			t.Fatalf("guess %d: %d", i+1, status)
		}
	}
	enroll := func(c *http.Client, hdr http.Header) int {
		return postFrom(t, c, h.hs.URL+"/v1/enroll", "application/json", `{"code":"ccE-AAAAAAAAAAAAAAAAAAAA","name":"box"}`, hdr)
	}
	if status := enroll(proxy, http.Header{"X-Forwarded-For": {"198.51.100.7"}}); status != http.StatusTooManyRequests {
		t.Errorf("the same client again: %d, want 429", status)
	}
	if status := enroll(proxy, http.Header{"Forwarded": {`for="[2001:db8::5]:443";proto=https`}}); status != http.StatusForbidden {
		t.Errorf("another client behind the proxy: %d", status)
	}
	// Not a trusted proxy: its header names nobody, its own address counts.
	untrusted := clientFrom("127.0.5.1")
	for range enrollBurst {
		enroll(untrusted, http.Header{"X-Forwarded-For": {"203.0.113.1"}})
	}
	if status := enroll(untrusted, http.Header{"X-Forwarded-For": {"203.0.113.99"}}); status != http.StatusTooManyRequests {
		t.Errorf("an untrusted peer changing its header escaped its budget: %d", status)
	}
}

func TestClientSource(t *testing.T) {
	s := &Server{}
	if err := s.SetTrustedProxies([]string{"10.0.0.0/8", "2001:db8:ffff::1"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		peer   string
		header http.Header
		want   string
	}{
		{"192.0.2.1:1", http.Header{"X-Forwarded-For": {"198.51.100.1"}}, "192.0.2.1"},
		{"10.1.2.3:1", nil, "10.1.2.3"},
		{"10.1.2.3:1", http.Header{"X-Forwarded-For": {"198.51.100.1, 10.9.9.9"}}, "198.51.100.1"},
		{"10.1.2.3:1", http.Header{"X-Forwarded-For": {"203.0.113.5", "198.51.100.1"}}, "198.51.100.1"},
		{"10.1.2.3:1", http.Header{"X-Forwarded-For": {"unknown, _hidden"}}, "10.1.2.3"},
		{"10.1.2.3:1", http.Header{"X-Forwarded-For": {"10.4.4.4"}}, "10.1.2.3"},
		{"10.1.2.3:1", http.Header{"Forwarded": {`for=198.51.100.2;proto=https, for="[2001:db8:1:2::9]:80"`}}, "2001:db8:1:2::/64"},
		{"10.1.2.3:1", http.Header{"Forwarded": {`for=unknown`}}, "10.1.2.3"},
		{"[2001:db8:ffff::1]:1", http.Header{"X-Forwarded-For": {"[::ffff:198.51.100.3]:9"}}, "198.51.100.3"},
		{"[2001:db8:ffff::2]:1", http.Header{"X-Forwarded-For": {"198.51.100.3"}}, "2001:db8:ffff::/64"},
	} {
		r := &http.Request{RemoteAddr: tc.peer, Header: tc.header}
		if got := s.clientSource(r); got != tc.want {
			t.Errorf("%s %v: %q, want %q", tc.peer, tc.header, got, tc.want)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com", "10.0.0"} {
		if err := s.SetTrustedProxies([]string{bad}); err != ErrTrustedProxy {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// dirBytes is the size of the files in dir.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
	}
	return n
}

// An authorization flood through the relay, as the review probed it
// (4,000 requests from one address with one registered client; the state
// grew from 392 KB to 22.6 MB): the rate limit answers most, at most
// OAuthPendingPerSource wait for a person, the state grows by little, and
// a person's authorization from another address is served during it.
func TestAnAuthorizationFloodThroughTheRelay(t *testing.T) {
	h := newOAuthHarness(t, nil)
	resp, err := http.Post(h.hs.URL+"/register", "application/json", strings.NewReader(registration))
	if err != nil {
		t.Fatal(err)
	}
	var reg struct {
		ClientID string `json:"client_id"`
	}
	json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()
	before := dirBytes(t, h.stateDir)
	q := url.Values{"client_id": {reg.ClientID}, "redirect_uri": {callbackURL}, "response_type": {"code"}, "state": {strings.Repeat("s", 1000)},
		"code_challenge": {"E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"}, "code_challenge_method": {"S256"}, "resource": {h.hs.URL + "/mcp/dev"}}
	attacker := noRedirectsFrom("127.0.6.1")
	counts := map[string]int{}
	for range 4000 {
		res, err := attacker.Get(h.hs.URL + "/authorize?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		loc := res.Header.Get("Location")
		switch {
		case res.StatusCode == http.StatusTooManyRequests:
			counts["429"]++
		case strings.Contains(loc, "/panel/consent/"):
			counts["consent"]++
		case strings.Contains(loc, "error=temporarily_unavailable"):
			counts["temporarily_unavailable"]++
		default:
			t.Fatalf("a flood request: %d %q", res.StatusCode, loc)
		}
	}
	grew := dirBytes(t, h.stateDir) - before
	t.Logf("4,000 authorization requests from one address: %v; the state grew by %d bytes", counts, grew)
	if counts["consent"] > limits.OAuthPendingPerSource || grew > 1<<20 {
		t.Errorf("the flood kept %d requests and grew the state by %d bytes", counts["consent"], grew)
	}
	// A person, from another address, during the flood.
	if access, _, _ := h.oauthConnect(t, h.hs.URL+"/mcp/dev"); access == "" {
		t.Fatal("a person's authorization during the flood")
	}
}
