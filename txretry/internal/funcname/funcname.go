// Package funcname names a Go function the same way in every build of the
// same code, wherever it was built: the contention manager's conflict
// domains, which processes share through a database lock, are named by it.
package funcname

import (
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// Of returns the name of function fn, "" when fn is not a non-nil
// function:
//
//   - A function or method: its name as the runtime gives it, import path
//     included, such as "example.com/svc.Transfer" or
//     "example.com/svc.(*Service).Transfer". A method value has the
//     method's name (the runtime names its wrapper with "-fm" appended,
//     which is dropped): svc.Transfer and the method expression
//     (*Service).Transfer have one name, svc.Transfer and svc.Deposit two,
//     and the method value of an interface has the interface method's
//     name ("example.com/svc.Repo.Transfer") whatever the value behind it.
//   - A generic function's instantiations share one name, the runtime's
//     ("example.com/svc.Transfer[...]"): the runtime names them alike, and
//     those of one GC shape share their code.
//   - A closure: its file's base name and its line, such as
//     "transfer.go:42". Its runtime name ("example.com/svc.Outer.func1")
//     changes with where the compiler inlined the function that holds it,
//     and then names the package of the function it was inlined into, not
//     its own; and the folders of its file's path differ from build to
//     build. So the closures written on one line share a name, and so do
//     those of two packages written in files of one base name on lines of
//     one number.
//
// No name holds a folder of the build. Of caches names by code pointer; after
// the first call for a function it costs a map lookup.
func Of(fn any) string {
	v := reflect.ValueOf(fn)
	if v.Kind() != reflect.Func || v.IsNil() {
		return ""
	}
	pc := v.Pointer()
	if n, ok := names.Load(pc); ok {
		return n.(string)
	}
	n := ofPC(pc)
	names.Store(pc, n)
	return n
}

// names caches the names by code pointer; there are as many as functions
// in the program, at most.
var names sync.Map // uintptr → string

func ofPC(pc uintptr) string {
	f := runtime.FuncForPC(pc)
	if f == nil {
		return "pc:" + strconv.FormatUint(uint64(pc), 16)
	}
	name := f.Name()
	if !closure(name) {
		return strings.TrimSuffix(name, "-fm")
	}
	file, line := f.FileLine(pc)
	return file[strings.LastIndexByte(file, '/')+1:] + ":" + strconv.Itoa(line)
}

// closure reports whether a runtime name is a closure's: its last element,
// after any nested closures' numbers, is "func" and a number
// ("pkg.Outer.func1", "pkg.Outer.func1.2").
func closure(name string) bool {
	for {
		i := strings.LastIndexByte(name, '.')
		if i < 0 {
			return false
		}
		last := name[i+1:]
		if digits(last) {
			name = name[:i]
			continue
		}
		return strings.HasPrefix(last, "func") && digits(last[len("func"):])
	}
}

func digits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}
