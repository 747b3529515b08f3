// Package metricstest reads a /metrics answer (Prometheus text format) for
// tests: scrape before, act, scrape after, and check how far each series
// moved.
package metricstest

import (
	"fmt"
	"io"
	"net/http"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape is one parsed /metrics answer, by metric family name.
type Scrape map[string]*dto.MetricFamily

// Parse reads the Prometheus text format.
func Parse(r io.Reader) (Scrape, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return Scrape(mfs), nil
}

// Get scrapes url (a /metrics address) and fails t unless it answers 200
// with a valid text exposition.
func Get(t testing.TB, url string) Scrape {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", url, resp.Status)
	}
	s, err := Parse(resp.Body)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	return s
}

// Has says whether the family name is present.
func (s Scrape) Has(name string) bool { _, ok := s[name]; return ok }

// Value sums the series of the family name whose labels include every
// given pair (labels alternate name, value): a counter's or gauge's value,
// a histogram's sample count. A series not present counts as 0.
func (s Scrape) Value(name string, labels ...string) float64 {
	var v float64
	s.each(name, labels, func(m *dto.Metric) {
		switch {
		case m.Counter != nil:
			v += m.Counter.GetValue()
		case m.Gauge != nil:
			v += m.Gauge.GetValue()
		case m.Untyped != nil:
			v += m.Untyped.GetValue()
		case m.Histogram != nil:
			v += float64(m.Histogram.GetSampleCount())
		case m.Summary != nil:
			v += float64(m.Summary.GetSampleCount())
		}
	})
	return v
}

// Sum sums the sample sums of the histogram name's matching series.
func (s Scrape) Sum(name string, labels ...string) float64 {
	var v float64
	s.each(name, labels, func(m *dto.Metric) {
		if m.Histogram != nil {
			v += m.Histogram.GetSampleSum()
		}
	})
	return v
}

// Delta is how far the matching series of name moved from before to s.
func (s Scrape) Delta(before Scrape, name string, labels ...string) float64 {
	return s.Value(name, labels...) - before.Value(name, labels...)
}

func (s Scrape) each(name string, labels []string, fn func(*dto.Metric)) {
	if len(labels)%2 != 0 {
		panic("metricstest: labels must come in name, value pairs")
	}
	mf, ok := s[name]
	if !ok {
		return
	}
	for _, m := range mf.Metric {
		if matches(m, labels) {
			fn(m)
		}
	}
}

func matches(m *dto.Metric, labels []string) bool {
	for i := 0; i < len(labels); i += 2 {
		found := false
		for _, lp := range m.Label {
			if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
