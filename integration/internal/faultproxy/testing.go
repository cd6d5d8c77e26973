package faultproxy

import "testing"

// StartPartition starts a proxy for a test as a network partition behaves:
// PostgreSQL cancel requests are held back (BlockCancelRequests), and at
// the end of the test held traffic is released and the proxy closed. A
// proxy that cannot start fails the test.
func StartPartition(t testing.TB, upstream string, proto Protocol) *Proxy {
	t.Helper()
	p, err := Start(upstream, proto)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	p.BlockCancelRequests(true)
	t.Cleanup(func() { p.Release(); _ = p.Close() })
	return p
}
