// Package metrics is the relay's Prometheus metrics (README): what
// `relay serve --metrics-listen` serves. It writes the Prometheus text
// format itself rather than with the client library: every label value
// comes from a closed set (the relay's tool table, the link's end kinds,
// the enrollment refusal reasons; anything else is counted under
// "unknown"), so each series is a fixed counter, and the library's package
// set-up would run in every role of the one binary, the per-job
// supervisor's start included.
package metrics

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/transport"
)

// Path is where the metrics are served.
const Path = "/metrics"

// unknown is the label value of anything outside a label's closed set.
const unknown = "unknown"

// LinkEnds are the kinds of link end the relay counts. Their labels are
// the names the agent's journal gives them (README).
var LinkEnds = []transport.End{transport.EndRemoteClose, transport.EndSendTimeout, transport.EndSilence,
	transport.EndProtocol, transport.EndAuth, transport.EndLocalShutdown}

// durationBuckets span a refused call (well under a millisecond) to the
// longest a call may run (process.run's and process.wait's ten minutes).
var durationBuckets = []float64{0.001, 0.005, 0.025, 0.1, 0.5, 1, 5, 30, 120, 600}

// The HTTP server's bounds: a scrape is one small GET.
const (
	readTimeout  = 10 * time.Second
	writeTimeout = 30 * time.Second
	idleTimeout  = 2 * time.Minute
)

// Source is what the metrics read from the relay when scraped.
type Source interface {
	ConnectedDevices() int
	AuditDropped() uint64
	CrossReplicaCalls() (sent, served uint64)
	ReplicaLinks() map[string]int
	// PeerMessagesDropped are the messages from NATS the replica dropped
	// (forged, replayed, …), by reason, from the closed set the replica
	// counts; nil when it runs alone.
	PeerMessagesDropped() map[string]uint64
}

// Labels are the closed sets of the relay's label values: the tools its
// audit log names and the reasons it refuses enrollments for.
type Labels struct {
	Tools          []string
	EnrollRefusals []string
}

// Metrics holds the relay's series. It is the relay's Observer.
type Metrics struct {
	src      Source
	calls    grid
	duration histograms
	linkEnds grid
	refusals grid
}

// New returns the relay's metrics, reading src's gauges when scraped.
// Every series of every known label value starts at zero, so a rate over
// it is defined from the first scrape.
func New(src Source, labels Labels) *Metrics {
	kinds := make([]string, len(LinkEnds))
	for i, k := range LinkEnds {
		kinds[i] = string(k)
	}
	tools := newLabel("tool", labels.Tools)
	return &Metrics{
		src:      src,
		calls:    newGrid(tools, newLabel("outcome", []string{store.AuditOK, store.AuditFailed})),
		duration: newHistograms(tools, durationBuckets),
		linkEnds: newGrid(newLabel("kind", kinds)),
		refusals: newGrid(newLabel("reason", labels.EnrollRefusals)),
	}
}

// Call counts one client call and its duration.
func (m *Metrics) Call(tool, outcome string, d time.Duration) {
	m.calls.inc(tool, outcome)
	m.duration.observe(tool, d.Seconds())
}

// LinkEnd counts one device link's end.
func (m *Metrics) LinkEnd(kind transport.End) { m.linkEnds.inc(string(kind)) }

// EnrollRefused counts one refused enrollment.
func (m *Metrics) EnrollRefused(reason string) { m.refusals.inc(reason) }

// write renders every series in the Prometheus text format, families in
// name order.
func (m *Metrics) write(w *bufio.Writer) {
	sent, served := m.src.CrossReplicaCalls()
	replicas := m.src.ReplicaLinks()
	names := make([]string, 0, len(replicas))
	for name := range replicas {
		names = append(names, name)
	}
	sort.Strings(names)

	family(w, "commandcore_relay_audit_dropped_total", "counter",
		"Client calls the audit log could not record (its queue was full or the database failed).")
	sample(w, "commandcore_relay_audit_dropped_total", "", float64(m.src.AuditDropped()))
	family(w, "commandcore_relay_call_duration_seconds", "histogram", "How long client tool calls through the relay took, by tool.")
	m.duration.write(w, "commandcore_relay_call_duration_seconds")
	family(w, "commandcore_relay_calls_total", "counter", "Client tool calls through the relay, by tool and outcome (ok or failed).")
	m.calls.write(w, "commandcore_relay_calls_total")
	family(w, "commandcore_relay_connected_devices", "gauge", "Devices with a live link to the relay.")
	sample(w, "commandcore_relay_connected_devices", "", float64(m.src.ConnectedDevices()))
	family(w, "commandcore_relay_cross_replica_calls_sent_total", "counter",
		"Client calls this replica sent to the replica holding their device's link.")
	sample(w, "commandcore_relay_cross_replica_calls_sent_total", "", float64(sent))
	family(w, "commandcore_relay_cross_replica_calls_served_total", "counter",
		"Calls this replica carried to its own links for another replica.")
	sample(w, "commandcore_relay_cross_replica_calls_served_total", "", float64(served))
	family(w, "commandcore_relay_enroll_refusals_total", "counter", "Enrollment requests the relay refused, by reason.")
	m.refusals.write(w, "commandcore_relay_enroll_refusals_total")
	family(w, "commandcore_relay_link_ends_total", "counter", "Device links that ended, by kind of end.")
	m.linkEnds.write(w, "commandcore_relay_link_ends_total")
	if drops := m.src.PeerMessagesDropped(); drops != nil {
		family(w, "commandcore_relay_peer_messages_dropped_total", "counter",
			"Messages from NATS this replica dropped instead of acting on them, by reason (forged, replayed, stale, over_bound).")
		reasons := make([]string, 0, len(drops))
		for r := range drops {
			reasons = append(reasons, r)
		}
		sort.Strings(reasons)
		for _, r := range reasons {
			sample(w, "commandcore_relay_peer_messages_dropped_total", pair("reason", r), float64(drops[r]))
		}
	}
	family(w, "commandcore_relay_replica_links", "gauge",
		"Device links each live relay replica holds, by replica name, as the shared state records them.")
	for _, name := range names {
		sample(w, "commandcore_relay_replica_links", pair("replica", name), float64(replicas[name]))
	}
}

// ServeHTTP answers a scrape.
func (m *Metrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", contentType)
	bw := bufio.NewWriter(w)
	m.write(bw)
	bw.Flush()
}

// Server returns an HTTP server for the metrics: GET /metrics in the
// Prometheus text format, nothing else. With a token, every scrape must
// carry it as a bearer token (Authorization: Bearer TOKEN); any other
// request gets 401.
func (m *Metrics) Server(token string) *http.Server {
	var h http.Handler = m
	if token != "" {
		h = requireBearer(token, h)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, h)
	return &http.Server{Handler: mux, ReadHeaderTimeout: readTimeout, ReadTimeout: readTimeout,
		WriteTimeout: writeTimeout, IdleTimeout: idleTimeout}
}

// requireBearer serves next only the requests that present token. The
// comparison is of hashes, in constant time, so neither the token's
// content nor its length shows in how long a refusal takes.
func requireBearer(token string, next http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		const scheme = "Bearer "
		auth := r.Header.Get("Authorization")
		ok := len(auth) > len(scheme) && strings.EqualFold(auth[:len(scheme)], scheme)
		if ok {
			got := sha256.Sum256([]byte(auth[len(scheme):]))
			ok = subtle.ConstantTimeCompare(got[:], want[:]) == 1
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="commandcore relay metrics"`)
			http.Error(w, "a metrics scrape needs the relay's metrics token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
