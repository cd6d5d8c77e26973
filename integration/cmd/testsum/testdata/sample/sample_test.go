package sample

import (
	"os"
	"testing"
)

func TestPass(t *testing.T) {}

func TestSkip(t *testing.T) { t.Skip("no server: set SAMPLE_DSN") }

func TestSub(t *testing.T) {
	t.Run("a", func(t *testing.T) {})
	t.Run("b", func(t *testing.T) {
		if os.Getenv("SAMPLE_FAIL") != "" {
			t.Error("failed on purpose")
		}
	})
}
