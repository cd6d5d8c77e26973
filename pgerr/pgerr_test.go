package pgerr_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"

	"github.com/txretry/txretry/pgerr"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// stateErr is a driver-independent error with a SQLSTATE, like lib/pq's
// *pq.Error.
type stateErr struct{ code string }

func (e *stateErr) Error() string    { return "state error " + e.code }
func (e *stateErr) SQLState() string { return e.code }

// valueStateErr has its SQLState method on the value receiver.
type valueStateErr string

func (e valueStateErr) Error() string    { return "value state error " + string(e) }
func (e valueStateErr) SQLState() string { return string(e) }

// asErr has no SQLState method but converts itself with As, as some error
// libraries do.
type asErr struct{ code string }

func (e *asErr) Error() string { return "as error" }

func (e *asErr) As(target any) bool {
	t, ok := target.(*interface{ SQLState() string })
	if ok {
		*t = &stateErr{code: e.code}
	}
	return ok
}

// multiErr wraps several errors with Unwrap() []error, without errors.Join.
type multiErr []error

func (m multiErr) Error() string   { return "multi" }
func (m multiErr) Unwrap() []error { return m }

func pg(code string) error { return &pgconn.PgError{Code: code, Message: "test"} }

func TestSQLState(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"plain error", errors.New("plain"), ""},
		{"wrapped plain error", fmt.Errorf("exec: %w", errors.New("plain")), ""},
		{"pgconn", pg("40001"), "40001"},
		{"local type", &stateErr{"40P01"}, "40P01"},
		{"value receiver", valueStateErr("55P03"), "55P03"},
		{"wrapped", fmt.Errorf("commit: %w", pg("40001")), "40001"},
		{"double wrapped", fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", pg("40P01"))), "40P01"},
		{"join first wins", errors.Join(pg("42P01"), pg("40001")), "42P01"},
		{"join code second", errors.Join(errors.New("rollback: conn busy"), pg("40001")), "40001"},
		{"join nested in wrap", fmt.Errorf("tx: %w", errors.Join(errors.New("x"), fmt.Errorf("y: %w", pg("40003")))), "40003"},
		{"multiple %w", fmt.Errorf("a: %w, b: %w", errors.New("a"), pg("08007")), "08007"},
		{"custom Unwrap []error", multiErr{errors.New("a"), &stateErr{"CR000"}}, "CR000"},
		{"empty code skipped", errors.Join(&stateErr{""}, pg("40001")), "40001"},
		{"As method", fmt.Errorf("lib: %w", &asErr{"23505"}), "23505"},
		{"typed nil pgconn does not panic", fmt.Errorf("x: %w", (*pgconn.PgError)(nil)), ""},
		{"typed nil then code", errors.Join((*pgconn.PgError)(nil), pg("40001")), "40001"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pgerr.SQLState(tt.err); got != tt.want {
				t.Errorf("SQLState() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestHas(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		codes []string
		want  bool
	}{
		{"nil", nil, []string{"40001"}, false},
		{"no codes", pg("40001"), nil, false},
		{"plain", errors.New("40001"), []string{"40001"}, false},
		{"match", pg("40001"), []string{"40001"}, true},
		{"match second code", pg("40P01"), []string{"40001", "40P01"}, true},
		{"no match", pg("42P01"), []string{"40001", "40P01"}, false},
		{"case sensitive", pg("40P01"), []string{"40p01"}, false},
		{"join code second", errors.Join(pg("42P01"), pg("40P01")), []string{"40P01"}, true},
		{"double wrapped join", fmt.Errorf("a: %w", fmt.Errorf("b: %w", errors.Join(pg("23505"), &stateErr{"40001"}))), []string{"40001"}, true},
		{"deep custom tree", multiErr{multiErr{errors.New("x")}, fmt.Errorf("y: %w", valueStateErr("57P01"))}, []string{"57P01"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pgerr.Has(tt.err, tt.codes...); got != tt.want {
				t.Errorf("Has(%v) = %v, want %v", tt.codes, got, tt.want)
			}
		})
	}
}

// TestClasses checks each classifier against each code. Every code is
// wrapped, then joined after an unrelated SQLSTATE error, so that the
// classifiers must walk the whole tree.
func TestClasses(t *testing.T) {
	classes := map[string]func(error) bool{
		"IsRetryable":            pgerr.IsRetryable,
		"IsSerializationFailure": pgerr.IsSerializationFailure,
		"IsDeadlock":             pgerr.IsDeadlock,
		"IsUniqueViolation":      pgerr.IsUniqueViolation,
		"IsLockNotAvailable":     pgerr.IsLockNotAvailable,
		"IsCockroachRetryLegacy": pgerr.IsCockroachRetryLegacy,
		"IsAmbiguousCommit":      pgerr.IsAmbiguousCommit,
	}
	// want lists, for each code, the classes that accept it.
	want := map[string][]string{
		pgerr.SerializationFailure:         {"IsRetryable", "IsSerializationFailure"},
		pgerr.DeadlockDetected:             {"IsRetryable", "IsDeadlock"},
		pgerr.UniqueViolation:              {"IsUniqueViolation"},
		pgerr.ExclusionViolation:           {"IsUniqueViolation"},
		pgerr.LockNotAvailable:             {"IsLockNotAvailable"},
		pgerr.CockroachRetryLegacy:         {"IsCockroachRetryLegacy"},
		pgerr.StatementCompletionUnknown:   {"IsAmbiguousCommit"},
		pgerr.TransactionResolutionUnknown: {"IsAmbiguousCommit"},
		pgerr.QueryCanceled:                nil,
		pgerr.AdminShutdown:                nil,
		pgerr.CrashShutdown:                nil,
		pgerr.CannotConnectNow:             nil,
		"40000":                            nil, // transaction_rollback
		"40002":                            nil, // transaction_integrity_constraint_violation
		"23503":                            nil, // foreign_key_violation
		"42P01":                            nil, // undefined_table
	}
	for code, accepted := range want {
		for name, is := range classes {
			expect := slices.Contains(accepted, name)
			errs := map[string]error{
				"pgconn":         errors.Join(pg("42P01"), fmt.Errorf("commit: %w", pg(code))),
				"local type":     errors.Join(&stateErr{"42P01"}, fmt.Errorf("commit: %w", &stateErr{code})),
				"double wrapped": fmt.Errorf("a: %w", fmt.Errorf("b: %w", pg(code))),
			}
			for shape, err := range errs {
				t.Run(name+"/"+code+"/"+shape, func(t *testing.T) {
					if got := is(err); got != expect {
						t.Errorf("%s(%v) = %v, want %v", name, err, got, expect)
					}
				})
			}
		}
	}
	for name, is := range classes {
		for shape, err := range map[string]error{"nil": nil, "plain": errors.New("40001"), "typed nil": fmt.Errorf("x: %w", (*pgconn.PgError)(nil))} {
			t.Run(name+"/"+shape, func(t *testing.T) {
				if is(err) {
					t.Errorf("%s(%v) = true, want false", name, err)
				}
			})
		}
	}
}

// pqLike has the shape of lib/pq's *pq.Error: a Routine field beside its
// SQLState method.
type pqLike struct {
	Code    string
	Routine string
}

func (e *pqLike) Error() string    { return "pq-like " + e.Code }
func (e *pqLike) SQLState() string { return e.Code }

// TestIsLockTimeout tells lock_timeout's 55P03 (raised in ProcessInterrupts,
// as the server reports it; the real server is checked in the integration
// tests) from NOWAIT's (raised where the lock was refused).
func TestIsLockTimeout(t *testing.T) {
	timeout := &pgconn.PgError{Code: "55P03", Routine: "ProcessInterrupts"}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"pgconn lock timeout", timeout, true},
		{"wrapped and joined", errors.Join(pg("42P01"), fmt.Errorf("update: %w", timeout)), true},
		{"pq-like lock timeout", fmt.Errorf("x: %w", &pqLike{Code: "55P03", Routine: "ProcessInterrupts"}), true},
		{"NOWAIT on a row", &pgconn.PgError{Code: "55P03", Routine: "heap_lock_tuple"}, false},
		{"NOWAIT on a table", &pgconn.PgError{Code: "55P03", Routine: "RangeVarGetRelidExtended"}, false},
		{"no routine", pg("55P03"), false},
		{"statement timeout", &pgconn.PgError{Code: "57014", Routine: "ProcessInterrupts"}, false},
		{"no Routine field", &stateErr{"55P03"}, false},
		{"value receiver without field", valueStateErr("55P03"), false},
		{"As method without field", &asErr{"55P03"}, false},
		{"nil", nil, false},
		{"typed nil", fmt.Errorf("x: %w", (*pgconn.PgError)(nil)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pgerr.IsLockTimeout(tt.err); got != tt.want {
				t.Errorf("IsLockTimeout(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
