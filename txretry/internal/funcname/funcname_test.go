package funcname

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

type service struct{ n int }

func (s *service) Transfer() error { s.n++; return nil }
func (s *service) Deposit() error  { s.n--; return nil }

type repo interface{ Transfer() error }

func generic[T any]() error { return nil }

func TestOf(t *testing.T) {
	s := &service{}
	var r repo = s
	mk := func(n int) func() int { return func() int { return n } }
	const pkg = "github.com/txretry/txretry/txretry/internal/funcname"
	same := []struct {
		what string
		a, b any
	}{
		{"a method value and the method expression", s.Transfer, (*service).Transfer},
		{"method values of two receivers", s.Transfer, (&service{}).Transfer},
		{"closures written at one place", mk(1), mk(2)},
		{"two instantiations of a generic function", generic[int], generic[string]},
		{"a nil function and no function", (func())(nil), 42},
	}
	for _, c := range same {
		if a, b := Of(c.a), Of(c.b); a != b {
			t.Errorf("%s: %q and %q, want one name", c.what, a, b)
		}
	}
	apart := []struct {
		what string
		a, b any
	}{
		{"two method values of one type", s.Transfer, s.Deposit},
		{"closures written at two places", func() {},
			func() {}},
		{"a closure and the function holding it", mk(1), TestOf},
		{"a method value of an interface and of its implementation", r.Transfer, s.Transfer},
	}
	for _, c := range apart {
		if a, b := Of(c.a), Of(c.b); a == b {
			t.Errorf("%s: both %q, want two names", c.what, a)
		}
	}
	want := map[string]any{
		pkg + ".(*service).Transfer": s.Transfer,
		pkg + ".repo.Transfer":       r.Transfer,
		pkg + ".generic[...]":        generic[int],
		pkg + ".TestOf":              TestOf,
		"":                           nil,
	}
	for name, f := range want {
		if got := Of(f); got != name {
			t.Errorf("Of(%T) = %q, want %q", f, got, name)
		}
	}
	if got := Of(mk(1)); !strings.HasPrefix(got, "funcname_test.go:") {
		t.Errorf("a closure: %q, want its file's base name and line", got)
	}
}

func TestClosureNames(t *testing.T) {
	for name, want := range map[string]bool{
		"example.com/svc.Outer.func1":           true,
		"example.com/svc.Outer.func1.2":         true,
		"example.com/svc.(*S).M.func3":          true,
		"main.main.callerA.outerInline.func3":   true,
		"example.com/svc.Outer":                 false,
		"example.com/svc.(*S).Transfer-fm":      false,
		"example.com/svc.function":              false,
		"example.com/yaml%2ev3.Generic[...]":    false,
		"example.com/svc.Outer[...].func1":      true,
		"example.com/svc.funcs":                 false,
		"example.com/svc.func":                  false,
		"example.com/svc.Outer.func12abc":       false,
		"example.com/svc.Outer.gowrap1":         false,
		"example.com/svc.Outer.func1.gowrap2.3": false,
	} {
		if got := closure(name); got != want {
			t.Errorf("closure(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestNamesAreTheSameFromAnyFolder builds one program from two folders and
// compares the names it prints: the same, and holding neither folder (the
// names key database locks that replicas built elsewhere share).
func TestNamesAreTheSameFromAnyFolder(t *testing.T) {
	src, err := os.ReadFile("funcname.go")
	if err != nil {
		t.Fatal(err)
	}
	probe, err := os.ReadFile(filepath.Join("testdata", "probe", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := os.ReadFile(filepath.Join("testdata", "probe", "svc", "svc.go"))
	if err != nil {
		t.Fatal(err)
	}
	var outs [2]string
	for i := range outs {
		dir := t.TempDir()
		files := map[string][]byte{
			"go.mod":               []byte("module example.com/probe\n\ngo 1.25\n"),
			"main.go":              probe,
			"svc/svc.go":           svc,
			"funcname/funcname.go": src,
		}
		for name, b := range files {
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command("go", "run", ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go run in %s: %v\n%s", dir, err, out)
		}
		outs[i] = string(out)
		if strings.Contains(outs[i], dir) || strings.Contains(outs[i], filepath.Base(dir)) {
			t.Errorf("the names hold the folder %s:\n%s", dir, out)
		}
	}
	if outs[0] != outs[1] {
		t.Errorf("the two builds name the functions differently:\n%s\n%s", outs[0], outs[1])
	}
	got := strings.Split(strings.TrimSpace(outs[0]), "\n")
	const pkg = "example.com/probe/svc"
	want := []string{pkg + ".(*Service).Transfer", pkg + ".(*Service).Transfer", pkg + ".(*Service).Deposit", pkg + ".Generic[...]"}
	if len(got) != 6 || !slices.Equal(got[:4], want) {
		t.Fatalf("names:\n%s\nwant %q, then two closures", outs[0], want)
	}
	for _, c := range got[4:] {
		if !strings.HasPrefix(c, "svc.go:") {
			t.Errorf("a closure: %q, want svc.go: and its line", c)
		}
	}
	if got[4] == got[5] {
		t.Errorf("closures from two places: both %q", got[4])
	}
}

func BenchmarkOf(b *testing.B) {
	s := &service{}
	for b.Loop() {
		_ = Of(s.Transfer)
	}
}
