package otelretry_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
	"github.com/txretry/txretry/txretry/otelretry"
)

// BenchmarkObserve measures what the observer adds to a first-try call and
// to a call that retries once, with the SDK's providers recording: the
// difference between each "otel" case and its "none" case is the observer's
// cost.
func BenchmarkObserve(b *testing.B) {
	for _, bc := range []struct {
		name string
		exec func(context.Context, int, string, []driver.NamedValue) error
	}{
		{"first-try", nil},
		{"one-retry", func(_ context.Context, n int, _ string, _ []driver.NamedValue) error {
			if n%2 == 1 {
				return serialization
			}
			return nil
		}},
	} {
		for _, observed := range []bool{false, true} {
			name := bc.name + "/none"
			if observed {
				name = bc.name + "/otel"
			}
			b.Run(name, func(b *testing.B) {
				opts := []txretry.Option{txretry.WithLabel("bench"), txretry.WithBackoff(txretry.Constant(0))}
				if observed {
					// Providers that record everything and export
					// nothing, so that the exporter's cost is left out.
					mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
					tp := sdktrace.NewTracerProvider()
					defer func() { _ = errors.Join(mp.Shutdown(context.Background()), tp.Shutdown(context.Background())) }()
					obs, err := otelretry.NewObserver(otelretry.WithMeterProvider(mp), otelretry.WithTracerProvider(tp),
						otelretry.WithDBSystem("postgresql"))
					if err != nil {
						b.Fatal(err)
					}
					opts = append(opts, txretry.WithObserver(obs))
				}
				db := (&fakedb.Driver{OnExec: bc.exec}).DB()
				defer db.Close()
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					if err := txretry.RunInTx(ctx, db, debit, opts...); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
