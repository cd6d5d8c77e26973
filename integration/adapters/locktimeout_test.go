package adapters

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
)

// lockTimeoutQuery reads the session's lock wait bound as an integer:
// PostgreSQL's lock_timeout in milliseconds (pg_settings shows SET LOCAL),
// InnoDB's innodb_lock_wait_timeout in seconds.
func lockTimeoutQuery(pg bool) string {
	if pg {
		return "SELECT CAST(setting AS BIGINT) FROM pg_settings WHERE name = 'lock_timeout'"
	}
	return "SELECT CAST(@@innodb_lock_wait_timeout AS SIGNED)"
}

// Each library applies WithLockTimeout as txretry.RunInTx does: on
// PostgreSQL through pgx's stdlib driver, SET LOCAL lock_timeout in each
// SERIALIZABLE attempt, whose lock timeouts (55P03) are retried; on MySQL
// and MariaDB nothing; through bun's own driver, whose database the
// adapter cannot tell, the explicit option is refused.
func TestLockTimeoutApplied(t *testing.T) {
	forEach(t, func(t *testing.T, s *subject) {
		s.setup(t, "CREATE TABLE acct (id INT PRIMARY KEY, v INT NOT NULL)", "INSERT INTO acct VALUES (1, 100)")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		serializable := txretry.WithIsolation(sql.LevelSerializable)
		read := func(opts ...txretry.Option) (int64, error) {
			var v int64
			err := s.run(ctx, func(ctx context.Context, q txq) (err error) {
				v, err = q.one(ctx, lockTimeoutQuery(s.pg))
				return err
			}, opts...)
			return v, err
		}
		var session int64
		if err := s.direct.QueryRow(lockTimeoutQuery(s.pg)).Scan(&session); err != nil {
			t.Fatal(err)
		}
		got, err := read(serializable, txretry.WithLockTimeout(20*time.Millisecond))
		switch {
		case strings.HasPrefix(s.name, "bun-pgdriver"):
			if !errors.Is(err, txretry.ErrInvalidOption) {
				t.Fatalf("WithLockTimeout through bun's pgdriver: %v, want ErrInvalidOption", err)
			}
			return
		case err != nil:
			t.Fatal(err)
		case s.pg && got != 20:
			t.Fatalf("lock_timeout = %d ms in the attempt, want 20", got)
		case !s.pg && got != session:
			t.Fatalf("innodb_lock_wait_timeout = %d s in the attempt, want the session's %d", got, session)
		}
		if got, err := read(txretry.WithIsolation(sql.LevelReadCommitted), txretry.WithLockTimeout(20*time.Millisecond)); err != nil || s.pg && got != 0 {
			t.Fatalf("lock_timeout at READ COMMITTED = %d ms (%v), want 0", got, err)
		}
		if !s.pg {
			return
		}
		// A row held by another transaction: the call's lock waits end
		// after 20 ms, then 40, then 80 (55P03, retried); the holder lets
		// go after the third, and the call commits.
		holder, err := s.direct.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = holder.Rollback() }()
		if _, err := holder.ExecContext(ctx, "UPDATE acct SET v = v WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		var seen codes
		release := txretry.WithObserver(txretry.ObserverFunc(func(_ context.Context, e txretry.Event) {
			if e.Kind == txretry.AttemptFailed && e.Attempt == 3 {
				_ = holder.Rollback()
			}
		}))
		err = s.run(ctx, func(ctx context.Context, q txq) error {
			return q.exec(ctx, "UPDATE acct SET v = v + 1 WHERE id = ?", 1)
		}, serializable, txretry.WithLockTimeout(20*time.Millisecond), seen.option(), release)
		if err != nil {
			t.Fatalf("RunInTx behind a held row: %v", err)
		}
		if len(seen.all) != 3 || !seen.only("55P03") {
			t.Errorf("failed attempts' codes %v, want three lock timeouts (55P03)", seen.all)
		}
		if n := s.count(t, "SELECT v FROM acct WHERE id = 1"); n != 101 {
			t.Errorf("v = %d, want 101", n)
		}
	})
}

// Without the option, the pool's contention manager arms DefaultLockTimeout
// for SERIALIZABLE calls once an attempt of 50 ms or more was lost to a
// conflict, as for txretry.RunInTx: the call's next attempt and later
// calls get it. Through bun's own driver it stays unset (best effort).
func TestLockTimeoutArmed(t *testing.T) {
	forEach(t, func(t *testing.T, s *subject) {
		if !s.pg {
			return // MySQL and MariaDB find deadlocks as they form: nothing to arm
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		serializable := txretry.WithIsolation(sql.LevelSerializable)
		var got []int64
		err := s.run(ctx, func(ctx context.Context, q txq) error {
			v, err := q.one(ctx, lockTimeoutQuery(true))
			if err != nil {
				return err
			}
			got = append(got, v)
			if len(got) == 1 { // a conflict that cost 50 ms
				time.Sleep(60 * time.Millisecond)
				return q.exec(ctx, "DO $$ BEGIN RAISE EXCEPTION 'a lost attempt' USING ERRCODE = '40001'; END $$")
			}
			return nil
		}, serializable)
		if err != nil {
			t.Fatal(err)
		}
		want := []int64{0, txretry.DefaultLockTimeout.Milliseconds()}
		if strings.HasPrefix(s.name, "bun-pgdriver") {
			want = []int64{0, 0}
		}
		if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
			t.Errorf("lock_timeout in attempts 1 and 2 = %v ms, want %v", got, want)
		}
	})
}
