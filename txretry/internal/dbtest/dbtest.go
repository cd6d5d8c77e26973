// Package dbtest gives the adapters' real-server tests a fresh database on
// each server whose DSN is set (TXRETRY_PG_DSN, TXRETRY_MYSQL_DSN): skipped
// without it, failed without it under CI=true.
package dbtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// Engine is one database server the tests run on.
type Engine struct {
	// Name is "postgres" or "mysql" (MySQL or MariaDB).
	Name string
	// Driver is the database/sql driver's name: "pgx" or "mysql".
	Driver string
	env    string
	// fresh names database name on the server at admin: its DSN and the
	// statement that drops it.
	fresh func(admin, name string) (dsn, drop string, err error)
}

var engines = []Engine{
	{Name: "postgres", env: "TXRETRY_PG_DSN", Driver: "pgx", fresh: func(admin, name string) (string, string, error) {
		u, err := url.Parse(admin)
		if err != nil {
			return "", "", errors.New("TXRETRY_PG_DSN is not a URL")
		}
		u.Path = "/" + name
		return u.String(), "DROP DATABASE " + name + " WITH (FORCE)", nil
	}},
	{Name: "mysql", env: "TXRETRY_MYSQL_DSN", Driver: "mysql", fresh: func(admin, name string) (string, string, error) {
		cfg, err := mysql.ParseDSN(admin)
		if err != nil {
			return "", "", err
		}
		cfg.DBName = name
		return cfg.FormatDSN(), "DROP DATABASE " + name, nil
	}},
}

// ForEach runs test, as a subtest named by the engine, on a fresh database
// (named prefix_ and a random suffix) of each server whose DSN is set, on a
// pool of 10 connections, and checks that the test left none in use.
func ForEach(t *testing.T, prefix string, test func(t *testing.T, e Engine, db *sql.DB)) {
	for _, e := range engines {
		t.Run(e.Name, func(t *testing.T) {
			admin := e.AdminDSN(t)
			var b [6]byte
			_, _ = rand.Read(b[:])
			name := prefix + "_" + hex.EncodeToString(b[:])
			dsn, drop, err := e.fresh(admin, name)
			if err != nil {
				t.Fatal(err)
			}
			adb, err := sql.Open(e.Driver, admin)
			if err != nil {
				t.Fatal(err)
			}
			defer adb.Close()
			if _, err := adb.Exec("CREATE DATABASE " + name); err != nil {
				t.Fatalf("create database: %v", err)
			}
			defer func() {
				if _, err := adb.Exec(drop); err != nil {
					t.Errorf("drop database: %v", err)
				}
			}()
			db, err := sql.Open(e.Driver, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(10)
			test(t, e, db)
			if n := db.Stats().InUse; n != 0 {
				t.Errorf("%d connection(s) still in use", n)
			}
		})
	}
}

// AdminDSN returns the DSN of e's server from its variable: the test is
// skipped without it, failed without it under CI=true.
func (e Engine) AdminDSN(t *testing.T) string {
	t.Helper()
	admin := os.Getenv(e.env)
	if admin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("set %s: CI runs the %s tests", e.env, e.Name)
		}
		t.Skipf("set %s to run the %s tests", e.env, e.Name)
	}
	return admin
}

// Postgres is the PostgreSQL engine, for a test that opens its own pool
// (pgxpool) on AdminDSN's server.
var Postgres = engines[0]

// OverlapsCommit checks an adapter's OverlapCommit
// (txretry.AdapterOverlapCommit) on e: true on MySQL and MariaDB, whose
// InnoDB queues a transaction behind a committing one's row locks; false
// on PostgreSQL.
func OverlapsCommit(t *testing.T, e Engine, overlap bool) {
	t.Helper()
	if want := e.Name == "mysql"; overlap != want {
		t.Errorf("OverlapCommit on %s: %v, want %v", e.Name, overlap, want)
	}
}

// Leases checks lease, an adapter's Lease (txretry.AdapterLease) on a pool
// of a real server: the lock of a key is held in the database until
// released, so that another lease of that key, here on another connection
// of the pool, waits until its context ends, while one of another key does
// not; once given back, the key is had again.
func Leases(t *testing.T, lease func(ctx context.Context, key string) (release func(), err error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	release, err := lease(ctx, "dbtest")
	if err != nil {
		t.Fatalf("lease: %v", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	second, err := lease(short, "dbtest")
	cancelShort()
	if err == nil {
		second()
		release()
		t.Fatal("a second lease of a held key was had")
	}
	other, err := lease(ctx, "dbtest-other")
	if err != nil {
		release()
		t.Fatalf("a lease of another key while one is held: %v", err)
	}
	other()
	release()
	again, err := lease(ctx, "dbtest")
	if err != nil {
		t.Fatalf("the key once given back: %v", err)
	}
	again()
}

// Pool is one connection pool of a real server, for LeasesWaitForBusyPool.
type Pool struct {
	// Hold takes one of the pool's connections until give is called.
	Hold func(ctx context.Context) (give func(), err error)
	// Lease is the adapter's Lease (txretry.AdapterLease) on this pool.
	Lease func(ctx context.Context, key string) (release func(), err error)
}

// LeasesWaitForBusyPool checks an adapter's Lease on pools that open(size)
// opens with at most size connections. On a pool of 2 whose connections
// are all held, a lease waits for one, within its context, and is had once
// one is given back, not before; the pool's leases never hold its last
// connection: a second lease on a pool of 2 is refused at once until the
// first is given back, and a lease on a pool of 1 is refused at once.
func LeasesWaitForBusyPool(t *testing.T, open func(t *testing.T, size int) Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	refusedAtOnce := func(what string, release func(), err error) {
		t.Helper()
		switch {
		case err == nil:
			release()
			t.Errorf("%s was had", what)
		case ctx.Err() != nil:
			t.Errorf("%s: %v after waiting out the context; want refused at once", what, err)
		}
	}

	p := open(t, 2)
	var busy [2]func()
	for i := range busy {
		give, err := p.Hold(ctx)
		if err != nil {
			t.Fatal(err)
		}
		busy[i] = give
	}
	var freed atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(50 * time.Millisecond)
		freed.Store(true)
		busy[0]()
	}()
	release, err := p.Lease(ctx, "dbtest-busy")
	<-done
	busy[1]()
	if err != nil {
		t.Fatalf("a lease on a busy pool: %v; want it had once a connection is free", err)
	}
	if !freed.Load() {
		t.Error("the lease was had before any connection was free")
	}
	second, err := p.Lease(ctx, "dbtest-busy-other")
	refusedAtOnce("a second lease holding the last connection of a pool of 2", second, err)
	release()
	second, err = p.Lease(ctx, "dbtest-busy-other")
	if err != nil {
		t.Fatalf("a lease once the other was given back: %v", err)
	}
	second()

	release, err = open(t, 1).Lease(ctx, "dbtest-busy")
	refusedAtOnce("a lease on a pool of one connection", release, err)
}
