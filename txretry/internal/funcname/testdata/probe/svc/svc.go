// Package svc has the kinds of function a conflict domain can be named by.
package svc

type Service struct{ n int }

func (s *Service) Transfer() error { s.n++; return nil }
func (s *Service) Deposit() error  { s.n--; return nil }

func Generic[T any]() error { return nil }

func outer() func() error {
	return func() error { return nil }
}

// Funcs returns a method value, the same method's expression, another
// method value, a generic instantiation and closures from two places.
func Funcs() []any {
	s := &Service{}
	return []any{s.Transfer, (*Service).Transfer, s.Deposit, Generic[int], outer(), func() error { return nil }}
}
