package main

import (
	"context"
	"database/sql"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
)

// pgxCall and sqlCall give each class a method value of one type (a method
// of its own, so a "-fm" wrapper of its own, not a closure), and each runs
// the call's body.
func TestCallMethodValues(t *testing.T) {
	name := func(fn any) string { return runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name() }
	ran := 0
	body := func(context.Context, querier) error { ran++; return nil }
	pc, sc := &pgxCall{body}, &sqlCall{body}
	seen := map[string]callClass{}
	for cl := range nClasses {
		for _, n := range []string{name(pc.method(cl)), name(sc.method(cl))} {
			if !strings.Contains(n, "Call).") || !strings.HasSuffix(n, "-fm") {
				t.Errorf("%s: fn %s is not a method value of pgxCall or sqlCall", classNames[cl], n)
			}
			if prev, dup := seen[n]; dup && prev != cl {
				t.Errorf("%s and %s share the method %s", classNames[prev], classNames[cl], n)
			}
			seen[n] = cl
		}
		_ = pc.method(cl)(context.Background(), nil)
		_ = sc.method(cl)(context.Background(), nil)
	}
	if ran != 2*int(nClasses) {
		t.Errorf("the methods ran the body %d times, want %d", ran, 2*nClasses)
	}
}

// fnConn records how the worker asked for each txretry call: through a
// method value or a fn literal, and with how many options.
type fnConn struct {
	conn
	methodValue []bool
	opts        []int
}

func (c *fnConn) runTxretry(_ context.Context, _ callClass, methodValue bool, _ txBody, opts []txretry.Option) error {
	c.methodValue = append(c.methodValue, methodValue)
	c.opts = append(c.opts, len(opts))
	return nil
}

func (c *fnConn) isolation() sql.IsolationLevel { return sql.LevelSerializable }

// mixed passes fn literals; mixed-mv, oltp and oltp-mv method values; only
// oltp adds an option (its label) to every call.
func TestWorkloadsPassMethodValues(t *testing.T) {
	var base int
	for _, tc := range []struct {
		workload    string
		methodValue bool
		labelled    bool
	}{
		{"mixed", false, false},
		{"mixed-mv", true, false},
		{"oltp", true, true},
		{"oltp-mv", true, false},
	} {
		wl := newWorkloadRun(workloadNamed(t, tc.workload), allDrivers[0], 1, 1)
		c := &fnConn{}
		w := newWorker(0, c, wl, &runner{name: "txretry", kind: kindTxretry}, nil, 1)
		for seq := range 50 {
			w.run(context.Background(), callID(0, seq), time.Now(), time.Now().Add(time.Hour), time.Minute)
		}
		if base == 0 {
			base = c.opts[0]
		}
		want := base
		if tc.labelled {
			want++
		}
		for i := range c.methodValue {
			if c.methodValue[i] != tc.methodValue || c.opts[i] != want {
				t.Fatalf("%s call %d: method value %v with %d options, want %v with %d", tc.workload, i, c.methodValue[i], c.opts[i], tc.methodValue, want)
			}
		}
		if w.st.commits != 50 {
			t.Errorf("%s: %d of 50 calls committed", tc.workload, w.st.commits)
		}
	}
}
