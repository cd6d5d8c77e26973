package slogretry_test

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakeclock"
	"github.com/txretry/txretry/txretry/internal/fakedb"
	"github.com/txretry/txretry/txretry/slogretry"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// jsonLogger logs JSON lines without the time into buf.
func jsonLogger(buf *bytes.Buffer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
}

func lines(buf *bytes.Buffer) []string {
	s := strings.TrimSuffix(buf.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

var (
	serialization = &fakedb.SQLStateError{Code: "40001", Message: "could not serialize access"}
	uniqueMarker  = &fakedb.SQLStateError{Code: "23505", Message: "duplicate key value (k)=(MARKER-7d1f)"}
	connLost      = &fakedb.SQLStateError{Code: "08006", Message: "connection lost MARKER-7d1f"}
)

// failExecs returns an OnExec hook that fails the n-th exec with errs[n-1]
// and lets the later ones succeed.
func failExecs(errs ...error) func(context.Context, int, string, []driver.NamedValue) error {
	return func(_ context.Context, n int, _ string, _ []driver.NamedValue) error {
		if n <= len(errs) {
			return errs[n-1]
		}
		return nil
	}
}

func TestObserverLines(t *testing.T) {
	tests := []struct {
		name  string
		level slog.Level
		// setup scripts the driver; cancel ends the call's context.
		setup func(cancel context.CancelFunc) *fakedb.Driver
		opts  []txretry.Option
		want  []string
	}{
		{
			name:  "first-try success",
			level: slog.LevelDebug,
			setup: func(context.CancelFunc) *fakedb.Driver { return &fakedb.Driver{} },
		},
		{
			name:  "first-try permanent error",
			level: slog.LevelInfo,
			setup: func(context.CancelFunc) *fakedb.Driver {
				return &fakedb.Driver{OnExec: failExecs(uniqueMarker)}
			},
		},
		{
			name:  "retry then success",
			level: slog.LevelInfo,
			setup: func(context.CancelFunc) *fakedb.Driver {
				return &fakedb.Driver{OnExec: failExecs(serialization, serialization)}
			},
			want: []string{
				`{"level":"INFO","msg":"txretry: retryable failure","label":"transfer","attempt":1,"code":"40001","err_type":"fakedb.SQLStateError","duration":0}`,
				`{"level":"INFO","msg":"txretry: retryable failure","label":"transfer","attempt":2,"code":"40001","err_type":"fakedb.SQLStateError","duration":0}`,
				`{"level":"INFO","msg":"txretry: call finished","label":"transfer","outcome":"committed","attempts":3,"duration":10000000,"waited":10000000,"queued":0}`,
			},
		},
		{
			name:  "connection lost, then success",
			level: slog.LevelInfo,
			setup: func(context.CancelFunc) *fakedb.Driver {
				return &fakedb.Driver{OnExec: failExecs(io.ErrUnexpectedEOF)}
			},
			opts: []txretry.Option{txretry.WithRetryOnConnectionLoss(), txretry.WithRand(func() float64 { return 0.5 })},
			want: []string{
				`{"level":"WARN","msg":"txretry: connection lost before commit","label":"transfer","attempt":1,"code":"","err_type":"errors.errorString","duration":0}`,
				`{"level":"INFO","msg":"txretry: call finished","label":"transfer","outcome":"committed","attempts":2,"duration":25000000,"waited":25000000,"queued":0}`,
			},
		},
		{
			name:  "retry then success at debug",
			level: slog.LevelDebug,
			setup: func(context.CancelFunc) *fakedb.Driver {
				return &fakedb.Driver{OnExec: failExecs(serialization)}
			},
			want: []string{
				`{"level":"INFO","msg":"txretry: retryable failure","label":"transfer","attempt":1,"code":"40001","err_type":"fakedb.SQLStateError","duration":0}`,
				`{"level":"DEBUG","msg":"txretry: retry scheduled","label":"transfer","attempt":1,"delay":5000000}`,
				`{"level":"INFO","msg":"txretry: call finished","label":"transfer","outcome":"committed","attempts":2,"duration":5000000,"waited":5000000,"queued":0}`,
			},
		},
		{
			name:  "exhaustion",
			level: slog.LevelInfo,
			setup: func(context.CancelFunc) *fakedb.Driver {
				return &fakedb.Driver{OnExec: failExecs(serialization, serialization, serialization)}
			},
			opts: []txretry.Option{txretry.WithMaxAttempts(2)},
			want: []string{
				`{"level":"INFO","msg":"txretry: retryable failure","label":"transfer","attempt":1,"code":"40001","err_type":"fakedb.SQLStateError","duration":0}`,
				`{"level":"INFO","msg":"txretry: retryable failure","label":"transfer","attempt":2,"code":"40001","err_type":"fakedb.SQLStateError","duration":0}`,
				`{"level":"WARN","msg":"txretry: call finished","label":"transfer","outcome":"exhausted","attempts":2,"duration":5000000,"waited":5000000,"queued":0}`,
			},
		},
		{
			name:  "permanent error after a retry",
			level: slog.LevelDebug,
			setup: func(context.CancelFunc) *fakedb.Driver {
				return &fakedb.Driver{OnExec: failExecs(serialization, uniqueMarker)}
			},
			want: []string{
				`{"level":"INFO","msg":"txretry: retryable failure","label":"transfer","attempt":1,"code":"40001","err_type":"fakedb.SQLStateError","duration":0}`,
				`{"level":"DEBUG","msg":"txretry: retry scheduled","label":"transfer","attempt":1,"delay":5000000}`,
				`{"level":"DEBUG","msg":"txretry: permanent failure","label":"transfer","attempt":2,"code":"23505","err_type":"fakedb.SQLStateError","duration":0}`,
				`{"level":"INFO","msg":"txretry: call finished","label":"transfer","outcome":"permanent_error","attempts":2,"duration":5000000,"waited":5000000,"queued":0}`,
			},
		},
		{
			name:  "uncertain commit",
			level: slog.LevelInfo,
			setup: func(context.CancelFunc) *fakedb.Driver {
				return &fakedb.Driver{OnCommit: func(int) error { return connLost }}
			},
			want: []string{
				`{"level":"WARN","msg":"txretry: commit outcome unknown","label":"transfer","attempt":1,"code":"08006","err_type":"fakedb.SQLStateError","duration":0}`,
				`{"level":"WARN","msg":"txretry: call finished","label":"transfer","outcome":"uncertain","attempts":1,"duration":0,"waited":0,"queued":0}`,
			},
		},
		{
			name:  "uncertain commit verified",
			level: slog.LevelInfo,
			setup: func(context.CancelFunc) *fakedb.Driver {
				return &fakedb.Driver{OnCommit: func(int) error { return connLost }}
			},
			opts: []txretry.Option{txretry.WithVerify(func(context.Context) (bool, error) { return true, nil })},
			want: []string{
				`{"level":"WARN","msg":"txretry: commit outcome unknown","label":"transfer","attempt":1,"code":"08006","err_type":"fakedb.SQLStateError","duration":0}`,
				`{"level":"INFO","msg":"txretry: commit verified","label":"transfer","verifier":"callback","verification":"committed","code":"","err_type":""}`,
			},
		},
		{
			name:  "uncertain commit unresolved",
			level: slog.LevelInfo,
			setup: func(context.CancelFunc) *fakedb.Driver {
				return &fakedb.Driver{OnCommit: func(int) error { return connLost }}
			},
			opts: []txretry.Option{
				// On the still clock, with the jitter at its top (50 ms after a
				// connection loss), no verification retry fits the budget; BEGIN,
				// bounded by the budget left in real time, has 40 ms.
				txretry.WithTimeBudget(40 * time.Millisecond), txretry.WithRand(func() float64 { return 1 }),
				txretry.WithVerify(func(context.Context) (bool, error) { return false, connLost }),
			},
			want: []string{
				`{"level":"WARN","msg":"txretry: commit outcome unknown","label":"transfer","attempt":1,"code":"08006","err_type":"fakedb.SQLStateError","duration":0}`,
				`{"level":"WARN","msg":"txretry: commit unresolved","label":"transfer","verifier":"callback","verification":"unresolved","code":"08006","err_type":"fakedb.SQLStateError"}`,
				`{"level":"WARN","msg":"txretry: call finished","label":"transfer","outcome":"uncertain","attempts":1,"duration":0,"waited":0,"queued":0}`,
			},
		},
		{
			name:  "cancellation between attempts",
			level: slog.LevelInfo,
			setup: func(cancel context.CancelFunc) *fakedb.Driver {
				return &fakedb.Driver{OnExec: func(_ context.Context, n int, _ string, _ []driver.NamedValue) error {
					cancel()
					return serialization
				}}
			},
			opts: []txretry.Option{txretry.WithBackoff(txretry.Constant(0))},
			want: []string{
				`{"level":"INFO","msg":"txretry: retryable failure","label":"transfer","attempt":1,"code":"40001","err_type":"fakedb.SQLStateError","duration":0}`,
				`{"level":"INFO","msg":"txretry: call finished","label":"transfer","outcome":"cancelled","attempts":1,"duration":0,"waited":0,"queued":0}`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			db := tt.setup(cancel).DB()
			defer db.Close()
			var buf bytes.Buffer
			opts := append([]txretry.Option{
				txretry.WithLabel("transfer"),
				txretry.WithClock(&fakeclock.Clock{}),
				txretry.WithBackoff(txretry.Constant(5 * time.Millisecond)), txretry.WithoutContentionManager(), // the backoff alone spaces the retries
				txretry.WithObserver(slogretry.New(jsonLogger(&buf, tt.level))),
			}, tt.opts...)

			_ = txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, "UPDATE account SET balance = balance - $1 WHERE id = $2", "MARKER-7d1f", 1)
				return err
			}, opts...)

			got := lines(&buf)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if strings.Contains(buf.String(), "MARKER") {
				t.Errorf("an error message or argument reached the log:\n%s", buf.String())
			}
		})
	}
}

func TestLevelOptions(t *testing.T) {
	d := &fakedb.Driver{OnExec: failExecs(serialization, serialization)}
	db := d.DB()
	defer db.Close()
	var buf bytes.Buffer
	obs := slogretry.New(jsonLogger(&buf, slog.LevelDebug),
		slogretry.WithRetryLevel(slog.LevelDebug), slogretry.WithProblemLevel(slog.LevelError),
		slogretry.WithDebugLevel(slog.LevelDebug-4), nil)
	err := txretry.RunInTx(context.Background(), db, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE t SET v = 1")
		return err
	}, txretry.WithMaxAttempts(2), txretry.WithObserver(obs),
		txretry.WithClock(&fakeclock.Clock{}), txretry.WithBackoff(txretry.Constant(time.Millisecond)))
	if !errors.Is(err, txretry.ErrRetriesExhausted) {
		t.Fatalf("RunInTx: %v, want ErrRetriesExhausted", err)
	}
	want := []string{
		`{"level":"DEBUG","msg":"txretry: retryable failure","label":"","attempt":1,"code":"40001","err_type":"fakedb.SQLStateError","duration":0}`,
		`{"level":"DEBUG","msg":"txretry: retryable failure","label":"","attempt":2,"code":"40001","err_type":"fakedb.SQLStateError","duration":0}`,
		`{"level":"ERROR","msg":"txretry: call finished","label":"","outcome":"exhausted","attempts":2,"duration":1000000,"waited":1000000,"queued":0}`,
	}
	if got := lines(&buf); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestNilLoggerUsesDefault(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(jsonLogger(&buf, slog.LevelInfo))
	defer slog.SetDefault(old)
	slogretry.New(nil).Observe(context.Background(), txretry.Event{
		Kind: txretry.CallFinished, Label: "x", Outcome: txretry.Exhausted, Attempts: 3,
		Duration: 9 * time.Millisecond, Waited: time.Millisecond, Queued: 7 * time.Millisecond,
	})
	want := `{"level":"WARN","msg":"txretry: call finished","label":"x","outcome":"exhausted","attempts":3,"duration":9000000,"waited":1000000,"queued":7000000}`
	if got := strings.TrimSpace(buf.String()); got != want {
		t.Errorf("line %s, want %s", got, want)
	}
}

func TestFinishedLines(t *testing.T) {
	tests := []struct {
		outcome  txretry.Outcome
		attempts int
		want     string // level, or "" for no line
	}{
		{txretry.Committed, 1, ""},
		{txretry.Committed, 2, "INFO"},
		{txretry.PermanentError, 1, ""},
		{txretry.PermanentError, 3, "INFO"},
		{txretry.Exhausted, 1, "WARN"},
		{txretry.CommitUncertain, 1, "WARN"},
		{txretry.Cancelled, 0, ""},
		{txretry.Cancelled, 1, "INFO"},
		{txretry.Panicked, 1, ""},
		{txretry.Panicked, 2, "WARN"},
		{txretry.Outcome(99), 1, ""},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		slogretry.New(jsonLogger(&buf, slog.LevelDebug)).Observe(context.Background(),
			txretry.Event{Kind: txretry.CallFinished, Outcome: tt.outcome, Attempts: tt.attempts})
		got := ""
		if s := buf.String(); s != "" {
			got = strings.SplitN(strings.TrimPrefix(s, `{"level":"`), `"`, 2)[0]
		}
		if got != tt.want {
			t.Errorf("%v after %d attempts: level %q, want %q", tt.outcome, tt.attempts, got, tt.want)
		}
	}
}

func TestAttemptStartedAndUnknownKindsAreQuiet(t *testing.T) {
	var buf bytes.Buffer
	obs := slogretry.New(jsonLogger(&buf, slog.LevelDebug))
	obs.Observe(context.Background(), txretry.Event{Kind: txretry.AttemptStarted, Attempt: 1})
	obs.Observe(context.Background(), txretry.Event{Kind: txretry.EventKind(99)})
	if buf.Len() != 0 {
		t.Errorf("unexpected lines: %s", buf.String())
	}
}
