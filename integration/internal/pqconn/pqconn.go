// Package pqconn opens lib/pq (github.com/lib/pq) database/sql handles for
// the integration tests, from the pgx configuration the tests already
// have, so that lib/pq runs in the same driver matrix as pgx's stdlib and
// go-sql-driver/mysql.
package pqconn

import (
	"bytes"
	"context"
	"database/sql"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lib/pq"
)

// DSN returns cfg (host, port, user, password, database, run-time
// parameters) as a lib/pq URL, without TLS.
func DSN(cfg *pgx.ConnConfig) string {
	q := url.Values{}
	for k, v := range cfg.RuntimeParams {
		q.Set(k, v) // lib/pq sends keys it does not know as run-time parameters
	}
	q.Set("sslmode", "disable")
	u := &url.URL{Scheme: "postgres", User: url.User(cfg.User),
		Host: net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), Path: "/" + cfg.Database, RawQuery: q.Encode()}
	if cfg.Password != "" {
		u.User = url.UserPassword(cfg.User, cfg.Password)
	}
	return u.String()
}

// Open opens a lib/pq handle on cfg. A readTimeout above zero bounds each
// read of the reply to a COMMIT, as go-sql-driver/mysql's readTimeout does
// for every read: lib/pq answers a context that ends during COMMIT only
// with a CancelRequest on another connection (which a network partition
// stops too) and keeps waiting for the reply. Other statements are not
// bounded: under a loaded -race run a connect or an INSERT took longer
// than the tests' 700 ms and failed with a bare i/o timeout.
func Open(cfg *pgx.ConnConfig, readTimeout time.Duration) (*sql.DB, error) {
	c, err := pq.NewConnector(DSN(cfg))
	if err != nil {
		return nil, err
	}
	if readTimeout > 0 {
		c.Dialer(dialer{readTimeout: readTimeout})
	}
	return sql.OpenDB(c), nil
}

// dialer dials connections whose reads time out (see Open).
type dialer struct {
	net.Dialer
	readTimeout time.Duration
}

func (d dialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

func (d dialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, network, address)
}

func (d dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := d.Dialer.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, readTimeout: d.readTimeout}, nil
}

// conn sets a read deadline before each read of a COMMIT's reply, and
// none before other reads.
type conn struct {
	net.Conn
	readTimeout time.Duration
	commit      bool // the last write was lib/pq's COMMIT
}

// commitQuery is the simple-protocol Query message lib/pq's Commit sends:
// 'Q', its length (4 + len("COMMIT") + 1), the text and a NUL.
var commitQuery = []byte("Q\x00\x00\x00\x0bCOMMIT\x00")

func (c *conn) Write(b []byte) (int, error) {
	c.commit = bytes.Equal(b, commitQuery)
	return c.Conn.Write(b)
}

func (c *conn) Read(b []byte) (int, error) {
	var deadline time.Time
	if c.commit {
		deadline = time.Now().Add(c.readTimeout)
	}
	if err := c.Conn.SetReadDeadline(deadline); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}
