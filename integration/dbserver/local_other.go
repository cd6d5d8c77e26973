//go:build !unix

package dbserver

import (
	"context"
	"errors"
)

// localServer is a throwaway server; there are none on this system.
type localServer struct{}

func (*localServer) stop() error { return nil }

// startLocal fails: throwaway servers need a Unix system.
func startLocal(context.Context, Engine, *binaries) (*Server, error) {
	return nil, errors.New("throwaway servers are supported on Unix systems only")
}

// SetStopOnSignal does nothing on this system.
func SetStopOnSignal(bool) {}
