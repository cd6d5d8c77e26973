// Package fakedb is a scripted database/sql driver for unit tests of
// txretry's retry policy; it is internal and has no SQL semantics.
//
// A test fills in the hooks of a [Driver] (each nil hook means "succeed"),
// opens a pool with [Driver.DB], runs the code under test and then inspects
// [Driver.Stats] and [Driver.Log]:
//
//	d := &fakedb.Driver{
//		OnCommit: func(n int) error {
//			if n == 1 {
//				return &fakedb.SQLStateError{Code: "40001", Message: "could not serialize access"}
//			}
//			return nil
//		},
//	}
//	db := d.DB()
//	defer db.Close()
//
// Queries are never parsed: the query text and arguments are only handed to
// the hooks, and the rows a query returns are whatever OnQuery scripts.
package fakedb
