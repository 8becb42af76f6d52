package relaytest

import (
	"fmt"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics are scraped series, by family name.
type Metrics map[string]*dto.MetricFamily

// Scrape GETs a Prometheus text endpoint and parses it.
func Scrape(url string) (Metrics, error) { return ScrapeToken(url, "") }

// ScrapeToken is Scrape with a bearer token, when token is not empty.
func ScrapeToken(url, token string) (Metrics, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// Value is the value of the series name{labels} (label name, value, ...
// in the order they are printed, which is by name): a counter's or
// gauge's value, a histogram's sample count. ok is false when there is no
// such series.
func (m Metrics) Value(name string, labels ...string) (v float64, ok bool) {
	f := m[name]
	if f == nil {
		return 0, false
	}
next:
	for _, s := range f.Metric {
		if len(s.Label) != len(labels)/2 {
			continue
		}
		for i, l := range s.Label {
			if l.GetName() != labels[2*i] || l.GetValue() != labels[2*i+1] {
				continue next
			}
		}
		switch {
		case s.Counter != nil:
			return s.Counter.GetValue(), true
		case s.Gauge != nil:
			return s.Gauge.GetValue(), true
		case s.Histogram != nil:
			return float64(s.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// Sum is the sum of every series of a counter family.
func (m Metrics) Sum(name string) float64 {
	var sum float64
	if f := m[name]; f != nil {
		for _, s := range f.Metric {
			sum += s.GetCounter().GetValue()
		}
	}
	return sum
}
