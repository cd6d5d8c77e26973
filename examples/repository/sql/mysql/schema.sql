-- The tables on MySQL and MariaDB: sqlc's schema for package mysqlstore, and
-- the DDL the service runs at Setup. The same tables as on PostgreSQL, in
-- MySQL's dialect (VARCHAR keys, AUTO_INCREMENT).
CREATE TABLE products (
    sku   VARCHAR(64) NOT NULL PRIMARY KEY,
    name  VARCHAR(255) NOT NULL,
    stock BIGINT NOT NULL
);

CREATE TABLE orders (
    id       BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    customer VARCHAR(64) NOT NULL,
    sku      VARCHAR(64) NOT NULL,
    quantity BIGINT NOT NULL,
    FOREIGN KEY (sku) REFERENCES products (sku)
);
