// Command probe prints the names funcname.Of gives to svc's functions, one
// a line, for the test that builds it from two folders.
package main

import (
	"fmt"

	"example.com/probe/funcname"
	"example.com/probe/svc"
)

func main() {
	for _, f := range svc.Funcs() {
		fmt.Println(funcname.Of(f))
	}
}
