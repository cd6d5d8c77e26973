package main

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txretry/txretry/examples/repository/store/pgxstore"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/pgxretry"
)

// PgxService is the Service on PostgreSQL through pgx natively, over
// package pgxstore (sqlc's sql_package pgx/v5): pgxretry.TxOrDB gives its
// repository methods the pgx.Tx of the pgxretry.RunInTx call they run in.
type PgxService struct {
	pool   *pgxpool.Pool
	events *Publisher
	opts   []txretry.Option
}

// NewPgxService returns the service over pool, publishing to events; opts
// are given to every RunInTx call after the service's own (the isolation
// level, an observer).
func NewPgxService(pool *pgxpool.Pool, events *Publisher, opts ...txretry.Option) *PgxService {
	return &PgxService{pool: pool, events: events, opts: opts}
}

// queries returns the Queries for ctx: on the transaction of the RunInTx
// call on s.pool that ctx is in, else on s.pool itself.
func (s *PgxService) queries(ctx context.Context) *pgxstore.Queries {
	return pgxstore.New(pgxretry.TxOrDB(ctx, s.pool))
}

// Setup implements Service.
func (s *PgxService) Setup(ctx context.Context, sku string, stock int64) error {
	err := createTables(ctx, postgresSchema, func(ctx context.Context, stmt string) error {
		_, err := s.pool.Exec(ctx, stmt)
		return err
	})
	if err != nil {
		return err
	}
	return s.queries(ctx).CreateProduct(ctx, pgxstore.CreateProductParams{Sku: sku, Name: "Widget", Stock: stock})
}

// PlaceOrder implements Service.
func (s *PgxService) PlaceOrder(ctx context.Context, customer, sku string, quantity int64) (Order, error) {
	var order Order
	err := pgxretry.RunInTx(ctx, s.pool, func(ctx context.Context, _ pgx.Tx) error {
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
// ErrOutOfStock.
func (s *PgxService) reserveStock(ctx context.Context, sku string, quantity int64) error {
	q := s.queries(ctx)
	p, err := q.GetProduct(ctx, sku)
	if err != nil {
		return err
	}
	if p.Stock < quantity {
		return ErrOutOfStock
	}
	return q.UpdateStock(ctx, pgxstore.UpdateStockParams{Sku: sku, Stock: p.Stock - quantity})
}

// recordOrder records an order and returns it.
func (s *PgxService) recordOrder(ctx context.Context, customer, sku string, quantity int64) (Order, error) {
	order, err := s.queries(ctx).CreateOrder(ctx, pgxstore.CreateOrderParams{Customer: customer, Sku: sku, Quantity: quantity})
	return Order(order), err
}

// Stock implements Service.
func (s *PgxService) Stock(ctx context.Context, sku string) (stock, ordered int64, err error) {
	q := s.queries(ctx)
	return stockOf(ctx, sku, q.GetProduct, q.OrderedQuantity)
}

// Orders implements Service.
func (s *PgxService) Orders(ctx context.Context, customer string) ([]Order, error) {
	orders, err := s.queries(ctx).ListOrdersByCustomer(ctx, customer)
	return convertOrders(orders), err
}
