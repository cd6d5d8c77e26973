package pgerr_test

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txretry/txretry/pgerr"
)

func ExampleIsRetryable() {
	// What pgx returns when a SERIALIZABLE transaction loses a conflict,
	// wrapped by the application.
	serialization := fmt.Errorf("transfer: %w", &pgconn.PgError{
		Code:    pgerr.SerializationFailure,
		Message: "could not serialize access due to read/write dependencies among transactions",
	})
	// A failed rollback joined with the deadlock that caused it.
	deadlock := errors.Join(errors.New("rollback: conn closed"), &pgconn.PgError{Code: pgerr.DeadlockDetected})
	// A genuine duplicate key is not retried by default.
	duplicate := &pgconn.PgError{Code: pgerr.UniqueViolation}

	fmt.Println(pgerr.IsRetryable(serialization))
	fmt.Println(pgerr.IsRetryable(deadlock))
	fmt.Println(pgerr.IsRetryable(duplicate))
	fmt.Println(pgerr.IsRetryable(nil))
	// Output:
	// true
	// true
	// false
	// false
}

func ExampleSQLState() {
	err := fmt.Errorf("insert order: %w", &pgconn.PgError{Code: pgerr.UniqueViolation})

	fmt.Printf("%q\n", pgerr.SQLState(err))
	fmt.Printf("%q\n", pgerr.SQLState(errors.New("no database involved")))
	// Output:
	// "23505"
	// ""
}

func ExampleHas() {
	// Has walks the whole tree, so a join finds the second code as well.
	err := errors.Join(
		&pgconn.PgError{Code: "42P01"}, // undefined_table
		&pgconn.PgError{Code: pgerr.LockNotAvailable},
	)

	fmt.Println(pgerr.Has(err, pgerr.LockNotAvailable))
	fmt.Println(pgerr.Has(err, pgerr.SerializationFailure, pgerr.DeadlockDetected))
	// Output:
	// true
	// false
}

func ExampleIsUniqueViolation() {
	// The opt-in classes are plain func(error) bool values, so a caller can
	// combine them with the default class.
	classes := []func(error) bool{pgerr.IsRetryable, pgerr.IsUniqueViolation}
	retry := func(err error) bool {
		for _, is := range classes {
			if is(err) {
				return true
			}
		}
		return false
	}

	fmt.Println(retry(&pgconn.PgError{Code: pgerr.UniqueViolation}))
	fmt.Println(retry(&pgconn.PgError{Code: pgerr.ExclusionViolation}))
	fmt.Println(retry(&pgconn.PgError{Code: "23503"})) // foreign_key_violation
	// Output:
	// true
	// true
	// false
}

func ExampleIsAmbiguousCommit() {
	// CockroachDB reports a commit whose outcome it does not know with 40003.
	err := fmt.Errorf("commit: %w", &pgconn.PgError{
		Code:    pgerr.StatementCompletionUnknown,
		Message: "result is ambiguous",
	})

	fmt.Println(pgerr.IsAmbiguousCommit(err))
	fmt.Println(pgerr.IsRetryable(err))
	// Output:
	// true
	// false
}
