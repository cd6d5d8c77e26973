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
	db   *sql.DB
	q    *pgstore.Queries
	opts []txretry.Option
}

// NewPostgresService returns the service over db; opts are given to every
// RunInTx call after the service's own (the isolation level, an observer).
func NewPostgresService(db *sql.DB, opts ...txretry.Option) *PostgresService {
	return &PostgresService{db: db, q: pgstore.New(db), opts: opts}
}

// Setup implements Service.
func (s *PostgresService) Setup(ctx context.Context, sku string, stock int64) error {
	if err := createTables(ctx, postgresSchema, execOn(s.db)); err != nil {
		return err
	}
	return s.q.CreateProduct(ctx, pgstore.CreateProductParams{Sku: sku, Name: "Widget", Stock: stock})
}

// PlaceOrder implements Service.
func (s *PostgresService) PlaceOrder(ctx context.Context, customer, sku string, quantity int64) (Order, error) {
	var order pgstore.Order
	err := txretry.RunInTx(ctx, s.db, func(ctx context.Context, tx *sql.Tx) error {
		q := s.q.WithTx(tx) // every query of this attempt runs in its transaction
		p, err := q.GetProduct(ctx, sku)
		if err != nil {
			return err
		}
		if p.Stock < quantity {
			return ErrOutOfStock // a business error: returned as is, not retried
		}
		// Read, then write the computed value: the pattern that loses
		// updates below SERIALIZABLE (two orders read 10, both write 9).
		if err := q.UpdateStock(ctx, pgstore.UpdateStockParams{Sku: sku, Stock: p.Stock - quantity}); err != nil {
			return err
		}
		order, err = q.CreateOrder(ctx, pgstore.CreateOrderParams{Customer: customer, Sku: sku, Quantity: quantity})
		return err
	}, append([]txretry.Option{txretry.WithLabel("place order")}, s.opts...)...)
	if err != nil {
		return Order{}, err
	}
	return Order(order), nil
}

// Stock implements Service.
func (s *PostgresService) Stock(ctx context.Context, sku string) (stock, ordered int64, err error) {
	return stockOf(ctx, sku, s.q.GetProduct, s.q.OrderedQuantity)
}

// Orders implements Service.
func (s *PostgresService) Orders(ctx context.Context, customer string) ([]Order, error) {
	orders, err := s.q.ListOrdersByCustomer(ctx, customer)
	return convertOrders(orders), err
}
