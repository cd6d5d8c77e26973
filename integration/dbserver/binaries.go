package dbserver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// binaries are the installed programs that start a throwaway server.
type binaries struct {
	// server is the server program: postgres, mariadbd or mysqld.
	server string
	// initdb creates a data directory: initdb, mariadb-install-db or
	// mysql_install_db; empty for MySQL, whose server initializes its
	// own (mysqld --initialize-insecure).
	initdb string
	// mariadb reports a MariaDB server (rather than MySQL).
	mariadb bool
}

// Program names, in order of preference.
var (
	pgServerNames    = []string{"postgres"}
	pgInitNames      = []string{"initdb"}
	mysqlServerNames = []string{"mariadbd", "mysqld"}
	mysqlInitNames   = []string{"mariadb-install-db", "mysql_install_db"}
)

// searchDirs returns the directories where e's binaries are looked for:
// PATH first, then the usual install locations of Debian and Ubuntu
// (/usr/lib/postgresql/<version>/bin, /usr/sbin), Fedora and RHEL
// (/usr/bin, /usr/libexec, /usr/pgsql-<version>/bin) and Homebrew (the
// opt/ prefixes of /opt/homebrew and /usr/local), newest version first.
func searchDirs(e Engine) []string {
	dirs := filepath.SplitList(os.Getenv("PATH"))
	var globs []string
	if e == Postgres {
		globs = []string{
			"/usr/lib/postgresql/*/bin",
			"/usr/pgsql-*/bin",
			"/usr/local/pgsql/bin",
			"/opt/homebrew/opt/postgresql*/bin",
			"/usr/local/opt/postgresql*/bin",
			"/opt/homebrew/bin", "/usr/local/bin", "/usr/bin",
		}
	} else {
		globs = []string{
			"/usr/sbin", "/usr/bin", "/usr/libexec",
			"/usr/local/mysql/bin",
			"/opt/homebrew/opt/mariadb*/bin", "/opt/homebrew/opt/mysql*/bin",
			"/usr/local/opt/mariadb*/bin", "/usr/local/opt/mysql*/bin",
			"/opt/homebrew/bin", "/usr/local/bin",
		}
	}
	for _, g := range globs {
		matches, _ := filepath.Glob(g)
		slices.SortFunc(matches, func(a, b string) int { return compareVersions(b, a) })
		dirs = append(dirs, matches...)
	}
	seen := make(map[string]bool, len(dirs))
	out := dirs[:0]
	for _, d := range dirs {
		if d != "" && !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

// compareVersions compares two paths by the numbers in them, so that
// /usr/lib/postgresql/17/bin sorts after /usr/lib/postgresql/9/bin.
func compareVersions(a, b string) int {
	na, nb := numbers(a), numbers(b)
	if c := slices.Compare(na, nb); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

// numbers returns the decimal numbers in s, in order.
func numbers(s string) []int {
	var out []int
	for f := range strings.FieldsFuncSeq(s, func(r rune) bool { return r < '0' || r > '9' }) {
		n, _ := strconv.Atoi(f)
		out = append(out, n)
	}
	return out
}

// findBinaries looks in dirs for the programs that start a throwaway server
// of e. PostgreSQL's initdb and postgres must come from the same
// directory, so that their versions match.
func findBinaries(e Engine, dirs []string) (*binaries, error) {
	if e == Postgres {
		for _, d := range dirs {
			server, init := lookIn(d, pgServerNames), lookIn(d, pgInitNames)
			if server != "" && init != "" {
				return &binaries{server: server, initdb: init}, nil
			}
		}
		return nil, notFound([]string{"initdb", "postgres"}, dirs)
	}
	var server string
	for _, name := range mysqlServerNames {
		for _, d := range dirs {
			if server = lookIn(d, []string{name}); server != "" {
				break
			}
		}
		if server != "" {
			break
		}
	}
	if server == "" {
		return nil, notFound(mysqlServerNames, dirs)
	}
	b := &binaries{server: server, mariadb: filepath.Base(server) == "mariadbd" || isMariaDB(server)}
	if !b.mariadb {
		return b, nil // mysqld --initialize-insecure
	}
	// The install script of the server's own directory, its sibling bin
	// directory (Debian: /usr/sbin/mariadbd, /usr/bin/mariadb-install-db),
	// then the others.
	own := []string{filepath.Dir(server), filepath.Join(filepath.Dir(filepath.Dir(server)), "bin")}
	for _, d := range append(own, dirs...) {
		if b.initdb = lookIn(d, mysqlInitNames); b.initdb != "" {
			return b, nil
		}
	}
	return nil, notFound(mysqlInitNames, dirs)
}

// notFound says which programs were looked for where.
func notFound(names, dirs []string) error {
	return fmt.Errorf("%s not found on PATH nor in %s", strings.Join(names, ", "), strings.Join(nonPath(dirs), ", "))
}

// nonPath returns dirs without those of PATH, which the message names as
// a whole.
func nonPath(dirs []string) []string {
	path := filepath.SplitList(os.Getenv("PATH"))
	var out []string
	for _, d := range dirs {
		if !slices.Contains(path, d) {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		return []string{"the usual install locations"}
	}
	return out
}

// lookIn returns the path of the first of names that is an executable file
// in dir, or "".
func lookIn(dir string, names []string) string {
	for _, n := range names {
		p := filepath.Join(dir, n)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// isMariaDB reports whether the mysqld at path is MariaDB's.
func isMariaDB(path string) bool {
	out, err := exec.Command(path, "--version").CombinedOutput()
	return err == nil && strings.Contains(strings.ToLower(string(out)), "mariadb")
}

// errNoAccount is returned, as root, when the account a server must run
// as does not exist.
var errNoAccount = errors.New("no such account")
