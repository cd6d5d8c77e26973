package main

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/txretry/txretry/examples/repository/store/mysqlstore"
	"github.com/txretry/txretry/examples/repository/store/pgstore"
	"github.com/txretry/txretry/examples/repository/store/pgxstore"
)

// The schemas create the tables; they are also sqlc's input.
var (
	//go:embed sql/postgresql/schema.sql
	postgresSchema string
	//go:embed sql/mysql/schema.sql
	mysqlSchema string
)

// dropTables drops the tables, in the order their foreign key needs, on
// every engine.
var dropTables = []string{"DROP TABLE IF EXISTS orders", "DROP TABLE IF EXISTS products"}

// ErrOutOfStock refuses an order for more than the stock.
var ErrOutOfStock = errors.New("out of stock")

// Order is an order, whichever store package read it (each has an Order of
// its own, with the same fields).
type Order struct {
	ID       int64
	Customer string
	Sku      string
	Quantity int64
}

// OrderPlaced is the event a service publishes once an order's transaction
// committed.
type OrderPlaced struct {
	Order Order
	// Attempt is the attempt that committed (txretry.Attempt): above 1
	// when the call was retried, and published once all the same.
	Attempt int
}

// Publisher is an in-memory event sink that stands in for a message
// broker's client: it keeps the events the services publish.
type Publisher struct {
	mu     sync.Mutex
	events []OrderPlaced
}

// Publish sends e.
func (p *Publisher) Publish(e OrderPlaced) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, e)
}

// Events returns the events published so far, in the order they were.
func (p *Publisher) Events() []OrderPlaced {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.events)
}

// Service places orders. There is one implementation per package that sqlc
// generates: PostgresService (pgstore, database/sql), PgxService (pgxstore,
// pgx native) and MySQLService (mysqlstore, database/sql). Their PlaceOrder
// methods are the same transaction, each in its stack's types.
type Service interface {
	// Setup drops and creates the tables and adds a product with stock
	// units.
	Setup(ctx context.Context, sku string, stock int64) error
	// PlaceOrder orders quantity units of sku for customer: two
	// repository methods, recordOrder and reserveStock (it reads the
	// stock, refuses the order if the stock is short, else writes the new
	// stock), in one transaction that txretry runs again when the database
	// aborts it. Once that transaction committed, it publishes an
	// OrderPlaced event, once, however many attempts the call took.
	PlaceOrder(ctx context.Context, customer, sku string, quantity int64) (Order, error)
	// Stock returns the stock of sku and the units ordered of it, outside
	// any transaction.
	Stock(ctx context.Context, sku string) (stock, ordered int64, err error)
	// Orders returns a customer's orders.
	Orders(ctx context.Context, customer string) ([]Order, error)
}

// setupStatements returns the statements that drop and create the tables
// of schema, one statement each (go-sql-driver/mysql runs one statement per
// call unless multiStatements is set).
func setupStatements(schema string) []string {
	stmts := slices.Clone(dropTables)
	for stmt := range strings.SplitSeq(schema, ";") {
		var lines []string
		for line := range strings.Lines(stmt) {
			if !strings.HasPrefix(strings.TrimSpace(line), "--") {
				lines = append(lines, line)
			}
		}
		if stmt := strings.TrimSpace(strings.Join(lines, "")); stmt != "" {
			stmts = append(stmts, stmt)
		}
	}
	return stmts
}

// convertOrders converts the orders of a store package, whose Order has the
// same fields as Order.
func convertOrders[O pgstore.Order | pgxstore.Order | mysqlstore.Order](orders []O) []Order {
	out := make([]Order, len(orders))
	for i, o := range orders {
		out[i] = Order(o)
	}
	return out
}

// createTables drops and creates the tables of schema, one statement per
// call of exec.
func createTables(ctx context.Context, schema string, exec func(ctx context.Context, stmt string) error) error {
	for _, stmt := range setupStatements(schema) {
		if err := exec(ctx, stmt); err != nil {
			return fmt.Errorf("set up tables: %w", err)
		}
	}
	return nil
}

// execOn is createTables's exec on a database/sql pool.
func execOn(db *sql.DB) func(ctx context.Context, stmt string) error {
	return func(ctx context.Context, stmt string) error {
		_, err := db.ExecContext(ctx, stmt)
		return err
	}
}

// product is a row of products, as each store package's Product has it.
type product struct {
	Sku   string
	Name  string
	Stock int64
}

// stockOf returns the stock of sku and the units ordered of it through a
// store package's GetProduct and OrderedQuantity.
func stockOf[P pgstore.Product | pgxstore.Product | mysqlstore.Product](ctx context.Context, sku string,
	get func(context.Context, string) (P, error), orderedQuantity func(context.Context, string) (int64, error)) (stock, ordered int64, err error) {
	p, err := get(ctx, sku)
	if err != nil {
		return 0, 0, err
	}
	ordered, err = orderedQuantity(ctx, sku)
	return product(p).Stock, ordered, err
}
