package otelretry_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/otelretry"
	"github.com/txretry/txretry/txretry/pgxretry"
)

// One observer per process, shared by every call. A ManualReader stands in
// for the exporter (OTLP, Prometheus) a service configures, and a stand-in
// for a *pgxpool.Pool that picks the first statement as a deadlock victim for
// the database.
func Example() {
	reader := sdkmetric.NewManualReader()
	obs, err := otelretry.NewObserver(
		otelretry.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		otelretry.WithDBSystem("postgresql"),
	)
	if err != nil {
		fmt.Println(err)
		return
	}

	err = pgxretry.RunInTx(context.Background(), &deadlockDB{}, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance - $1 WHERE id = $2", 10, 1)
		return err
	}, txretry.WithObserver(obs), txretry.WithLabel("debit"), txretry.WithBackoff(txretry.Constant(0)))
	fmt.Println("err:", err)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		fmt.Println(err)
		return
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, p := range sum.DataPoints {
					fmt.Println(m.Name, p.Value, p.Attributes.Encoded(attribute.DefaultEncoder()))
				}
			}
		}
	}
	// Output:
	// err: <nil>
	// txretry.calls 1 db.operation.name=debit,db.system.name=postgresql,txretry.outcome=committed
	// txretry.attempt.failures 1 db.operation.name=debit,db.response.status_code=40P01,db.system.name=postgresql,error.type=pgconn.PgError,txretry.class=retryable
	// txretry.retries 1 db.operation.name=debit,db.system.name=postgresql
}

// deadlockDB begins transactions that do nothing, except that the first
// statement of all is chosen as a deadlock victim (SQLSTATE 40P01).
type deadlockDB struct{ statements int }

func (d *deadlockDB) BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error) {
	return &deadlockTx{db: d}, nil
}

// deadlockTx implements what RunInTx and the example call of pgx.Tx; the
// embedded interface stands for the rest.
type deadlockTx struct {
	pgx.Tx
	db *deadlockDB
}

func (t *deadlockTx) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	if t.db.statements++; t.db.statements == 1 {
		return pgconn.CommandTag{}, &pgconn.PgError{Code: "40P01", Message: "deadlock detected"}
	}
	return pgconn.NewCommandTag("UPDATE 1"), nil
}

func (*deadlockTx) Commit(context.Context) error   { return nil }
func (*deadlockTx) Rollback(context.Context) error { return nil }
