package adapters

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/txretry/txretry/txretry"
)

// TestAfterCommit, for each library: the hooks of a retried attempt are
// dropped; those of the committing attempt, its nested call's (joined
// through the library's RunInTx) included, run once, in order, after the
// commit is visible; a failed call runs none.
func TestAfterCommit(t *testing.T) {
	forEach(t, func(t *testing.T, s *subject) {
		s.setup(t, "CREATE TABLE items (id INT PRIMARY KEY)")
		errAgain := errors.New("again") // retried by the classifier below
		var ran []string
		hook := func(name string) func(context.Context) {
			return func(context.Context) {
				ran = append(ran, name)
				if n := s.count(t, "SELECT COUNT(*) FROM items"); n != 1 {
					t.Errorf("hook %s: %d committed rows visible, want 1", name, n)
				}
			}
		}
		err := s.run(context.Background(), func(ctx context.Context, q txq) error {
			n := txretry.Attempt(ctx)
			txretry.AfterCommit(ctx, hook(fmt.Sprint("outer", n)))
			if err := q.exec(ctx, "INSERT INTO items VALUES (1)"); err != nil {
				return err
			}
			if err := q.nested(ctx, func(ctx context.Context, q txq) error {
				txretry.AfterCommit(ctx, hook(fmt.Sprint("nested", n)))
				return nil
			}); err != nil {
				return err
			}
			if n == 1 {
				return errAgain
			}
			return nil
		}, txretry.WithClassifier(func(err error) bool { return errors.Is(err, errAgain) }))
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"outer2", "nested2"}; !slices.Equal(ran, want) {
			t.Fatalf("hooks ran %q, want %q", ran, want)
		}

		ran = nil
		errRefused := errors.New("refused")
		err = s.run(context.Background(), func(ctx context.Context, q txq) error {
			txretry.AfterCommit(ctx, hook("failed"))
			if err := q.exec(ctx, "INSERT INTO items VALUES (2)"); err != nil {
				return err
			}
			return errRefused
		})
		if !errors.Is(err, errRefused) || len(ran) != 0 {
			t.Fatalf("err = %v, hooks ran %q; want the error and none", err, ran)
		}
	})
}
