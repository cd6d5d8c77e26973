// Package gorm is a stub of GORM's API for the analyzer's tests.
package gorm

import "context"

type DB struct{ Error error }

type Session struct{}

func (db *DB) Create(value any) *DB                    { return db }
func (db *DB) Where(query any, args ...any) *DB        { return db }
func (db *DB) First(dest any, conds ...any) *DB        { return db }
func (db *DB) Find(dest any, conds ...any) *DB         { return db }
func (db *DB) Exec(sql string, values ...any) *DB      { return db }
func (db *DB) WithContext(ctx context.Context) *DB     { return db }
func (db *DB) Session(s *Session) *DB                  { return db }
func (db *DB) Model(value any) *DB                     { return db }
func (db *DB) Transaction(fc func(tx *DB) error) error { return nil }
