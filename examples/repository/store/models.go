package store

// Product is a row of products.
type Product struct {
	Sku   string
	Name  string
	Stock int64
}

// Order is a row of orders.
type Order struct {
	ID       int64
	Customer string
	Sku      string
	Quantity int64
}
