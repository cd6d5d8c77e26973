package txretry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

func TestDescribe(t *testing.T) {
	secret := &fakedb.SQLStateError{Code: "23505", Message: "Key (email)=(alice@example.com) already exists"}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, "<nil>"},
		{"server error by code", secret, "SQLSTATE 23505 (fakedb.SQLStateError)"},
		{"wrapped server error", fmt.Errorf("insert user: %w", secret), "SQLSTATE 23505 (fakedb.SQLStateError)"},
		{"mysql", errMySQLDeadlock, "MySQL error 1213 (mysql.MySQLError)"},
		{"client error by text", io.ErrUnexpectedEOF, "unexpected EOF"},
		{"retry error says why", fmt.Errorf("transfer: %w", &txretry.RetryError{Attempts: 3, Reason: "attempt limit", Cause: txretry.ErrRetriesExhausted, Err: secret}),
			"txretry: stopped after 3 attempt(s) (attempt limit): SQLSTATE 23505 (fakedb.SQLStateError)"},
		{"uncertain", &txretry.CommitUncertainError{Attempts: 1, Err: io.ErrUnexpectedEOF},
			"txretry: commit outcome unknown after 1 attempt(s): unexpected EOF; no verifier configured"},
		{"uncertain with verifier error", &txretry.CommitUncertainError{Attempts: 2, Err: io.EOF, Verifier: "commit-marker", VerifyErr: context.DeadlineExceeded},
			"txretry: commit outcome unknown after 2 attempt(s): EOF; commit-marker verification: context deadline exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := txretry.Describe(tc.err); got != tc.want {
				t.Fatalf("Describe = %q, want %q", got, tc.want)
			}
		})
	}
	if !errors.Is(&txretry.CommitUncertainError{Err: io.EOF}, txretry.ErrCommitUncertain) {
		t.Fatal("CommitUncertainError must match ErrCommitUncertain")
	}
}

func TestErrorMessagesCarryCodesNotServerText(t *testing.T) {
	secret := &fakedb.SQLStateError{Code: "40001", Message: "Key (email)=(alice@example.com) conflicts"}
	f := newFixture(t, &fakedb.Driver{OnExec: failFirst(1000, secret)})
	var calls atomic.Int32
	err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts(txretry.WithMaxAttempts(2))...)
	if msg := err.Error(); strings.Contains(msg, "alice") || !strings.Contains(msg, "SQLSTATE 40001") {
		t.Fatalf("message %q: want the SQLSTATE and no server text", msg)
	}
}

// Describe of a typed nil error.
func TestDescribeTypedNil(t *testing.T) {
	var e *fakedb.SQLStateError
	err := noPanic(t, func() error { _ = txretry.Describe(e); return nil })
	if err != nil {
		t.Fatal(err)
	}
}
