//go:build unix

package outage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strconv"
	"testing"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/txretry/txretry/integration/dbserver"
)

func TestMain(m *testing.M) {
	// go-sql-driver logs every broken connection; the outages are on purpose.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	code := m.Run()
	if code == 0 {
		// Every pool and server of the tests must be closed by now.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// private starts a private server of e for t (dbserver.StartPrivate),
// closed when t ends. Missing binaries skip the test, or fail it under
// CI=true.
func private(t *testing.T, e dbserver.Engine) *dbserver.Private {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dbserver.LocalTimeout)
	defer cancel()
	p, err := dbserver.StartPrivate(ctx, e)
	if err != nil {
		unavailable(t, err)
	}
	closeAtEnd(t, p)
	return p
}

// closeAtEnd closes p when t ends.
func closeAtEnd(t *testing.T, p *dbserver.Private) {
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close %s: %v", p, err)
		}
	})
}

// unavailable fails t for err, or skips it when err says only that the
// binaries are missing and CI is not true: under CI every outage test must
// run.
func unavailable(t *testing.T, err error) {
	t.Helper()
	ci, _ := strconv.ParseBool(os.Getenv(dbserver.EnvCI))
	if _, ok := errors.AsType[*dbserver.UnavailableError](err); ok && !ci {
		t.Skipf("%v", err)
	}
	t.Fatalf("%v", err)
}
