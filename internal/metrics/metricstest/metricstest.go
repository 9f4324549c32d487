// Package metricstest reads metric families as Prometheus's text parser
// gives them, for the tests of the batch metrics: one sample by name and
// labels, and a table of samples checked at once.
package metricstest

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// Want is one sample a test expects: name{labels} = Value, Labels as
// name, value pairs.
type Want struct {
	Name   string
	Labels []string
	Value  float64
}

// W is the Want name{labels} = value, labels as name, value pairs.
func W(name string, value float64, labels ...string) Want {
	return Want{Name: name, Labels: labels, Value: value}
}

// Sample is the value of the series of name whose labels are exactly
// labels (name, value pairs), and whether there is one.
func Sample(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	for _, m := range fams[name].GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		match := len(got) == len(labels)/2
		for i := 0; match && i+1 < len(labels); i += 2 {
			match = got[labels[i]] == labels[i+1]
		}
		if match {
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue(), true
			}
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// Check reports, as where, every sample of wants that fams lacks or holds
// at another value.
func Check(t testing.TB, where string, fams map[string]*dto.MetricFamily, wants []Want) {
	t.Helper()
	for _, w := range wants {
		got, ok := Sample(fams, w.Name, w.Labels...)
		if !ok || got != w.Value {
			t.Errorf("%s: %s%v = %v (present %t), want %v", where, w.Name, w.Labels, got, ok, w.Value)
		}
	}
}
