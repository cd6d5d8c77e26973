package main

import (
	"context"
	"database/sql"

	"github.com/txretry/txretry/examples/repository/store/mysqlstore"
	"github.com/txretry/txretry/txretry"
)

// MySQLService is the Service on MySQL or MariaDB through database/sql
// (go-sql-driver/mysql), over package mysqlstore.
type MySQLService struct {
	db     *sql.DB
	events *Publisher
	opts   []txretry.Option
}

// NewMySQLService returns the service over db, publishing to events; opts
// are given to every RunInTx call after the service's own (the isolation
// level, an observer).
func NewMySQLService(db *sql.DB, events *Publisher, opts ...txretry.Option) *MySQLService {
	return &MySQLService{db: db, events: events, opts: opts}
}

// queries returns the Queries for ctx: on the transaction of the RunInTx
// call on s.db that ctx is in, else on s.db itself.
func (s *MySQLService) queries(ctx context.Context) *mysqlstore.Queries {
	return mysqlstore.New(txretry.TxOrDB(ctx, s.db))
}

// Setup implements Service.
func (s *MySQLService) Setup(ctx context.Context, sku string, stock int64) error {
	if err := createTables(ctx, mysqlSchema, execOn(s.db)); err != nil {
		return err
	}
	return s.queries(ctx).CreateProduct(ctx, mysqlstore.CreateProductParams{Sku: sku, Name: "Widget", Stock: stock})
}

// PlaceOrder implements Service.
func (s *MySQLService) PlaceOrder(ctx context.Context, customer, sku string, quantity int64) (Order, error) {
	var order Order
	err := txretry.RunInTx(ctx, s.db, func(ctx context.Context, _ *sql.Tx) error {
		var err error
		if order, err = s.recordOrder(ctx, customer, sku, quantity); err != nil {
			return err
		}
		// Published once the call committed, never by an attempt rolled back.
		placed := OrderPlaced{Order: order, Attempt: txretry.Attempt(ctx)}
		txretry.AfterCommit(ctx, func(context.Context) { s.events.Publish(placed) })
		return s.reserveStock(ctx, sku, quantity)
	}, append([]txretry.Option{txretry.WithLabel("place order")}, s.opts...)...)
	if err != nil {
		return Order{}, err
	}
	return order, nil
}

// reserveStock takes quantity units of sku from the stock, or returns
// ErrOutOfStock. Under SERIALIZABLE, InnoDB turns GetProduct's plain SELECT
// into a locking read (a shared lock on the row); two orders that read the
// same stock then both wait to write it, and InnoDB aborts one of them as a
// deadlock victim (error 1213), which txretry runs again.
func (s *MySQLService) reserveStock(ctx context.Context, sku string, quantity int64) error {
	q := s.queries(ctx)
	p, err := q.GetProduct(ctx, sku)
	if err != nil {
		return err
	}
	if p.Stock < quantity {
		return ErrOutOfStock
	}
	return q.UpdateStock(ctx, mysqlstore.UpdateStockParams{Sku: sku, Stock: p.Stock - quantity})
}

// recordOrder records an order and returns it. MySQL has no RETURNING:
// CreateOrder (:execlastid) returns the new row's AUTO_INCREMENT id.
func (s *MySQLService) recordOrder(ctx context.Context, customer, sku string, quantity int64) (Order, error) {
	id, err := s.queries(ctx).CreateOrder(ctx, mysqlstore.CreateOrderParams{Customer: customer, Sku: sku, Quantity: quantity})
	return Order{ID: id, Customer: customer, Sku: sku, Quantity: quantity}, err
}

// Stock implements Service.
func (s *MySQLService) Stock(ctx context.Context, sku string) (stock, ordered int64, err error) {
	q := s.queries(ctx)
	return stockOf(ctx, sku, q.GetProduct, q.OrderedQuantity)
}

// Orders implements Service.
func (s *MySQLService) Orders(ctx context.Context, customer string) ([]Order, error) {
	orders, err := s.queries(ctx).ListOrdersByCustomer(ctx, customer)
	return convertOrders(orders), err
}
