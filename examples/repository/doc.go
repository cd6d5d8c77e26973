// Repository shows txretry with a repository layer in the style sqlc
// generates (package store: Queries over a DBTX interface, with WithTx), on
// PostgreSQL through pgx's database/sql driver.
//
// The service method runs its queries through the transaction's Queries:
//
//	err := txretry.RunInTx(ctx, s.db, func(ctx context.Context, tx *sql.Tx) error {
//		q := s.q.WithTx(tx)
//		p, err := q.GetProduct(ctx, sku)
//		...
//		return q.UpdateStock(ctx, store.UpdateStockParams{Sku: sku, Stock: p.Stock - qty})
//	}, txretry.WithIsolation(sql.LevelSerializable))
//
// The program places concurrent orders for one product. Each order reads the
// stock and writes the new value: under SERIALIZABLE, concurrent orders that
// read the same stock are aborted with SQLSTATE 40001 and txretry runs them
// again, so no update is lost and the stock never goes below zero. With
// -isolation read-committed the same code loses updates, and the invariant
// check says so (the program then exits with status 1: that run shows the
// bug that SERIALIZABLE plus retries prevents).
//
// Usage:
//
//	go run ./repository [-customers 20] [-orders 3] [-stock 100] [-isolation serializable|read-committed]
package main
