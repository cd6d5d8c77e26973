package store

import (
	"context"
)

const createProduct = `-- name: CreateProduct :exec
INSERT INTO products (sku, name, stock) VALUES ($1, $2, $3)
`

// CreateProductParams are the arguments of CreateProduct.
type CreateProductParams struct {
	Sku   string
	Name  string
	Stock int64
}

// CreateProduct inserts a product.
func (q *Queries) CreateProduct(ctx context.Context, arg CreateProductParams) error {
	_, err := q.db.ExecContext(ctx, createProduct, arg.Sku, arg.Name, arg.Stock)
	return err
}

const getProduct = `-- name: GetProduct :one
SELECT sku, name, stock FROM products WHERE sku = $1
`

// GetProduct returns the product with the given SKU.
func (q *Queries) GetProduct(ctx context.Context, sku string) (Product, error) {
	row := q.db.QueryRowContext(ctx, getProduct, sku)
	var i Product
	err := row.Scan(&i.Sku, &i.Name, &i.Stock)
	return i, err
}

const updateStock = `-- name: UpdateStock :exec
UPDATE products SET stock = $2 WHERE sku = $1
`

// UpdateStockParams are the arguments of UpdateStock.
type UpdateStockParams struct {
	Sku   string
	Stock int64
}

// UpdateStock sets a product's stock.
func (q *Queries) UpdateStock(ctx context.Context, arg UpdateStockParams) error {
	_, err := q.db.ExecContext(ctx, updateStock, arg.Sku, arg.Stock)
	return err
}

const createOrder = `-- name: CreateOrder :one
INSERT INTO orders (customer, sku, quantity) VALUES ($1, $2, $3)
RETURNING id, customer, sku, quantity
`

// CreateOrderParams are the arguments of CreateOrder.
type CreateOrderParams struct {
	Customer string
	Sku      string
	Quantity int64
}

// CreateOrder inserts an order and returns it.
func (q *Queries) CreateOrder(ctx context.Context, arg CreateOrderParams) (Order, error) {
	row := q.db.QueryRowContext(ctx, createOrder, arg.Customer, arg.Sku, arg.Quantity)
	var i Order
	err := row.Scan(&i.ID, &i.Customer, &i.Sku, &i.Quantity)
	return i, err
}

const orderedQuantity = `-- name: OrderedQuantity :one
SELECT COALESCE(SUM(quantity), 0)::bigint AS total FROM orders WHERE sku = $1
`

// OrderedQuantity returns the units ordered of a product.
func (q *Queries) OrderedQuantity(ctx context.Context, sku string) (int64, error) {
	row := q.db.QueryRowContext(ctx, orderedQuantity, sku)
	var total int64
	err := row.Scan(&total)
	return total, err
}

const listOrdersByCustomer = `-- name: ListOrdersByCustomer :many
SELECT id, customer, sku, quantity FROM orders WHERE customer = $1 ORDER BY id
`

// ListOrdersByCustomer returns a customer's orders.
func (q *Queries) ListOrdersByCustomer(ctx context.Context, customer string) ([]Order, error) {
	rows, err := q.db.QueryContext(ctx, listOrdersByCustomer, customer)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var items []Order
	for rows.Next() {
		var i Order
		if err := rows.Scan(&i.ID, &i.Customer, &i.Sku, &i.Quantity); err != nil {
			return nil, err
		}
		items = append(items, i)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return items, nil
}
