package rpn_test

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/rpn"
)

// layouts is a Resolver with made-up symbols and types.
type layouts map[string]uint64

func (l layouts) get(k string) (uint64, error) {
	if v, ok := l[k]; ok {
		return v, nil
	}
	return 0, fmt.Errorf("%s is not known", k)
}
func (l layouts) Symbol(name string) (uint64, error) { return l.get(name) }
func (l layouts) Sizeof(typ string) (uint64, error)  { return l.get("sizeof " + typ) }
func (l layouts) Offsetof(typ, field string) (uint64, error) {
	return l.get("offsetof " + typ + " " + field)
}
func (l layouts) LineAddr(file string, line int) (uint64, int, error) {
	v, err := l.get(fmt.Sprintf("%s:%d", file, line))
	return v, line, err
}
func (l layouts) BuildID() []byte { return nil }

var testLayouts = layouts{
	"a": 0x401000, "b": 0x402230, "c": 0xffffffff81000000, "jiffies": 0xffffffff82a05000,
	"sizeof struct req": 0x58, "sizeof long": 8, "offsetof struct req flags": 0x1c,
	"offsetof struct req slot[3].len": 0x34, "fs/open.c:1234": 0x401234,
}

func compileWith(t *testing.T, src string, r rpn.Resolver) (*rpn.Module, error) {
	t.Helper()
	f, err := dpdf.ParseSource("sum.dpdf", []byte(src), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		return nil, err
	}
	var opts rpn.CompileOptions
	if r != nil {
		opts.Symbols = r
	}
	return compiler.Compile(f, opts)
}

// TestSumsEvaluateAsTheExpression: for every push d and offset
// expression the compiler keeps, the Sum it stores evaluates, against the
// same symbols and types, to what the expression evaluates to (the
// build-time value), with and without symbols at build time.
func TestSumsEvaluateAsTheExpression(t *testing.T) {
	one := func(name string, kind rpn.TermKind, f uint64, field string) rpn.Term {
		return rpn.Term{Kind: kind, Factor: f, Name: name, Field: field}
	}
	sizeReq := one("struct req", rpn.TermSizeof, 1, "")
	flags := one("struct req", rpn.TermOffsetof, 1, "flags")
	for _, tc := range []struct {
		expr string
		want rpn.Sum
	}{
		{"a", rpn.Sum{Terms: []rpn.Term{one("a", 0, 1, "")}}},
		{"a+0x1c", rpn.Sum{Terms: []rpn.Term{one("a", 0, 1, "")}, Addend: 0x1c}},
		{"a-8", rpn.Sum{Terms: []rpn.Term{one("a", 0, 1, "")}, Addend: math.MaxUint64 - 7}},
		{"b-a", rpn.Sum{Terms: []rpn.Term{one("b", 0, 1, ""), one("a", 0, math.MaxUint64, "")}}},
		{"a-a+16", rpn.Sum{Addend: 16}},
		{"(a - a) / 2 + 1", rpn.Sum{Addend: 1}},
		{"sizeof(struct req)", rpn.Sum{Terms: []rpn.Term{sizeReq}}},
		{"offsetof(struct req, flags)+8", rpn.Sum{Terms: []rpn.Term{flags}, Addend: 8}},
		{"offsetof(struct req, slot[3].len)", rpn.Sum{Terms: []rpn.Term{one("struct req", rpn.TermOffsetof, 1, "slot[3].len")}}},
		{"3*sizeof(struct req)", rpn.Sum{Terms: []rpn.Term{one("struct req", rpn.TermSizeof, 3, "")}}},
		{"sizeof(struct req)*3", rpn.Sum{Terms: []rpn.Term{one("struct req", rpn.TermSizeof, 3, "")}}},
		{"sizeof(long) << 4", rpn.Sum{Terms: []rpn.Term{one("long", rpn.TermSizeof, 16, "")}}},
		{"a << 64", rpn.Sum{}},
		{"-a", rpn.Sum{Terms: []rpn.Term{one("a", 0, math.MaxUint64, "")}}},
		{"~a", rpn.Sum{Terms: []rpn.Term{one("a", 0, math.MaxUint64, "")}, Addend: math.MaxUint64}},
		{"+a", rpn.Sum{Terms: []rpn.Term{one("a", 0, 1, "")}}},
		{"2*(a + sizeof(struct req)) - ~b + (1 << 4) * c - a", rpn.Sum{Terms: []rpn.Term{
			one("a", 0, 1, ""), one("struct req", rpn.TermSizeof, 2, ""), one("b", 0, 1, ""), one("c", 0, 16, "")}, Addend: 1}},
		{"jiffies + (0x1000 / 16 % 7 | 0x30 & 0xf0 ^ 1)", rpn.Sum{Terms: []rpn.Term{one("jiffies", 0, 1, "")}, Addend: 0x1000/16%7 | 0x30&0xf0 ^ 1}},
	} {
		for _, syms := range []bool{false, true} {
			var r rpn.Resolver
			if syms {
				r = testLayouts
			}
			push, err := compileWith(t, "name = x\nmodtype = user\noffset = 0x1000\npush d,"+tc.expr+"\nlog 1\nexit\n", r)
			if err != nil {
				t.Fatalf("push d,%s: %v", tc.expr, err)
			}
			loc, err := compileWith(t, "name = x\nmodtype = user\noffset = "+tc.expr+"\nexit\n", r)
			if err != nil {
				t.Fatalf("offset = %s: %v", tc.expr, err)
			}
			rl, l := push.Relocs[0], loc.Probes[0].Loc
			if !reflect.DeepEqual(rl.Sum, tc.want) || !reflect.DeepEqual(l.Sum, tc.want) {
				t.Errorf("%s: reloc %v, location %v, want %v", tc.expr, rl.Sum, l.Sum, tc.want)
			}
			if rl.Expr != tc.expr || l.Text != tc.expr || l.Kind != rpn.LocExpr {
				t.Errorf("%s: text %q, %q, kind %v", tc.expr, rl.Expr, l.Text, l.Kind)
			}
			if rl.Resolved != syms || l.Resolved != syms {
				t.Errorf("%s: resolved %v %v with symbols %v", tc.expr, rl.Resolved, l.Resolved, syms)
			}
			if !syms {
				continue
			}
			v, err := rl.Sum.Eval(testLayouts)
			if err != nil || v != rl.Value || v != l.Addr {
				t.Errorf("%s: Sum evaluates to %#x (%v); the expression to %#x as push d, %#x as offset", tc.expr, v, err, rl.Value, l.Addr)
			}
		}
	}
}

// TestLineAndAbsoluteLocations: a source line is kept as file and line,
// an address as the address, neither with a Sum.
func TestLineAndAbsoluteLocations(t *testing.T) {
	m, err := compileWith(t, "name = x\nmodtype = user\noffset = fs/open.c:1234\nexit\noffset = 0x1000+0x10*2\nexit\n", testLayouts)
	if err != nil {
		t.Fatal(err)
	}
	want := []rpn.Location{
		{Text: "fs/open.c:1234", Kind: rpn.LocLine, File: "fs/open.c", Line: 1234, Addr: 0x401234, Resolved: true},
		{Text: "0x1000+0x10*2", Kind: rpn.LocAbsolute, Addr: 0x1020, Resolved: true},
	}
	for i, w := range want {
		if got := m.Probes[i].Loc; !reflect.DeepEqual(got, w) {
			t.Errorf("probe %d: got %+v, want %+v", i, got, w)
		}
	}
}

// TestNotASum: an expression that depends on symbols or types and is not
// a sum of them times constants is refused at its operator, saying how
// to compute it instead.
func TestNotASum(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"push d,jiffies & 0xfff", "sum.dpdf:4:16: jiffies & 0xfff masks a value that depends on symbols or types: only sums of symbols, sizeof and offsetof times constants can be resolved at insert time; push the operands separately and combine them with and"},
		{"push d,8 + sizeof(struct req) / 8", "sum.dpdf:4:31: sizeof(struct req) / 8 divides with a value that depends on symbols or types"},
		{"push d,a * b", "sum.dpdf:4:10: a * b multiplies two values that depend on symbols or types"},
		{"push d,1 << a", "sum.dpdf:4:10: 1 << a shifts by a value that depends on symbols or types"},
		{"push d,a >> 3", "combine them with shr"},
		{"push d,a | 1", "combine them with or"},
		{"push d,a ^ b", "combine them with xor"},
		{"push d,a % 16", "combine them with div"},
		{"offset = a & ~0xf", "sum.dpdf:3:12: a & ~0xf masks a value that depends on symbols or types: a location adds and subtracts symbols and constants (do_fork+0x1c), possibly times constants"},
	} {
		src := "name = x\nmodtype = user\n"
		if !strings.HasPrefix(tc.src, "offset") {
			src += "offset = 0x1000\n"
		}
		for _, r := range []rpn.Resolver{nil, testLayouts} {
			_, err := compileWith(t, src+tc.src+"\nexit\n", r)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: got %v, want %q", tc.src, err, tc.want)
			}
		}
	}
}

// TestTooManyTerms: a sum of more distinct symbols than a PPDF holds is
// refused where it is written.
func TestTooManyTerms(t *testing.T) {
	var names []string
	for i := range rpn.MaxTerms + 1 {
		names = append(names, fmt.Sprintf("s%d", i))
	}
	_, err := compileWith(t, "name = x\nmodtype = user\noffset = 0x1000\npush d,"+strings.Join(names, "+")+"\nexit\n", nil)
	if want := fmt.Sprintf("sum.dpdf:4:8: push d uses %d distinct symbols and types, at most %d", rpn.MaxTerms+1, rpn.MaxTerms); err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
}

// notLinked is a Resolver whose symbols exist but have no address yet
// (a kernel module's .ko): Symbol wraps rpn.ErrAtInsertion.
type notLinked struct{ layouts }

func (notLinked) Symbol(name string) (uint64, error) {
	return 0, fmt.Errorf("%w: %s is in a .ko", rpn.ErrAtInsertion, name)
}

// A location and a constant whose symbols are known only at insertion
// stay symbolic and unresolved, without an error; the types still
// resolve; any other Symbol error is still a compile error.
func TestAtInsertion(t *testing.T) {
	src := "name = mod\nmodtype = kernel\noffset = a+4\npush d,b+sizeof(struct req)\nlog 1\nexit 1\n"
	m, err := compileWith(t, src, notLinked{testLayouts})
	if err != nil {
		t.Fatal(err)
	}
	p := m.Probes[0]
	if p.Loc.Resolved || p.Loc.Kind != rpn.LocExpr || len(p.Loc.Sum.Terms) != 1 || p.Loc.Sum.Terms[0].Name != "a" {
		t.Errorf("location %+v: want a+4 unresolved", p.Loc)
	}
	if len(m.Relocs) != 1 || m.Relocs[0].Resolved {
		t.Errorf("relocations %+v: want one, unresolved", m.Relocs)
	}
	if _, err := compileWith(t, src, layouts{}); err == nil || !strings.Contains(err.Error(), "a is not known") {
		t.Errorf("an unknown symbol: %v, want a compile error", err)
	}
}

// In a kernel module's watch address, "task" is the task_struct of the
// process the kernel target's probes follow: known at insertion, so a
// build with symbols leaves the address symbolic (its types resolved);
// elsewhere (a process's watch, an offset) it is a symbol like any other.
func TestWatchTaskAtInsertion(t *testing.T) {
	l := layouts{"offsetof struct task_struct comm": 0x6d8}
	m, err := compileWith(t, "name = vmlinux\nmodtype = kernel\nwatch = task + offsetof(struct task_struct, comm),1,w\nexit 0\n", l)
	if err != nil {
		t.Fatal(err)
	}
	if p := m.Probes[0]; p.Loc.Resolved || p.Loc.Kind != rpn.LocExpr || len(p.Loc.Sum.Terms) != 2 || p.Loc.Sum.Terms[0].Name != "task" {
		t.Errorf("location %+v: want task + offsetof unresolved", p.Loc)
	}
	for _, src := range []string{
		"name = ./a.out\nmodtype = user\nwatch = task+8,8,w\nexit 0\n",
		"name = vmlinux\nmodtype = kernel\noffset = task+8\nexit 0\n",
		"name = vmlinux\nmodtype = kernel\nwatch = task + offsetof(struct task_struct, nope),8,w\nexit 0\n",
	} {
		if _, err := compileWith(t, src, l); err == nil || !strings.Contains(err.Error(), "is not known") {
			t.Errorf("%q: %v, want an unknown name", src, err)
		}
	}
}
