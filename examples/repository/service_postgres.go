package main

import (
	"context"
	"database/sql"

	"github.com/txretry/txretry/examples/repository/store/pgstore"
	"github.com/txretry/txretry/txretry"
)

// PostgresService is the Service on PostgreSQL through database/sql (pgx's
// stdlib driver), over package pgstore.
type PostgresService struct {
	db     *sql.DB
	events *Publisher
	opts   []txretry.Option
}

// NewPostgresService returns the service over db, publishing to events;
// opts are given to every RunInTx call after the service's own (the
// isolation level, an observer).
func NewPostgresService(db *sql.DB, events *Publisher, opts ...txretry.Option) *PostgresService {
	return &PostgresService{db: db, events: events, opts: opts}
}

// queries returns the Queries for ctx: on the transaction of the RunInTx
// call on s.db that ctx is in, else on s.db itself. Every repository method
// gets its Queries here, so that it runs in the caller's transaction when
// there is one, and alone when there is none.
func (s *PostgresService) queries(ctx context.Context) *pgstore.Queries {
	return pgstore.New(txretry.TxOrDB(ctx, s.db))
}

// Setup implements Service.
func (s *PostgresService) Setup(ctx context.Context, sku string, stock int64) error {
	if err := createTables(ctx, postgresSchema, execOn(s.db)); err != nil {
		return err
	}
	return s.queries(ctx).CreateProduct(ctx, pgstore.CreateProductParams{Sku: sku, Name: "Widget", Stock: stock})
}

// PlaceOrder implements Service.
func (s *PostgresService) PlaceOrder(ctx context.Context, customer, sku string, quantity int64) (Order, error) {
	var order Order
	err := txretry.RunInTx(ctx, s.db, func(ctx context.Context, _ *sql.Tx) error {
		// The repository methods find the transaction in ctx: the order
		// they record is rolled back if reserveStock refuses it.
		var err error
		if order, err = s.recordOrder(ctx, customer, sku, quantity); err != nil {
			return err
		}
		// Not published here: this attempt may yet be rolled back
		// (reserveStock refuses, or a conflict has the call retried). The
		// hook runs once the call's COMMIT succeeded, and an attempt's
		// hooks are dropped with it.
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
// ErrOutOfStock.
func (s *PostgresService) reserveStock(ctx context.Context, sku string, quantity int64) error {
	q := s.queries(ctx)
	p, err := q.GetProduct(ctx, sku)
	if err != nil {
		return err
	}
	if p.Stock < quantity {
		return ErrOutOfStock // a business error: returned as is, not retried
	}
	// Read, then write the computed value: the pattern that loses
	// updates below SERIALIZABLE (two orders read 10, both write 9).
	return q.UpdateStock(ctx, pgstore.UpdateStockParams{Sku: sku, Stock: p.Stock - quantity})
}

// recordOrder records an order and returns it.
func (s *PostgresService) recordOrder(ctx context.Context, customer, sku string, quantity int64) (Order, error) {
	order, err := s.queries(ctx).CreateOrder(ctx, pgstore.CreateOrderParams{Customer: customer, Sku: sku, Quantity: quantity})
	return Order(order), err
}

// Stock implements Service.
func (s *PostgresService) Stock(ctx context.Context, sku string) (stock, ordered int64, err error) {
	q := s.queries(ctx)
	return stockOf(ctx, sku, q.GetProduct, q.OrderedQuantity)
}

// Orders implements Service.
func (s *PostgresService) Orders(ctx context.Context, customer string) ([]Order, error) {
	orders, err := s.queries(ctx).ListOrdersByCustomer(ctx, customer)
	return convertOrders(orders), err
}
