-- The schema sqlc would read (package store is written to match it).
CREATE TABLE products (
    sku   TEXT PRIMARY KEY,
    name  TEXT NOT NULL,
    stock BIGINT NOT NULL
);

CREATE TABLE orders (
    id       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer TEXT NOT NULL,
    sku      TEXT NOT NULL REFERENCES products (sku),
    quantity BIGINT NOT NULL
);
