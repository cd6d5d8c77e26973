// Command sqlcgen regenerates the repository example's store packages: it
// runs `sqlc generate` in the current directory (the example's, as go
// generate sets it), then records the sum that the tests check (see package
// gensum). It runs the sqlc named by $SQLC, else the one on PATH, else the
// one in $GOPATH/bin, and refuses any version but gensum.SQLCVersion;
// install that one with
//
//	go install github.com/sqlc-dev/sqlc/cmd/sqlc@v1.31.1
//
// (a cgo build that takes minutes).
package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/txretry/txretry/examples/repository/internal/gensum"
)

func main() {
	if err := generate(sqlcPath()); err != nil {
		fmt.Fprintf(os.Stderr, "sqlcgen: %v\n", err)
		os.Exit(1)
	}
}

// sqlcPath returns $SQLC, else sqlc if it is on PATH, else the sqlc that go
// install puts in $GOPATH/bin (often not on PATH), if it is there.
func sqlcPath() string {
	if p := os.Getenv("SQLC"); p != "" {
		return p
	}
	if _, err := exec.LookPath("sqlc"); err == nil {
		return "sqlc"
	}
	gopath, err := exec.Command("go", "env", "GOPATH").Output()
	if err == nil {
		p := filepath.Join(strings.TrimSpace(string(gopath)), "bin", "sqlc")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "sqlc"
}

// generate runs sqlc and writes the sum.
func generate(sqlc string) error {
	install := "go install github.com/sqlc-dev/sqlc/cmd/sqlc@" + gensum.SQLCVersion
	out, err := exec.Command(sqlc, "version").Output()
	if err != nil {
		return fmt.Errorf("%s version: %w; install sqlc with %s, or set SQLC to its path", sqlc, err, install)
	}
	if v := strings.TrimSpace(string(out)); v != gensum.SQLCVersion {
		return fmt.Errorf("%s is sqlc %s, want %s (to change the version, change gensum.SQLCVersion); install it with %s",
			sqlc, v, gensum.SQLCVersion, install)
	}
	// sqlc writes into store/ but never removes a file it no longer
	// generates: start from an empty tree so that the sum covers only
	// what this run wrote.
	if err := os.RemoveAll("store"); err != nil {
		return err
	}
	cmd := exec.Command(sqlc, "generate")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = os.Stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("sqlc generate: %w\n%s", err, stderr.Bytes())
	}
	return gensum.Write(".")
}
