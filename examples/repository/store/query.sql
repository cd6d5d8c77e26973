-- The queries sqlc would read (query.sql.go is written to match them).

-- name: CreateProduct :exec
INSERT INTO products (sku, name, stock) VALUES ($1, $2, $3);

-- name: GetProduct :one
SELECT sku, name, stock FROM products WHERE sku = $1;

-- name: UpdateStock :exec
UPDATE products SET stock = $2 WHERE sku = $1;

-- name: CreateOrder :one
INSERT INTO orders (customer, sku, quantity) VALUES ($1, $2, $3)
RETURNING id, customer, sku, quantity;

-- name: OrderedQuantity :one
SELECT COALESCE(SUM(quantity), 0)::bigint AS total FROM orders WHERE sku = $1;

-- name: ListOrdersByCustomer :many
SELECT id, customer, sku, quantity FROM orders WHERE customer = $1 ORDER BY id;
