package mysqlerr_test

import (
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"github.com/txretry/txretry/mysqlerr"
)

func ExampleIsRetryable() {
	// What go-sql-driver/mysql returns when InnoDB picks the transaction as
	// a deadlock victim, wrapped by the application.
	err := fmt.Errorf("transfer: %w", &mysql.MySQLError{
		Number:   mysqlerr.LockDeadlock,
		SQLState: [5]byte{'4', '0', '0', '0', '1'},
		Message:  "Deadlock found when trying to get lock; try restarting transaction",
	})
	// A lock wait timeout is opt-in, not retried by default.
	timeout := &mysql.MySQLError{Number: mysqlerr.LockWaitTimeout}

	fmt.Println(mysqlerr.IsRetryable(err))
	fmt.Println(mysqlerr.IsRetryable(timeout))
	fmt.Println(mysqlerr.IsLockWaitTimeout(timeout))
	fmt.Println(mysqlerr.IsRetryable(nil))
	// Output:
	// true
	// false
	// true
	// false
}

func ExampleNumber() {
	// Number walks the whole tree, including errors.Join.
	err := errors.Join(errors.New("rollback: bad connection"),
		fmt.Errorf("insert: %w", &mysql.MySQLError{Number: mysqlerr.DupEntry}))

	n, ok := mysqlerr.Number(err)
	fmt.Println(n, ok)
	n, ok = mysqlerr.Number(errors.New("no database involved"))
	fmt.Println(n, ok)
	// Output:
	// 1062 true
	// 0 false
}

func ExampleIsTiDBRetryable() {
	// The opt-in classes are plain func(error) bool values, so a caller can
	// combine them with the default class.
	classes := []func(error) bool{mysqlerr.IsRetryable, mysqlerr.IsTiDBRetryable}
	retry := func(err error) bool {
		for _, is := range classes {
			if is(err) {
				return true
			}
		}
		return false
	}

	fmt.Println(retry(&mysql.MySQLError{Number: mysqlerr.TiDBWriteConflict}))
	fmt.Println(retry(&mysql.MySQLError{Number: mysqlerr.LockDeadlock}))
	fmt.Println(retry(&mysql.MySQLError{Number: mysqlerr.ParseError}))
	// Output:
	// true
	// true
	// false
}
