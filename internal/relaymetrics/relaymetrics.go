// Package relaymetrics is the relay's Prometheus metrics (README): what
// `relay serve --metrics-listen` serves. It uses its own registry, not the
// client library's global one, so nothing but these series is exposed and
// nothing registers itself from package init. Every label value comes from
// a closed set (the relay's tool table, the link's end kinds, the
// enrollment refusal reasons); anything else is counted under "unknown".
package relaymetrics

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/commandcore/commandcore/internal/relaystate"
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
}

// Labels are the closed sets of the relay's label values: the tools its
// audit log names and the reasons it refuses enrollments for.
type Labels struct {
	Tools          []string
	EnrollRefusals []string
}

// Metrics holds the relay's series. It is the relay's Observer.
type Metrics struct {
	reg      *prometheus.Registry
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	linkEnds *prometheus.CounterVec
	refusals *prometheus.CounterVec

	tools, outcomes, kinds, reasons []string
}

// New returns the relay's metrics, reading src's gauges when scraped.
// Every series of every known label value starts at zero, so a rate over
// it is defined from the first scrape.
func New(src Source, labels Labels) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "commandcore_relay_calls_total",
			Help: "Client tool calls through the relay, by tool and outcome (ok or failed).",
		}, []string{"tool", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "commandcore_relay_call_duration_seconds",
			Help:    "How long client tool calls through the relay took, by tool.",
			Buckets: durationBuckets,
		}, []string{"tool"}),
		linkEnds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "commandcore_relay_link_ends_total",
			Help: "Device links that ended, by kind of end.",
		}, []string{"kind"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "commandcore_relay_enroll_refusals_total",
			Help: "Enrollment requests the relay refused, by reason.",
		}, []string{"reason"}),
		tools:    labels.Tools,
		outcomes: []string{relaystate.AuditOK, relaystate.AuditFailed},
		reasons:  labels.EnrollRefusals,
	}
	for _, k := range LinkEnds {
		m.kinds = append(m.kinds, string(k))
	}
	m.reg.MustRegister(m.calls, m.duration, m.linkEnds, m.refusals,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "commandcore_relay_connected_devices",
			Help: "Devices with a live link to the relay.",
		}, func() float64 { return float64(src.ConnectedDevices()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "commandcore_relay_audit_dropped_total",
			Help: "Client calls the audit log could not record (its queue was full or the database failed).",
		}, func() float64 { return float64(src.AuditDropped()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "commandcore_relay_cross_replica_calls_sent_total",
			Help: "Client calls this replica sent to the replica holding their device's link.",
		}, func() float64 { sent, _ := src.CrossReplicaCalls(); return float64(sent) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "commandcore_relay_cross_replica_calls_served_total",
			Help: "Calls this replica carried to its own links for another replica.",
		}, func() float64 { _, served := src.CrossReplicaCalls(); return float64(served) }),
		replicaLinks{src})
	for _, tool := range m.tools {
		for _, o := range m.outcomes {
			m.calls.WithLabelValues(tool, o)
		}
		m.duration.WithLabelValues(tool)
	}
	for _, k := range m.kinds {
		m.linkEnds.WithLabelValues(k)
	}
	for _, r := range m.reasons {
		m.refusals.WithLabelValues(r)
	}
	return m
}

// replicaLinks is the gauge of the links each live replica holds, read
// from the shared state when scraped.
type replicaLinks struct{ src Source }

var replicaLinksDesc = prometheus.NewDesc("commandcore_relay_replica_links",
	"Device links each live relay replica holds, by replica name, as the shared state records them.", []string{"replica"}, nil)

func (r replicaLinks) Describe(ch chan<- *prometheus.Desc) { ch <- replicaLinksDesc }

func (r replicaLinks) Collect(ch chan<- prometheus.Metric) {
	for name, n := range r.src.ReplicaLinks() {
		ch <- prometheus.MustNewConstMetric(replicaLinksDesc, prometheus.GaugeValue, float64(n), name)
	}
}

// closed returns v when it is one of set, else "unknown".
func closed(set []string, v string) string {
	if slices.Contains(set, v) {
		return v
	}
	return unknown
}

// Call counts one client call and its duration.
func (m *Metrics) Call(tool, outcome string, d time.Duration) {
	tool = closed(m.tools, tool)
	m.calls.WithLabelValues(tool, closed(m.outcomes, outcome)).Inc()
	m.duration.WithLabelValues(tool).Observe(d.Seconds())
}

// LinkEnd counts one device link's end.
func (m *Metrics) LinkEnd(kind transport.End) {
	m.linkEnds.WithLabelValues(closed(m.kinds, string(kind))).Inc()
}

// EnrollRefused counts one refused enrollment.
func (m *Metrics) EnrollRefused(reason string) {
	m.refusals.WithLabelValues(closed(m.reasons, reason)).Inc()
}

// Server returns an HTTP server for the metrics: GET /metrics in the
// Prometheus text format, nothing else. With a token, every scrape must
// carry it as a bearer token (Authorization: Bearer TOKEN); any other
// request gets 401.
func (m *Metrics) Server(token string) *http.Server {
	var h http.Handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
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
