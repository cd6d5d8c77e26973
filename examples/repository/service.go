package main

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"

	"github.com/txretry/txretry/examples/repository/store"
	"github.com/txretry/txretry/txretry"
)

// schema creates the tables; it is also sqlc's input.
//
//go:embed store/schema.sql
var schema string

// ErrOutOfStock refuses an order for more than the stock.
var ErrOutOfStock = errors.New("out of stock")

// Service places orders.
type Service struct {
	db   *sql.DB
	q    *store.Queries
	opts []txretry.Option
}

// NewService returns the service over db; opts are given to every RunInTx
// call after the service's own (the isolation level, an observer).
func NewService(db *sql.DB, opts ...txretry.Option) *Service {
	return &Service{db: db, q: store.New(db), opts: opts}
}

// Setup drops and creates the tables and adds a product with stock units.
func (s *Service) Setup(ctx context.Context, sku string, stock int64) error {
	for _, stmt := range []string{"DROP TABLE IF EXISTS orders", "DROP TABLE IF EXISTS products", schema} {
		if _, err := s.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("set up tables: %w", err)
		}
	}
	return s.q.CreateProduct(ctx, store.CreateProductParams{Sku: sku, Name: "Widget", Stock: stock})
}

// PlaceOrder orders quantity units of sku for customer: it reads the stock,
// refuses the order if the stock is short, else writes the new stock and
// records the order, all in one transaction that txretry runs again when
// the database aborts it.
func (s *Service) PlaceOrder(ctx context.Context, customer, sku string, quantity int64) (store.Order, error) {
	var order store.Order
	err := txretry.RunInTx(ctx, s.db, func(ctx context.Context, tx *sql.Tx) error {
		q := s.q.WithTx(tx)
		p, err := q.GetProduct(ctx, sku)
		if err != nil {
			return err
		}
		if p.Stock < quantity {
			return ErrOutOfStock
		}
		// Read, then write the computed value: the pattern that loses
		// updates below SERIALIZABLE (two orders read 10, both write 9).
		if err := q.UpdateStock(ctx, store.UpdateStockParams{Sku: sku, Stock: p.Stock - quantity}); err != nil {
			return err
		}
		order, err = q.CreateOrder(ctx, store.CreateOrderParams{Customer: customer, Sku: sku, Quantity: quantity})
		return err
	}, append([]txretry.Option{txretry.WithLabel("place order")}, s.opts...)...)
	return order, err
}

// Stock returns the stock of sku and the units ordered of it, outside any
// transaction.
func (s *Service) Stock(ctx context.Context, sku string) (stock, ordered int64, err error) {
	p, err := s.q.GetProduct(ctx, sku)
	if err != nil {
		return 0, 0, err
	}
	ordered, err = s.q.OrderedQuantity(ctx, sku)
	return p.Stock, ordered, err
}

// Orders returns a customer's orders.
func (s *Service) Orders(ctx context.Context, customer string) ([]store.Order, error) {
	return s.q.ListOrdersByCustomer(ctx, customer)
}
