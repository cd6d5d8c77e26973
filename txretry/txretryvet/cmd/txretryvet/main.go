// Command txretryvet runs the txretryvet analyzer: as a vet tool,
//
//	go vet -vettool=$(which txretryvet) ./...
//
// or on its own, txretryvet ./...
package main

import (
	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/txretry/txretry/txretry/txretryvet"
)

func main() { singlechecker.Main(txretryvet.Analyzer) }
