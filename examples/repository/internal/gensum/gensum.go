// Package gensum tells whether the code sqlc generated for the repository
// example is current, without sqlc: `make generate` records in
// generated.sum the SHA-256 of each of sqlc's inputs (sqlc.yaml and the
// files under sql/) and of each file it wrote (under store/), with sqlc's
// version; Check computes them again and compares.
//
// Building sqlc takes minutes (it links a PostgreSQL parser through cgo),
// so the tests do not run it; they only need the files.
package gensum

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
)

// SQLCVersion is the sqlc release the committed code was generated with;
// sqlcgen refuses any other, so that a regeneration does not differ only
// because of the generator.
const SQLCVersion = "v1.31.1"

// SumFile is the file, in the example's directory, that Write writes and
// Check reads.
const SumFile = "generated.sum"

// The files the sum covers, relative to the example's directory.
const (
	configFile = "sqlc.yaml"
	inputDir   = "sql"   // schemas and queries
	outputDir  = "store" // sqlc's output, nothing else
)

// ErrStale is the error of Check when the committed code does not match its
// inputs.
var ErrStale = errors.New("generated code is stale: run make generate")

// header opens the sum file.
const header = `# Written by make generate (internal/gensum/sqlcgen); checked by the tests. Do not edit.
# The SHA-256 of sqlc's inputs and of the code it generated from them.
`

// Sum returns the content of the sum file for the example in dir as it is
// now: the version line, then a line "<sha256>  <path>" for each file, in
// the form sha256sum writes.
func Sum(dir string) ([]byte, error) {
	if err := checkConfig(dir); err != nil {
		return nil, err
	}
	files, err := covered(dir)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(header)
	fmt.Fprintf(&b, "sqlc %s\n", SQLCVersion)
	for _, name := range files {
		data, err := os.ReadFile(path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		// A checkout that turned LF into CRLF (core.autocrlf) changes
		// nothing that matters.
		sum := sha256.Sum256(bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n")))
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(sum[:]), name)
	}
	return b.Bytes(), nil
}

// Write records the sum of the example in dir in its sum file.
func Write(dir string) error {
	sum, err := Sum(dir)
	if err != nil {
		return err
	}
	return os.WriteFile(path.Join(dir, SumFile), sum, 0o644)
}

// Check compares the example in dir with its sum file. The error wraps
// ErrStale and names what differs (an input or output changed, added or
// removed, or another sqlc version) when they do not match.
func Check(dir string) error {
	recorded, err := os.ReadFile(path.Join(dir, SumFile))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w (%s is missing)", ErrStale, SumFile)
	}
	if err != nil {
		return err
	}
	current, err := Sum(dir)
	if err != nil {
		return err
	}
	if diff := differences(entries(recorded), entries(current)); len(diff) > 0 {
		return fmt.Errorf("%w (%s)", ErrStale, strings.Join(diff, "; "))
	}
	return nil
}

// covered lists the files the sum covers, sorted, as slash-separated paths
// relative to dir.
func covered(dir string) ([]string, error) {
	files := []string{configFile}
	root := os.DirFS(dir)
	for _, sub := range []string{inputDir, outputDir} {
		err := fs.WalkDir(root, sub, func(name string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				files = append(files, name)
			}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(files)
	return files, nil
}

// checkConfig makes sure that sqlc.yaml reads its schemas and queries only
// from sql/ and writes only under store/, the files the sum covers. It
// reads the file line by line: each path must stand on its key's line.
func checkConfig(dir string) error {
	data, err := os.ReadFile(path.Join(dir, configFile))
	if err != nil {
		return err
	}
	want := map[string]string{"schema": inputDir, "queries": inputDir, "out": outputDir}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimPrefix(strings.TrimSpace(sc.Text()), "- ")
		key, value, ok := strings.Cut(line, ":")
		dirWanted, known := want[strings.TrimSpace(key)]
		if !ok || !known || strings.HasPrefix(line, "#") {
			continue
		}
		value = strings.Trim(strings.TrimSpace(value), `"'`)
		if clean := path.Clean(value); clean != dirWanted && !strings.HasPrefix(clean, dirWanted+"/") {
			return fmt.Errorf("%s:%d: %s must be a path under %s/, which the sum covers", configFile, n, key, dirWanted)
		}
	}
	return sc.Err()
}

// entries returns what a sum file records: the sqlc version under the key
// "sqlc", and each file's hash under its path.
func entries(sum []byte) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(string(sum)) {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "sqlc "):
			m["sqlc"] = strings.TrimPrefix(line, "sqlc ")
		default:
			hash, name, _ := strings.Cut(line, "  ")
			m[name] = hash
		}
	}
	return m
}

// differences describes how the entries now differ from those recorded.
func differences(recorded, now map[string]string) []string {
	var diff []string
	if recorded["sqlc"] != now["sqlc"] {
		diff = append(diff, fmt.Sprintf("recorded for sqlc %s, want %s", recorded["sqlc"], now["sqlc"]))
	}
	names := maps.Clone(recorded)
	maps.Copy(names, now)
	delete(names, "sqlc")
	for _, name := range slices.Sorted(maps.Keys(names)) {
		was, wasOK := recorded[name]
		is, isOK := now[name]
		switch {
		case !wasOK:
			diff = append(diff, name+" added")
		case !isOK:
			diff = append(diff, name+" removed")
		case was != is:
			diff = append(diff, name+" changed")
		}
	}
	return diff
}
