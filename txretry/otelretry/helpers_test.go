package otelretry_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/txretry/txretry/txretry/otelretry"
)

// harness is an observer over in-memory SDK providers.
type harness struct {
	obs    *otelretry.Observer
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	spans  *tracetest.InMemoryExporter
}

func newHarness(t testing.TB, opts ...otelretry.Option) *harness {
	t.Helper()
	h := &harness{reader: sdkmetric.NewManualReader(), spans: tracetest.NewInMemoryExporter()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(h.spans))
	h.tp = tp
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	obs, err := otelretry.NewObserver(append([]otelretry.Option{
		otelretry.WithMeterProvider(mp), otelretry.WithTracerProvider(tp),
	}, opts...)...)
	if err != nil {
		t.Fatalf("NewObserver: %v", err)
	}
	h.obs = obs
	return h
}

// metrics renders every data point as one line, sorted:
// "name{attrs} value" for counters, "name{attrs} count=N sum=S" for
// histograms.
func (h *harness) metrics(t *testing.T) []string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	var out []string
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelretry.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, otelretry.ScopeName)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out = append(out, fmt.Sprintf("%s{%s} %d", m.Name, enc(p.Attributes), p.Value))
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					out = append(out, fmt.Sprintf("%s{%s} count=%d sum=%d", m.Name, enc(p.Attributes), p.Count, p.Sum))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out = append(out, fmt.Sprintf("%s{%s} count=%d sum=%g", m.Name, enc(p.Attributes), p.Count, p.Sum))
				}
			default:
				t.Errorf("metric %s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	slices.Sort(out)
	return out
}

// counter returns the sum of the values of the named counter over the data
// points whose attributes include all of want.
func (h *harness) counter(t *testing.T, name string, want ...attribute.KeyValue) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			d, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != name || !ok {
				continue
			}
			for _, p := range d.DataPoints {
				if hasAll(p.Attributes, want) {
					n += p.Value
				}
			}
		}
	}
	return n
}

// histogram returns the float64 histogram's data points whose attributes
// include all of want, merged into one (count and sum only).
func (h *harness) histogram(t *testing.T, name string, want ...attribute.KeyValue) metricdata.HistogramDataPoint[float64] {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	var sum metricdata.HistogramDataPoint[float64]
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			d, ok := m.Data.(metricdata.Histogram[float64])
			if m.Name != name || !ok {
				continue
			}
			for _, p := range d.DataPoints {
				if hasAll(p.Attributes, want) {
					sum.Count += p.Count
					sum.Sum += p.Sum
				}
			}
		}
	}
	return sum
}

func hasAll(s attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := s.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

func enc(s attribute.Set) string { return s.Encoded(attribute.DefaultEncoder()) }

// spanLines renders the ended spans, in the order they ended: one line
// per span ("name status attrs") followed by one indented line per event.
func (h *harness) spanLines() []string {
	var out []string
	for _, s := range h.spans.GetSpans() {
		out = append(out, fmt.Sprintf("%s %s %q {%s}", s.Name, s.Status.Code, s.Status.Description, enc(attribute.NewSet(s.Attributes...))))
		for _, e := range s.Events {
			out = append(out, fmt.Sprintf("  %s {%s}", e.Name, enc(attribute.NewSet(e.Attributes...))))
		}
	}
	return out
}

func diff(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n%s\nwant:\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
