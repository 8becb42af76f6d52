package metrics

import (
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/commandcore/commandcore/internal/relay/relaytest"
	"github.com/commandcore/commandcore/internal/transport"
)

type source struct{}

func (source) ConnectedDevices() int               { return 3 }
func (source) AuditDropped() uint64                { return 7 }
func (source) CrossReplicaCalls() (uint64, uint64) { return 11, 13 }
func (source) ReplicaLinks() map[string]int        { return map[string]int{"r0": 2, "r1": 5} }
func (source) PeerMessagesDropped() map[string]uint64 {
	return map[string]uint64{"forged": 17, "replayed": 19}
}

func scrape(t *testing.T, h http.Handler) relaytest.Metrics {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	m, err := relaytest.Scrape(srv.URL + Path)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func value(t *testing.T, m relaytest.Metrics, name string, labels ...string) float64 {
	t.Helper()
	v, ok := m.Value(name, labels...)
	if !ok {
		t.Fatalf("no series %s%v", name, labels)
	}
	return v
}

func TestMetrics(t *testing.T) {
	m := New(source{}, testLabels)
	h := m.Server("").Handler
	fams := scrape(t, h)
	if v := value(t, fams, "commandcore_relay_calls_total", "outcome", "ok", "tool", "files.search"); v != 0 {
		t.Fatalf("a fresh counter is %v", v)
	}
	m.Call("process.run", "ok", 2*time.Second)
	m.Call("process.run", "ok", time.Millisecond)
	m.Call("process.run", "failed", time.Millisecond)
	m.Call("rm -rf /", "ok", time.Millisecond)
	m.LinkEnd(transport.EndSilence)
	m.LinkEnd("made up")
	m.EnrollRefused("rate_limited")
	m.EnrollRefused("no such reason")

	fams = scrape(t, h)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"commandcore_relay_connected_devices", nil, 3},
		{"commandcore_relay_audit_dropped_total", nil, 7},
		{"commandcore_relay_cross_replica_calls_sent_total", nil, 11},
		{"commandcore_relay_cross_replica_calls_served_total", nil, 13},
		{"commandcore_relay_peer_messages_dropped_total", []string{"reason", "forged"}, 17},
		{"commandcore_relay_peer_messages_dropped_total", []string{"reason", "replayed"}, 19},
		{"commandcore_relay_replica_links", []string{"replica", "r0"}, 2},
		{"commandcore_relay_replica_links", []string{"replica", "r1"}, 5},
		{"commandcore_relay_calls_total", []string{"outcome", "ok", "tool", "process.run"}, 2},
		{"commandcore_relay_calls_total", []string{"outcome", "failed", "tool", "process.run"}, 1},
		{"commandcore_relay_calls_total", []string{"outcome", "ok", "tool", "unknown"}, 1},
		{"commandcore_relay_call_duration_seconds", []string{"tool", "process.run"}, 3},
		{"commandcore_relay_link_ends_total", []string{"kind", "silence_timeout"}, 1},
		{"commandcore_relay_link_ends_total", []string{"kind", "unknown"}, 1},
		{"commandcore_relay_link_ends_total", []string{"kind", "authentication_failure"}, 0},
		{"commandcore_relay_enroll_refusals_total", []string{"reason", "rate_limited"}, 1},
		{"commandcore_relay_enroll_refusals_total", []string{"reason", "unknown"}, 1},
	} {
		if v := value(t, fams, c.name, c.labels...); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	if got := fams["commandcore_relay_call_duration_seconds"].Metric; len(got) != len(testLabels.Tools) {
		t.Errorf("%d duration series, want one per tool of the labels", len(got))
	}
	// Nothing but the relay's own series: the client library's default
	// collectors (Go runtime, process) are not registered.
	for name := range fams {
		if name[:len("commandcore_relay_")] != "commandcore_relay_" {
			t.Errorf("foreign series %s", name)
		}
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	if resp, err := http.Post(srv.URL+Path, "text/plain", nil); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST %s: %v %v", Path, resp.Status, err)
	}
}

// TestScrapeNeedsTheToken: with a token, a scrape is served only with
// "Bearer TOKEN" (the scheme in any case); without one, any scrape is.
func TestScrapeNeedsTheToken(t *testing.T) {
	const token = "0123456789abcdef-token"
	srv := httptest.NewServer(New(source{}, testLabels).Server(token).Handler)
	defer srv.Close()
	status := func(auth string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+Path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer " + token[1:], "Bearer " + token + "x", "Basic " + token, token} {
		if s := status(auth); s != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %d", auth, s)
		}
	}
	for _, auth := range []string{"Bearer " + token, "bearer " + token} {
		if s := status(auth); s != http.StatusOK {
			t.Errorf("Authorization %q: %d", auth, s)
		}
	}
	if _, err := relaytest.ScrapeToken(srv.URL+Path, token); err != nil {
		t.Fatal(err)
	}
	open := httptest.NewServer(New(source{}, testLabels).Server("").Handler)
	defer open.Close()
	if _, err := relaytest.Scrape(open.URL + Path); err != nil {
		t.Fatalf("without a token: %v", err)
	}
}

// testLabels are label sets as the relay's, with the values the tests use.
var testLabels = Labels{Tools: []string{"files.search", "process.run", "unknown"}, EnrollRefusals: []string{"rate_limited", "bad_code"}}

type oddReplicas struct{ source }

func (oddReplicas) ReplicaLinks() map[string]int {
	return map[string]int{"a\"b": 1, "back\\slash": 2, "new\nline": 3}
}

// TestHistogramAndEscaping: a call's duration lands in the first bucket
// whose bound holds it, buckets count cumulatively up to +Inf, the sum adds
// up, a label outside its set shows only once counted, and label values
// with quotes, backslashes and line feeds come back intact through the
// Prometheus text parser; calls counted from many goroutines all count.
func TestHistogramAndEscaping(t *testing.T) {
	m := New(oddReplicas{}, testLabels)
	fams := scrape(t, m.Server("").Handler)
	if _, ok := fams.Value("commandcore_relay_link_ends_total", "kind", "unknown"); ok {
		t.Error("an unknown kind is shown before one was counted")
	}
	for _, d := range []time.Duration{500 * time.Microsecond, time.Millisecond, 3 * time.Millisecond, 2 * time.Second, 20 * time.Minute} {
		m.Call("files.search", "ok", d)
	}
	done := make(chan struct{})
	for range 8 {
		go func() {
			for range 100 {
				m.Call("process.run", "failed", time.Millisecond)
			}
			done <- struct{}{}
		}()
	}
	for range 8 {
		<-done
	}
	fams = scrape(t, m.Server("").Handler)
	var h *dto.Histogram
	for _, s := range fams["commandcore_relay_call_duration_seconds"].Metric {
		if s.Label[0].GetValue() == "files.search" {
			h = s.Histogram
		}
	}
	if h == nil {
		t.Fatal("no files.search histogram")
	}
	want := map[float64]uint64{0.001: 2, 0.005: 3, 0.025: 3, 0.1: 3, 0.5: 3, 1: 3, 5: 4, 30: 4, 120: 4, 600: 4, math.Inf(1): 5}
	if len(h.Bucket) != len(want) {
		t.Errorf("%d buckets, want %d", len(h.Bucket), len(want))
	}
	for _, b := range h.Bucket {
		if b.GetCumulativeCount() != want[b.GetUpperBound()] {
			t.Errorf("bucket le=%v holds %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want[b.GetUpperBound()])
		}
	}
	if h.GetSampleCount() != 5 || math.Abs(h.GetSampleSum()-(0.0005+0.001+0.003+2+1200)) > 1e-9 {
		t.Errorf("count %d, sum %v", h.GetSampleCount(), h.GetSampleSum())
	}
	if v := value(t, fams, "commandcore_relay_calls_total", "outcome", "failed", "tool", "process.run"); v != 800 {
		t.Errorf("800 concurrent calls counted as %v", v)
	}
	for name, n := range map[string]float64{"a\"b": 1, "back\\slash": 2, "new\nline": 3} {
		if v := value(t, fams, "commandcore_relay_replica_links", "replica", name); v != n {
			t.Errorf("replica %q: %v, want %v", name, v, n)
		}
	}
	if ct := contentTypeOf(t, m.Server("").Handler); ct != "text/plain; version=0.0.4; charset=utf-8" {
		t.Errorf("content type %q", ct)
	}
}

func contentTypeOf(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + Path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.Header.Get("Content-Type")
}
