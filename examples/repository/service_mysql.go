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
	db   *sql.DB
	q    *mysqlstore.Queries
	opts []txretry.Option
}

// NewMySQLService returns the service over db; opts are given to every
// RunInTx call after the service's own (the isolation level, an observer).
func NewMySQLService(db *sql.DB, opts ...txretry.Option) *MySQLService {
	return &MySQLService{db: db, q: mysqlstore.New(db), opts: opts}
}

// Setup implements Service.
func (s *MySQLService) Setup(ctx context.Context, sku string, stock int64) error {
	if err := createTables(ctx, mysqlSchema, execOn(s.db)); err != nil {
		return err
	}
	return s.q.CreateProduct(ctx, mysqlstore.CreateProductParams{Sku: sku, Name: "Widget", Stock: stock})
}

// PlaceOrder implements Service. Under SERIALIZABLE, InnoDB turns
// GetProduct's plain SELECT into a locking read (a shared lock on the row);
// two orders that read the same stock then both wait to write it, and
// InnoDB aborts one of them as a deadlock victim (error 1213), which
// txretry runs again.
func (s *MySQLService) PlaceOrder(ctx context.Context, customer, sku string, quantity int64) (Order, error) {
	order := Order{Customer: customer, Sku: sku, Quantity: quantity}
	err := txretry.RunInTx(ctx, s.db, func(ctx context.Context, tx *sql.Tx) error {
		q := s.q.WithTx(tx)
		p, err := q.GetProduct(ctx, sku)
		if err != nil {
			return err
		}
		if p.Stock < quantity {
			return ErrOutOfStock
		}
		if err := q.UpdateStock(ctx, mysqlstore.UpdateStockParams{Sku: sku, Stock: p.Stock - quantity}); err != nil {
			return err
		}
		// MySQL has no RETURNING: CreateOrder (:execlastid) returns the
		// new row's AUTO_INCREMENT id.
		order.ID, err = q.CreateOrder(ctx, mysqlstore.CreateOrderParams{Customer: customer, Sku: sku, Quantity: quantity})
		return err
	}, append([]txretry.Option{txretry.WithLabel("place order")}, s.opts...)...)
	if err != nil {
		return Order{}, err
	}
	return order, nil
}

// Stock implements Service.
func (s *MySQLService) Stock(ctx context.Context, sku string) (stock, ordered int64, err error) {
	return stockOf(ctx, sku, s.q.GetProduct, s.q.OrderedQuantity)
}

// Orders implements Service.
func (s *MySQLService) Orders(ctx context.Context, customer string) ([]Order, error) {
	orders, err := s.q.ListOrdersByCustomer(ctx, customer)
	return convertOrders(orders), err
}
