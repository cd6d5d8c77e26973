// Package txretryvet is an analyzer that reports code in the function a
// txretry call runs (fn) that breaks under retries: statements on the
// database handle instead of fn's transaction, errors of statements
// discarded, rows loops without rows.Err, side effects that a retry
// repeats, and the transaction escaping fn.
//
// It looks at fn given as a function literal, a function or method of the
// same package (by name or as a method value), or a local variable holding
// a function literal, to txretry.RunInTx, pgxretry.RunInTx,
// sqlxretry.RunInTx, gormretry.RunInTx, bunretry.RunInTx, and to
// txretry.Run as a function literal in the adapter's composite literal.
// It does not follow calls from fn into other functions: a statement
// on a handle, a side effect or a discarded error inside a helper that fn
// calls is not seen.
//
// A line meant to be as it is takes a comment holding "txretryvet:ok" and
// the reason, on it or on the line above.
//
// Run it with go vet -vettool=$(which txretryvet) ./... (cmd/txretryvet).
package txretryvet

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// Analyzer reports code in txretry's fn that breaks under retries.
var Analyzer = &analysis.Analyzer{
	Name: "txretryvet",
	Doc: "report code in the fn of txretry.RunInTx and its adapters that breaks when fn runs again: " +
		"statements on the database handle instead of the transaction, discarded statement errors, rows loops " +
		"without rows.Err, side effects a retry repeats, and the transaction escaping fn",
	URL: "https://pkg.go.dev/github.com/txretry/txretry/txretry/txretryvet",
	Run: run,
}

const core = "github.com/txretry/txretry/txretry"

// runners are the functions whose third argument is fn.
var runners = map[string]bool{
	core + ".RunInTx":           true,
	core + "/pgxretry.RunInTx":  true,
	core + "/sqlxretry.RunInTx": true,
	core + "/gormretry.RunInTx": true,
	core + "/bunretry.RunInTx":  true,
}

// handles are the database handles, by package path and type name: a
// statement on one runs outside the transaction. *gorm.DB is a handle only
// when it does not come from fn's transaction.
var handles = map[string]bool{
	"database/sql.DB":                       true,
	"database/sql.Conn":                     true,
	"github.com/jackc/pgx/v5/pgxpool.Pool":  true,
	"github.com/jackc/pgx/v5.Conn":          true,
	"github.com/jmoiron/sqlx.DB":            true,
	"github.com/jmoiron/sqlx.Conn":          true,
	"github.com/uptrace/bun.DB":             true,
	"github.com/uptrace/bun.Conn":           true,
	"gorm.io/gorm.DB":                       true,
	"github.com/jackc/pgx/v5/pgxpool.Conn":  true,
	"github.com/jackc/pgx/v5/pgconn.PgConn": true,
}

// statementMethods are the methods of a handle that run a statement or
// begin a transaction (the others derive handles, read settings or stats).
var statementMethods = map[string]bool{
	// database/sql, sqlx
	"Exec": true, "ExecContext": true, "Query": true, "QueryContext": true, "QueryRow": true, "QueryRowContext": true,
	"Prepare": true, "PrepareContext": true, "Begin": true, "BeginTx": true, "Conn": true,
	"Get": true, "GetContext": true, "Select": true, "SelectContext": true, "MustExec": true, "MustExecContext": true,
	"NamedExec": true, "NamedExecContext": true, "NamedQuery": true, "NamedQueryContext": true,
	"Queryx": true, "QueryxContext": true, "QueryRowx": true, "QueryRowxContext": true, "MustBegin": true,
	"MustBeginTx": true, "Beginx": true, "BeginTxx": true, "Preparex": true, "PreparexContext": true,
	"PrepareNamed": true, "PrepareNamedContext": true,
	// pgx
	"SendBatch": true, "CopyFrom": true, "BeginFunc": true, "BeginTxFunc": true, "Acquire": true,
	// bun
	"NewSelect": true, "NewInsert": true, "NewUpdate": true, "NewDelete": true, "NewRaw": true, "NewMerge": true,
	"NewValues": true, "NewCreateTable": true, "NewDropTable": true, "NewTruncateTable": true, "RunInTx": true,
	"QueryRowContextWithArgs": true,
	// gorm (with its finishers)
	"Raw": true, "Transaction": true, "Row": true, "Rows": true,
}

// dbPackages are the packages whose methods returning an error run
// statements (or scan their results).
var dbPackages = []string{"database/sql", "github.com/jackc/pgx/v5", "github.com/jmoiron/sqlx", "github.com/uptrace/bun", "gorm.io/gorm"}

// gormFinishers are the *gorm.DB methods that run a statement.
var gormFinishers = map[string]bool{
	"Create": true, "CreateInBatches": true, "Save": true, "Update": true, "Updates": true, "UpdateColumn": true,
	"UpdateColumns": true, "Delete": true, "Exec": true, "First": true, "Find": true, "Take": true, "Last": true,
	"Scan": true, "Pluck": true, "Count": true, "FirstOrCreate": true, "FirstOrInit": true, "FindInBatches": true,
}

// sideEffects are the functions and methods whose effect a retry repeats.
var sideEffects = map[string]bool{
	"net/http.Get": true, "net/http.Post": true, "net/http.Head": true, "net/http.PostForm": true,
	"(*net/http.Client).Do": true, "(*net/http.Client).Get": true, "(*net/http.Client).Post": true,
	"(*net/http.Client).Head": true, "(*net/http.Client).PostForm": true,
	"net.Dial": true, "net.DialTimeout": true, "net.DialTCP": true, "net.DialUDP": true, "net.DialIP": true,
	"net.DialUnix": true, "(*net.Dialer).Dial": true, "(*net.Dialer).DialContext": true,
	"os.WriteFile": true, "os.Create": true, "os.Remove": true, "os.RemoveAll": true, "os.Rename": true,
	"os.Mkdir": true, "os.MkdirAll": true, "os.Truncate": true, "os.Symlink": true, "os.Link": true,
	"(*os.File).Write": true, "(*os.File).WriteString": true, "(*os.File).WriteAt": true, "(*os.File).ReadFrom": true,
}

const fixAfterCommit = "move it to txretry.AfterCommit(ctx, func(ctx context.Context) { ... }), which runs once, after the commit"

func run(pass *analysis.Pass) (any, error) {
	a := &analyzer{pass: pass, decls: map[*types.Func]*ast.FuncDecl{}, lits: map[types.Object]*ast.FuncLit{}, done: map[ast.Node]bool{}}
	for _, f := range pass.Files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				if fn, ok := pass.TypesInfo.Defs[fd.Name].(*types.Func); ok {
					a.decls[fn] = fd
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				if len(n.Lhs) == len(n.Rhs) {
					for i, l := range n.Lhs {
						a.noteLit(l, n.Rhs[i])
					}
				}
			case *ast.ValueSpec:
				if len(n.Names) == len(n.Values) {
					for i, l := range n.Names {
						a.noteLit(l, n.Values[i])
					}
				}
			}
			return true
		})
	}
	for _, f := range pass.Files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			name := funcName(pass.TypesInfo, call)
			switch {
			case runners[name] && len(call.Args) >= 3:
				a.fnArg(call.Args[2])
			case name == core+".Run" && len(call.Args) >= 2:
				a.adapterArg(call.Args[1])
			}
			return true
		})
	}
	return nil, nil
}

type analyzer struct {
	pass  *analysis.Pass
	decls map[*types.Func]*ast.FuncDecl
	lits  map[types.Object]*ast.FuncLit
	done  map[ast.Node]bool
}

func (a *analyzer) noteLit(l, r ast.Expr) {
	id, ok := l.(*ast.Ident)
	if !ok {
		return
	}
	lit, ok := ast.Unparen(r).(*ast.FuncLit)
	if !ok {
		return
	}
	if obj := a.pass.TypesInfo.ObjectOf(id); obj != nil {
		if _, seen := a.lits[obj]; seen {
			a.lits[obj] = nil // assigned twice: not known
			return
		}
		a.lits[obj] = lit
	}
}

// fnArg analyzes the function that e, the fn argument, denotes.
func (a *analyzer) fnArg(e ast.Expr) {
	e = ast.Unparen(e)
	switch e := e.(type) {
	case *ast.FuncLit:
		a.fn(e, e.Type, e.Body)
		return
	case *ast.Ident, *ast.SelectorExpr:
		var id *ast.Ident
		if s, ok := e.(*ast.SelectorExpr); ok {
			id = s.Sel
		} else {
			id = e.(*ast.Ident)
		}
		switch obj := a.pass.TypesInfo.Uses[id].(type) {
		case *types.Func:
			if fd := a.decls[obj]; fd != nil {
				a.fn(fd, fd.Type, fd.Body)
			}
		case *types.Var:
			if lit := a.lits[obj]; lit != nil {
				a.fn(lit, lit.Type, lit.Body)
			}
		}
	}
}

// adapterArg analyzes the function literals of the adapter given to
// txretry.Run that take a context and one more argument and return an
// error.
func (a *analyzer) adapterArg(e ast.Expr) {
	e = ast.Unparen(e)
	if u, ok := e.(*ast.UnaryExpr); ok && u.Op == token.AND {
		e = ast.Unparen(u.X)
	}
	cl, ok := e.(*ast.CompositeLit)
	if !ok {
		return
	}
	for _, el := range cl.Elts {
		if kv, ok := el.(*ast.KeyValueExpr); ok {
			el = kv.Value
		}
		if lit, ok := ast.Unparen(el).(*ast.FuncLit); ok {
			sig, _ := a.pass.TypesInfo.TypeOf(lit).(*types.Signature)
			if sig != nil && sig.Params().Len() == 2 && sig.Results().Len() == 1 && isError(sig.Results().At(0).Type()) {
				a.fn(lit, lit.Type, lit.Body)
			}
		}
	}
}

// fnScope is one fn being analyzed.
type fnScope struct {
	*analyzer
	node ast.Node
	tx   types.Object // fn's transaction parameter; nil if unnamed
	body *ast.BlockStmt
}

func (a *analyzer) fn(node ast.Node, ft *ast.FuncType, body *ast.BlockStmt) {
	if a.done[node] || body == nil {
		return
	}
	a.done[node] = true
	s := &fnScope{analyzer: a, node: node, body: body}
	var params []*ast.Ident
	for _, f := range ft.Params.List {
		params = append(params, f.Names...)
	}
	if len(params) >= 2 && params[1].Name != "_" {
		s.tx = a.pass.TypesInfo.Defs[params[1]]
	}
	s.walk(body, false)
	s.rowsLoops()
	s.unreadErrors()
}

// report reports a diagnostic at pos unless the line of pos, or the line
// above it, has a comment holding "txretryvet:ok" (with the reason the
// code is meant to be as it is).
func (s *fnScope) report(pos token.Pos, format string, args ...any) {
	fset := s.pass.Fset
	line := fset.Position(pos).Line
	for _, f := range s.pass.Files {
		if f.Pos() > pos || pos >= f.End() {
			continue
		}
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if l := fset.Position(c.Pos()).Line; (l == line || l == line-1) && strings.Contains(c.Text, "txretryvet:ok") {
					return
				}
			}
		}
	}
	s.pass.Reportf(pos, format, args...)
}

// inside reports whether obj is declared within fn.
func (s *fnScope) inside(obj types.Object) bool {
	return obj != nil && obj.Pos() >= s.node.Pos() && obj.Pos() < s.node.End()
}

// walk reports what fn's statements do; hook is true inside a function
// given to txretry.AfterCommit.
func (s *fnScope) walk(root ast.Node, hook bool) {
	ast.Inspect(root, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			name := funcName(s.pass.TypesInfo, n)
			if name == core+".AfterCommit" {
				for _, arg := range n.Args {
					s.walk(arg, true)
				}
				return false
			}
			if !hook {
				s.call(n, name)
			}
		case *ast.GoStmt:
			if !hook {
				s.report(n.Pos(), "go statement in fn: the goroutine is started again by every attempt, also by those rolled back, and can outlive the transaction; %s", fixAfterCommit)
				return false // one report for the goroutine
			}
		case *ast.SendStmt:
			if hook {
				break
			}
			if s.escapes(n.Value) {
				s.report(n.Pos(), "the transaction escapes fn through a channel: once fn returns it is committed or rolled back (and fn may run again with another one), so a later use fails or runs in the wrong attempt; use it only inside fn")
			} else {
				s.report(n.Pos(), "send on a channel in fn: it happens again on every retry and for attempts rolled back; %s", fixAfterCommit)
			}
		case *ast.ExprStmt:
			if call, ok := ast.Unparen(n.X).(*ast.CallExpr); ok && !hook {
				s.bareCall(call)
			}
		case *ast.AssignStmt:
			if !hook {
				s.assign(n)
			}
		}
		return true
	})
}

// call reports a statement on a handle, a repository built on one, and a
// side effect.
func (s *fnScope) call(call *ast.CallExpr, name string) {
	info := s.pass.TypesInfo
	if sideEffects[name] {
		s.report(call.Pos(), "%s in fn: it happens again on every retry and for attempts rolled back; %s", shortName(name), fixAfterCommit)
		return
	}
	if sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr); ok {
		if _, isMethod := info.Selections[sel]; isMethod {
			recv := info.TypeOf(sel.X)
			switch {
			case (statementMethods[sel.Sel.Name] || gormFinishers[sel.Sel.Name]) && s.isHandle(sel.X, recv):
				s.report(call.Pos(), "%s on %s runs outside the transaction fn received: it commits on its own, is not rolled back with the attempt, and can wait for the attempt's own locks; run it on fn's transaction (or on txretry.TxOrDB(ctx, db))", sel.Sel.Name, types.ExprString(sel.X))
				return
			case isQueries(recv) && sel.Sel.Name != "WithTx" && s.outerRoot(sel.X):
				s.report(call.Pos(), "%s.%s runs on the handle %s was built with outside fn, not on the transaction: build the repository in fn with New(tx) or %s.WithTx(tx)", types.ExprString(sel.X), sel.Sel.Name, types.ExprString(sel.X), types.ExprString(sel.X))
				return
			}
		}
	}
	if t := info.TypeOf(call); t != nil && isQueries(t) {
		for _, arg := range call.Args {
			if s.isHandle(arg, info.TypeOf(arg)) {
				s.report(arg.Pos(), "repository built on %s in fn: its statements run outside the transaction; build it on fn's transaction (New(tx), q.WithTx(tx) or New(txretry.TxOrDB(ctx, db)))", types.ExprString(arg))
			}
		}
	}
}

// isHandle reports whether e, of type t, is a database handle not bound to
// fn's transaction.
func (s *fnScope) isHandle(e ast.Expr, t types.Type) bool {
	key := typeKey(t)
	if !handles[key] {
		return false
	}
	if key != "gorm.io/gorm.DB" {
		return true
	}
	// *gorm.DB: fn's transaction is one too; a handle is one whose root
	// variable comes from outside fn and is not the transaction.
	return s.outerRoot(e) && !s.mentionsTx(e)
}

// outerRoot reports whether e's root variable is declared outside fn.
func (s *fnScope) outerRoot(e ast.Expr) bool {
	for {
		switch x := ast.Unparen(e).(type) {
		case *ast.SelectorExpr:
			if _, ok := s.pass.TypesInfo.Selections[x]; !ok {
				// A package-qualified name.
				obj := s.pass.TypesInfo.Uses[x.Sel]
				return obj != nil && !s.inside(obj)
			}
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.StarExpr:
			e = x.X
		case *ast.CallExpr:
			// A method's result comes from its receiver (db.Where(...)),
			// except a repository's WithTx; a function's is not known.
			sel, ok := ast.Unparen(x.Fun).(*ast.SelectorExpr)
			if !ok || sel.Sel.Name == "WithTx" {
				return false
			}
			if _, isMethod := s.pass.TypesInfo.Selections[sel]; !isMethod {
				return false
			}
			e = sel.X
		case *ast.Ident:
			obj := s.pass.TypesInfo.Uses[x]
			_, isVar := obj.(*types.Var)
			return isVar && !s.inside(obj)
		default:
			return false
		}
	}
}

// mentionsTx reports whether e refers to fn's transaction.
func (s *fnScope) mentionsTx(e ast.Node) bool {
	if s.tx == nil {
		return false
	}
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && s.pass.TypesInfo.Uses[id] == s.tx {
			found = true
		}
		return !found
	})
	return found
}

// escapes reports whether the value of e carries fn's transaction: the
// transaction, a value of its type, a repository or a closure on it, a
// composite literal or append holding one.
func (s *fnScope) escapes(e ast.Expr) bool {
	if !s.mentionsTx(e) {
		return false
	}
	e = ast.Unparen(e)
	if u, ok := e.(*ast.UnaryExpr); ok && u.Op == token.AND {
		e = ast.Unparen(u.X)
	}
	switch e.(type) {
	case *ast.FuncLit, *ast.CompositeLit:
		return true
	}
	if call, ok := e.(*ast.CallExpr); ok {
		if id, ok := ast.Unparen(call.Fun).(*ast.Ident); ok && id.Name == "append" {
			for _, arg := range call.Args[1:] {
				if s.escapes(arg) {
					return true
				}
			}
			return false
		}
	}
	t := s.pass.TypesInfo.TypeOf(e)
	return t != nil && (types.Identical(t, s.tx.Type()) || isQueries(t))
}

// assign reports the transaction stored outside fn and statement errors
// assigned to _.
func (s *fnScope) assign(n *ast.AssignStmt) {
	if len(n.Lhs) == len(n.Rhs) {
		for i, l := range n.Lhs {
			if n.Tok != token.DEFINE && s.outerTarget(l) && s.escapes(n.Rhs[i]) {
				s.report(n.Pos(), "the transaction escapes fn into %s: once fn returns it is committed or rolled back (and fn may run again with another one), so a later use fails or runs in the wrong attempt; use it only inside fn", types.ExprString(l))
			}
		}
	}
	if len(n.Rhs) != 1 {
		return
	}
	call, ok := ast.Unparen(n.Rhs[0]).(*ast.CallExpr)
	if !ok {
		return
	}
	if i := s.errorResult(call); i >= 0 && i < len(n.Lhs) {
		if id, ok := n.Lhs[i].(*ast.Ident); ok && id.Name == "_" {
			s.report(n.Pos(), "error of %s discarded: %s; return it", callName(call), whyErrors)
		}
	}
}

const whyErrors = "a failed statement aborts the transaction (PostgreSQL answers COMMIT with ROLLBACK; a MySQL/MariaDB deadlock has rolled it back and the next statements commit one by one), and a serialization failure or deadlock swallowed here is never retried"

// outerTarget reports whether storing into l outlives fn.
func (s *fnScope) outerTarget(l ast.Expr) bool {
	switch x := ast.Unparen(l).(type) {
	case *ast.Ident:
		obj := s.pass.TypesInfo.ObjectOf(x)
		return obj != nil && x.Name != "_" && !s.inside(obj)
	case *ast.SelectorExpr, *ast.IndexExpr, *ast.StarExpr:
		return s.outerRoot(x)
	}
	return false
}

// bareCall reports a statement run as an expression statement, its
// error dropped.
func (s *fnScope) bareCall(call *ast.CallExpr) {
	if s.errorResult(call) >= 0 {
		s.report(call.Pos(), "error of %s discarded: %s; return it", callName(call), whyErrors)
		return
	}
	sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
	if ok && gormFinishers[sel.Sel.Name] && typeKey(s.pass.TypesInfo.TypeOf(call)) == "gorm.io/gorm.DB" {
		s.report(call.Pos(), "error of %s discarded (its .Error is not read): %s; return it", callName(call), whyErrors)
	}
}

// errorResult returns the index of the error result of call if call runs
// a statement (a method of a database package or of a repository), else -1.
func (s *fnScope) errorResult(call *ast.CallExpr) int {
	sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
	if !ok {
		return -1
	}
	selection, ok := s.pass.TypesInfo.Selections[sel]
	if !ok || sel.Sel.Name == "Close" || sel.Sel.Name == "Rollback" {
		return -1
	}
	recv := selection.Recv()
	if !isQueries(recv) && !inDBPackage(recv) {
		return -1
	}
	sig, ok := s.pass.TypesInfo.TypeOf(call.Fun).(*types.Signature)
	if !ok || sig.Results().Len() == 0 {
		return -1
	}
	last := sig.Results().Len() - 1
	if !isError(sig.Results().At(last).Type()) {
		return -1
	}
	return last
}

// rowsLoops reports "for rows.Next()" loops on a rows variable whose Err
// method fn never calls.
func (s *fnScope) rowsLoops() {
	info := s.pass.TypesInfo
	errCalled := map[types.Object]bool{}
	handedOn := map[types.Object]bool{}
	ast.Inspect(s.body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		if sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr); ok && sel.Sel.Name == "Err" {
			if id, ok := ast.Unparen(sel.X).(*ast.Ident); ok {
				errCalled[info.Uses[id]] = true
			}
		}
		for _, arg := range call.Args {
			if id, ok := ast.Unparen(arg).(*ast.Ident); ok && isRows(info.TypeOf(id)) {
				handedOn[info.Uses[id]] = true // the callee may check Err
			}
		}
		return true
	})
	ast.Inspect(s.body, func(n ast.Node) bool {
		loop, ok := n.(*ast.ForStmt)
		if !ok || loop.Cond == nil {
			return true
		}
		call, ok := ast.Unparen(loop.Cond).(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Next" {
			return true
		}
		id, ok := ast.Unparen(sel.X).(*ast.Ident)
		if !ok || !isRows(info.TypeOf(id)) {
			return true
		}
		if obj := info.Uses[id]; !errCalled[obj] && !handedOn[obj] {
			s.report(loop.Pos(), "%s.Next loop without %s.Err(): an error that ends the rows early (a serialization failure, a lost connection) is dropped and fn goes on with partial results, which may commit; check %s.Err() after the loop and return it", id.Name, id.Name, id.Name)
		}
		return true
	})
}

// unreadErrors reports an error of a statement assigned to a variable that
// is never read afterwards, or overwritten in the same block first.
func (s *fnScope) unreadErrors() {
	info := s.pass.TypesInfo
	type event struct {
		pos   token.Pos
		write bool
		block *ast.BlockStmt
		call  *ast.CallExpr
	}
	events := map[types.Object][]event{}
	var blocks []*ast.BlockStmt
	lhsIdents := map[*ast.Ident]bool{}
	var visit func(n ast.Node) bool
	visit = func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BlockStmt:
			blocks = append(blocks, n)
			for _, st := range n.List {
				ast.Inspect(st, visit)
			}
			blocks = blocks[:len(blocks)-1]
			return false
		case *ast.AssignStmt:
			var call *ast.CallExpr
			idx := -1
			if len(n.Rhs) == 1 {
				if c, ok := ast.Unparen(n.Rhs[0]).(*ast.CallExpr); ok {
					call, idx = c, s.errorResult(c)
				}
			}
			for i, l := range n.Lhs {
				id, ok := l.(*ast.Ident)
				if !ok || id.Name == "_" {
					continue
				}
				lhsIdents[id] = true
				obj := info.ObjectOf(id)
				if obj == nil || !isError(obj.Type()) {
					continue
				}
				ev := event{pos: n.End(), write: true, block: blocks[len(blocks)-1]}
				if i == idx {
					ev.call = call
				}
				events[obj] = append(events[obj], ev)
			}
		case *ast.Ident:
			if lhsIdents[n] {
				return true
			}
			if obj := info.Uses[n]; obj != nil && isError(obj.Type()) {
				events[obj] = append(events[obj], event{pos: n.Pos()})
			}
		}
		return true
	}
	ast.Inspect(s.body, visit)
	for obj, evs := range events {
		if !s.inside(obj) {
			continue // an outer variable: read after fn, maybe
		}
		for i, ev := range evs {
			if ev.call == nil {
				continue
			}
			unread := true
			for _, next := range evs[i+1:] {
				if !next.write {
					unread = false
					break
				}
				if next.block == ev.block {
					break // overwritten before any read
				}
			}
			// Reads inside a loop body before the write count too.
			for _, prev := range evs[:i] {
				if !prev.write && inLoopWith(s.body, prev.pos, ev.pos) {
					unread = false
				}
			}
			if unread {
				s.report(ev.call.Pos(), "error of %s assigned to %s and never read: %s; return it", callName(ev.call), obj.Name(), whyErrors)
			}
		}
	}
}

// inLoopWith reports whether a and b are in one loop's body.
func inLoopWith(root ast.Node, a, b token.Pos) bool {
	found := false
	ast.Inspect(root, func(n ast.Node) bool {
		var body *ast.BlockStmt
		switch l := n.(type) {
		case *ast.ForStmt:
			body = l.Body
		case *ast.RangeStmt:
			body = l.Body
		}
		if body != nil && body.Pos() <= a && a < body.End() && body.Pos() <= b && b < body.End() {
			found = true
		}
		return !found
	})
	return found
}

func isError(t types.Type) bool {
	return t != nil && types.Identical(t, types.Universe.Lookup("error").Type())
}

// typeKey is "pkgpath.Name" of t or of what t points to.
func typeKey(t types.Type) string {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := types.Unalias(t).(*types.Named)
	if !ok || n.Obj().Pkg() == nil {
		return ""
	}
	return n.Obj().Pkg().Path() + "." + n.Obj().Name()
}

// isQueries reports whether t is a repository in sqlc's fashion: a named
// type (or a pointer to one) with a WithTx method.
func isQueries(t types.Type) bool {
	if t == nil {
		return false
	}
	if _, ok := t.Underlying().(*types.Interface); ok {
		return false
	}
	obj, _, _ := types.LookupFieldOrMethod(t, true, nil, "WithTx")
	_, ok := obj.(*types.Func)
	return ok
}

func inDBPackage(t types.Type) bool {
	k := typeKey(t)
	for _, p := range dbPackages {
		if strings.HasPrefix(k, p+".") || strings.HasPrefix(k, p+"/") {
			return true
		}
	}
	return false
}

func isRows(t types.Type) bool {
	switch typeKey(t) {
	case "database/sql.Rows", "github.com/jmoiron/sqlx.Rows", "github.com/jackc/pgx/v5.Rows":
		return true
	}
	return false
}

// funcName is the full name of the function or method call calls:
// "pkg/path.Func" or "(*pkg/path.T).Method"; "" if not static.
func funcName(info *types.Info, call *ast.CallExpr) string {
	var id *ast.Ident
	switch f := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		id = f
	case *ast.SelectorExpr:
		id = f.Sel
	case *ast.IndexExpr: // an instantiated generic function
		return funcName(info, &ast.CallExpr{Fun: f.X})
	default:
		return ""
	}
	fn, ok := info.Uses[id].(*types.Func)
	if !ok {
		return ""
	}
	return fn.FullName()
}

func shortName(full string) string {
	full = strings.NewReplacer("net/http.", "http.", "(*net/http.", "(*http.").Replace(full)
	return full
}

func callName(call *ast.CallExpr) string {
	return fmt.Sprintf("%s(...)", types.ExprString(call.Fun))
}
