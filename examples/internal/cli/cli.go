package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/txretry/txretry/integration/dbserver"
)

// Engines maps the value of a -db flag to engines: "all" to PostgreSQL and
// MySQL, "postgres" or "mysql" to that one. Any other value is an error that
// names the flag.
func Engines(db string) ([]dbserver.Engine, error) {
	switch db {
	case "all":
		return []dbserver.Engine{dbserver.Postgres, dbserver.MySQL}, nil
	case "postgres":
		return []dbserver.Engine{dbserver.Postgres}, nil
	case "mysql":
		return []dbserver.Engine{dbserver.MySQL}, nil
	default:
		return nil, fmt.Errorf("-db %q: want all, postgres or mysql", db)
	}
}

// Parse parses args with fs and rejects what is left after the flags: the
// programs take no positional arguments.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	return nil
}

// UsageStatus returns the exit status for a command line that the program
// name rejected with err: 0 for -h (flag.ErrHelp; the flag set has printed
// the usage), else 2, after printing err to stderr.
func UsageStatus(name string, err error, stderr io.Writer) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	return 2
}

// Misconfigured reports whether findErr, the error of dbserver.FindAll, says
// more than that a server is absent: a DSN that is set but whose server does
// not answer, a bad flavor, or an error that is not a
// *dbserver.UnavailableError. A program fails then, while it runs on the
// servers it found when the others are merely absent.
func Misconfigured(findErr error) bool { return dbserver.Misconfigured(findErr) }

// Program is an example program's run, as its frame sees it.
type Program struct {
	// Name is the program's name; it starts the messages Run writes to
	// Stderr.
	Name string
	// Engines are the engines Run looks for a server of.
	Engines []dbserver.Engine
	// Timeout bounds the run once the servers are found (finding them,
	// which may start containers, is bounded by dbserver.ContainerTimeout).
	Timeout time.Duration
	// Stdout receives EachServer's verdict.
	Stdout io.Writer
	// Stderr receives the errors of stopping servers.
	Stderr io.Writer
}

// Run finds a server of each of p.Engines (dbserver.FindAll: servers holds
// those found, in the order of p.Engines; findErr joins a
// *dbserver.UnavailableError for each engine without one) and returns body's
// exit status. body's context ends on SIGINT or SIGTERM and after p.Timeout.
// When body returns, Run stops the servers it started (containers, throwaway servers).
func (p Program) Run(body func(ctx context.Context, servers []*dbserver.Server, findErr error) int) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	servers, findErr := dbserver.FindAll(ctx, p.Engines...)
	defer func() {
		for _, s := range servers {
			if err := s.Close(); err != nil {
				fmt.Fprintf(p.Stderr, "%s: terminate %s: %v\n", p.Name, s, err)
			}
		}
	}()

	// The program's own bound starts once the servers are there: pulling
	// and starting containers is bounded by dbserver.ContainerTimeout.
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	return body(ctx, servers, findErr)
}

// EachServer is Run for a program that does the same on every server: it
// calls fn with each server found, in turn, and prints to p.Stdout the
// servers it could not find (then a blank line), "  FAIL: " and fn's error
// (then a blank line) for each server fn fails on, and "ok" if all went well.
// It returns 1 if no server was found, one was misconfigured (see
// Misconfigured) or fn failed, else 0.
func (p Program) EachServer(fn func(ctx context.Context, srv *dbserver.Server) error) int {
	return p.Run(func(ctx context.Context, servers []*dbserver.Server, findErr error) int {
		return eachServer(ctx, p.Stdout, servers, findErr, fn)
	})
}

// eachServer is EachServer's body.
func eachServer(ctx context.Context, w io.Writer, servers []*dbserver.Server, findErr error,
	fn func(ctx context.Context, srv *dbserver.Server) error) int {
	if findErr != nil {
		fmt.Fprintf(w, "%v\n\n", findErr)
	}
	if len(servers) == 0 {
		fmt.Fprintln(w, "FAIL: no database reachable")
		return 1
	}
	ok := !Misconfigured(findErr)
	for _, srv := range servers {
		if err := fn(ctx, srv); err != nil {
			fmt.Fprintf(w, "  FAIL: %v\n\n", err)
			ok = false
		}
	}
	if !ok {
		return 1
	}
	fmt.Fprintln(w, "ok")
	return 0
}

// SyncWriter returns a writer that serializes the writes to w, for the
// output that concurrent workers, hooks and exporters share.
func SyncWriter(w io.Writer) io.Writer {
	return &syncWriter{w: w}
}

// syncWriter serializes writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// Write implements io.Writer.
func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
