-- name: CreateProduct :exec
-- CreateProduct adds a product.
INSERT INTO products (sku, name, stock) VALUES ($1, $2, $3);

-- name: GetProduct :one
-- GetProduct returns the product with the given SKU.
SELECT sku, name, stock FROM products WHERE sku = $1;

-- name: UpdateStock :exec
-- UpdateStock sets a product's stock.
UPDATE products SET stock = $2 WHERE sku = $1;

-- name: CreateOrder :one
-- CreateOrder records an order and returns it.
INSERT INTO orders (customer, sku, quantity) VALUES ($1, $2, $3)
RETURNING id, customer, sku, quantity;

-- name: OrderedQuantity :one
-- OrderedQuantity returns the units ordered of a product.
SELECT COALESCE(SUM(quantity), 0)::bigint AS total FROM orders WHERE sku = $1;

-- name: ListOrdersByCustomer :many
-- ListOrdersByCustomer returns a customer's orders, oldest first.
SELECT id, customer, sku, quantity FROM orders WHERE customer = $1 ORDER BY id;
