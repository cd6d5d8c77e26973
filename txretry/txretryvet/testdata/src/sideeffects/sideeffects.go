// Side effects that a retry repeats.
package sideeffects

import (
	"context"
	"database/sql"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/txretry/txretry/txretry"
)

// True cases.

func httpPost(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		resp, err := http.Post("http://mail.invalid/send", "text/plain", strings.NewReader("hi")) // want `http.Post in fn: it happens again on every retry.*txretry.AfterCommit`
		if err != nil {
			return err
		}
		return resp.Body.Close()
	})
}

func clientDo(ctx context.Context, db *sql.DB, c *http.Client, req *http.Request) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		resp, err := c.Do(req) // want `\(\*http.Client\).Do in fn`
		if err != nil {
			return err
		}
		return resp.Body.Close()
	})
}

func dial(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		conn, err := net.Dial("tcp", "127.0.0.1:25") // want `net.Dial in fn`
		if err != nil {
			return err
		}
		return conn.Close()
	})
}

func dialer(ctx context.Context, db *sql.DB, d *net.Dialer) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		conn, err := d.DialContext(ctx, "tcp", "127.0.0.1:25") // want `\(\*net.Dialer\).DialContext in fn`
		if err != nil {
			return err
		}
		return conn.Close()
	})
}

func send(ctx context.Context, db *sql.DB, events chan<- string) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		events <- "order placed" // want `send on a channel in fn`
		return nil
	})
}

func goroutine(ctx context.Context, db *sql.DB, notify func()) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		go notify() // want `go statement in fn`
		return nil
	})
}

func writeFile(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		return os.WriteFile("receipt.txt", []byte("paid"), 0o600) // want `os.WriteFile in fn`
	})
}

func fileWrite(ctx context.Context, db *sql.DB, f *os.File) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		_, err := f.WriteString("paid\n") // want `\(\*os.File\).WriteString in fn`
		return err
	})
}

func inAClosure(ctx context.Context, db *sql.DB, events chan<- string) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		publish := func(e string) {
			events <- e // want `send on a channel in fn`
		}
		publish("order placed")
		return nil
	})
}

// False cases.

func sendInTheHook(ctx context.Context, db *sql.DB, events chan<- string) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		txretry.AfterCommit(ctx, func(ctx context.Context) {
			events <- "order placed"
			go func() {}()
			resp, err := http.Get("http://mail.invalid/send")
			if err == nil {
				resp.Body.Close()
			}
		})
		return nil
	})
}

func sendOutsideFn(ctx context.Context, db *sql.DB, events chan<- string) error {
	if err := txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error { return nil }); err != nil {
		return err
	}
	events <- "order placed"
	return nil
}

func readFile(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		b, err := os.ReadFile("query.sql")
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, string(b))
		return err
	})
}

func newRequestOnly(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		_, err := http.NewRequestWithContext(ctx, "GET", "http://mail.invalid/", nil)
		return err
	})
}

func goOutsideFn(ctx context.Context, db *sql.DB) {
	go func() { _ = txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error { return nil }) }()
}
