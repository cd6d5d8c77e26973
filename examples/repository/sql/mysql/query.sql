-- name: CreateProduct :exec
-- CreateProduct adds a product.
INSERT INTO products (sku, name, stock) VALUES (?, ?, ?);

-- name: GetProduct :one
-- GetProduct returns the product with the given SKU.
SELECT sku, name, stock FROM products WHERE sku = ?;

-- name: UpdateStock :exec
-- UpdateStock sets a product's stock.
UPDATE products SET stock = ? WHERE sku = ?;

-- name: CreateOrder :execlastid
-- CreateOrder records an order and returns its id: MySQL has no
-- RETURNING, so the id is the connection's LAST_INSERT_ID().
INSERT INTO orders (customer, sku, quantity) VALUES (?, ?, ?);

-- name: OrderedQuantity :one
-- OrderedQuantity returns the units ordered of a product (SUM is a
-- DECIMAL on MySQL: cast to a BIGINT, an int64).
SELECT CAST(COALESCE(SUM(quantity), 0) AS SIGNED) AS total FROM orders WHERE sku = ?;

-- name: ListOrdersByCustomer :many
-- ListOrdersByCustomer returns a customer's orders, oldest first.
SELECT id, customer, sku, quantity FROM orders WHERE customer = ? ORDER BY id;
