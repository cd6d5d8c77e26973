package dbtest

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// namePrefix starts every per-test database name, so leftovers are easy to
// spot and to drop by hand.
const namePrefix = "txr_"

// randomSuffix returns 8 random lowercase hex digits, which keep the
// databases of parallel tests and of repeated runs (-count) apart.
func randomSuffix() string {
	return fmt.Sprintf("%08x", rand.Uint32())
}

// databaseName returns txr_<sanitized testName>_<suffix>, at most limit
// bytes long. The test name is lowercased and every run of characters
// outside [a-z0-9] becomes one underscore, so the name needs no quoting on
// either server and means the same on case-insensitive file systems; it is
// shortened from the end to fit the limit.
func databaseName(testName string, limit int, suffix string) string {
	room := max(limit-len(namePrefix)-1-len(suffix), 0)
	s := sanitize(testName)
	if len(s) > room {
		s = strings.TrimRight(s[:room], "_")
	}
	if s == "" {
		s = "test"
		if len(s) > room {
			s = s[:room]
		}
	}
	return namePrefix + s + "_" + suffix
}

// sanitize lowercases name and turns each run of characters outside
// [a-z0-9] into a single underscore, trimming underscores at both ends.
func sanitize(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	pending := false
	for _, r := range strings.ToLower(name) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if pending && b.Len() > 0 {
				b.WriteByte('_')
			}
			pending = false
			b.WriteRune(r)
			continue
		}
		pending = true
	}
	return b.String()
}
