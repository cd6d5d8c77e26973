package faultproxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// triggerCases are the faults a trigger applies to a statement other than
// COMMIT, and whether the server ran the statement.
var triggerCases = []struct {
	fault   Fault
	applied bool
}{
	{DropBeforeCommit, false},
	{DropAfterCommit, true},
	{DropMidReply, true},
}

func containsText(s string) func(string) bool {
	return func(text string) bool { return strings.Contains(strings.ToLower(text), s) }
}

// TestPostgresTrigger: a trigger breaks the connection at the Nth matching
// statement, not before (earlier matches and other statements go through),
// with the server having run the statement or not as the fault says; it
// fires once.
func TestPostgresTrigger(t *testing.T) {
	e := newPGEnv(t)
	p := startProxy(t, e.upstream, Postgres)
	cfg := e.proxyConfig(t, p)
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol // one request per Exec
	for _, tc := range triggerCases {
		t.Run(tc.fault.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			conn, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer closePgx(t, conn)
			before := p.Stats()
			fired := p.ArmAt(Trigger{Match: containsText("insert into " + e.table), Nth: 2, Fault: tc.fault})
			first, second := nextID(), nextID()
			if _, err := conn.Exec(ctx, e.insertSQL(), first); err != nil {
				t.Fatalf("first insert: %v", err)
			}
			if _, err := conn.Exec(ctx, "select 1"); err != nil || fired() {
				t.Fatalf("a statement that does not match: %v, fired %v", err, fired())
			}
			if _, err := conn.Exec(ctx, e.insertSQL(), second); err == nil {
				t.Fatal("second insert returned no error")
			}
			if !fired() || !e.exists(t, first) || e.exists(t, second) != tc.applied {
				t.Fatalf("fired %v, first applied %v, second applied %v (want %v)", fired(), e.exists(t, first), e.exists(t, second), tc.applied)
			}
			s := p.Stats()
			if s.Triggered != before.Triggered+1 || s.Faults[tc.fault] != before.Faults[tc.fault]+1 {
				t.Fatalf("Stats() = %+v, before %+v", s, before)
			}
		})
	}
}

// TestPostgresTriggerCountsParse: on the extended protocol a statement's
// Parse is a request of its own, and Disarm removes a trigger that has not
// fired.
func TestPostgresTriggerCountsParse(t *testing.T) {
	e := newPGEnv(t)
	p := startProxy(t, e.upstream, Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, e.proxyConfig(t, p)) // prepares each statement once
	if err != nil {
		t.Fatal(err)
	}
	defer closePgx(t, conn)
	never := p.ArmAt(Trigger{Match: containsText("insert into " + e.table), Nth: 3, Fault: DropBeforeCommit})
	id := nextID()
	if _, err := conn.Exec(ctx, e.insertSQL(), id); err != nil { // Parse, then Execute
		t.Fatal(err)
	}
	p.Disarm()
	if _, err := conn.Exec(ctx, e.insertSQL(), nextID()); err != nil || never() {
		t.Fatalf("after Disarm: %v, fired %v", err, never())
	}
	fired := p.ArmAt(Trigger{Match: containsText("select 42"), Fault: DropAfterCommit})
	if _, err := conn.Exec(ctx, "select 42 where $1::int > 0", 1); err == nil || !fired() {
		t.Fatalf("the Parse of a new statement: %v, fired %v", err, fired())
	}
}

// TestMySQLTrigger: a trigger matches a prepared statement's
// COM_STMT_EXECUTE by the text of its COM_STMT_PREPARE, and breaks the
// connection as the fault says.
func TestMySQLTrigger(t *testing.T) {
	e := newMyEnv(t)
	p := startProxy(t, e.cfg.Addr, MySQL)
	db := e.proxyDB(t, p, 0)
	insert := "insert into " + e.table + " (id) values (?)"
	for _, tc := range triggerCases {
		t.Run(tc.fault.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			stmt, err := conn.PrepareContext(ctx, insert) // request 1: COM_STMT_PREPARE
			if err != nil {
				t.Fatal(err)
			}
			defer stmt.Close()
			fired := p.ArmAt(Trigger{Match: containsText("insert into " + e.table), Nth: 2, Fault: tc.fault})
			first, second := nextID(), nextID()
			if _, err := stmt.ExecContext(ctx, first); err != nil { // match 1
				t.Fatalf("first insert: %v", err)
			}
			if _, err := stmt.ExecContext(ctx, second); err == nil { // match 2
				t.Fatal("second insert returned no error")
			}
			if !fired() || !e.exists(t, first) || e.exists(t, second) != tc.applied {
				t.Fatalf("fired %v, first applied %v, second applied %v (want %v)", fired(), e.exists(t, first), e.exists(t, second), tc.applied)
			}
		})
	}
}
