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
// package pgxstore (sqlc's sql_package pgx/v5): pgxretry.RunInTx gives fn a
// pgx.Tx, and pgxstore's Queries.WithTx takes one.
type PgxService struct {
	pool *pgxpool.Pool
	q    *pgxstore.Queries
	opts []txretry.Option
}

// NewPgxService returns the service over pool; opts are given to every
// RunInTx call after the service's own (the isolation level, an observer).
func NewPgxService(pool *pgxpool.Pool, opts ...txretry.Option) *PgxService {
	return &PgxService{pool: pool, q: pgxstore.New(pool), opts: opts}
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
	return s.q.CreateProduct(ctx, pgxstore.CreateProductParams{Sku: sku, Name: "Widget", Stock: stock})
}

// PlaceOrder implements Service.
func (s *PgxService) PlaceOrder(ctx context.Context, customer, sku string, quantity int64) (Order, error) {
	var order pgxstore.Order
	err := pgxretry.RunInTx(ctx, s.pool, func(ctx context.Context, tx pgx.Tx) error {
		q := s.q.WithTx(tx)
		p, err := q.GetProduct(ctx, sku)
		if err != nil {
			return err
		}
		if p.Stock < quantity {
			return ErrOutOfStock
		}
		if err := q.UpdateStock(ctx, pgxstore.UpdateStockParams{Sku: sku, Stock: p.Stock - quantity}); err != nil {
			return err
		}
		order, err = q.CreateOrder(ctx, pgxstore.CreateOrderParams{Customer: customer, Sku: sku, Quantity: quantity})
		return err
	}, append([]txretry.Option{txretry.WithLabel("place order")}, s.opts...)...)
	if err != nil {
		return Order{}, err
	}
	return Order(order), nil
}

// Stock implements Service.
func (s *PgxService) Stock(ctx context.Context, sku string) (stock, ordered int64, err error) {
	return stockOf(ctx, sku, s.q.GetProduct, s.q.OrderedQuantity)
}

// Orders implements Service.
func (s *PgxService) Orders(ctx context.Context, customer string) ([]Order, error) {
	orders, err := s.q.ListOrdersByCustomer(ctx, customer)
	return convertOrders(orders), err
}
