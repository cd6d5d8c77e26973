// Package store is a repository layer in the style that sqlc generates from
// schema.sql and query.sql: a Queries struct over a DBTX interface, New to
// make one over a *sql.DB (or anything with the three methods), and WithTx to
// make one over a transaction. It is written by hand here, so that the
// example needs no code generator; the generated code looks the same.
package store
