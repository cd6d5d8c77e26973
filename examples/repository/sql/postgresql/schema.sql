-- The tables on PostgreSQL: sqlc's schema for packages pgstore and pgxstore,
-- and the DDL the service runs at Setup.
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
