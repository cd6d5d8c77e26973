package txretryvet_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/txretry/txretry/txretry/txretryvet"
)

func TestAnalyzer(t *testing.T) {
	for _, pkg := range []string{"handles", "errs", "sideeffects", "escape"} {
		t.Run(pkg, func(t *testing.T) {
			analysistest.Run(t, analysistest.TestData(), txretryvet.Analyzer, pkg)
		})
	}
}
