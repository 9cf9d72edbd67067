package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/ppdf"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/symbols"
)

// TestSumsResolveAsTheTextDid: against a real ELF built with -g, every
// kind of relocation (a symbol, sizeof, offsetof, their sums, differences
// and multiples) and every kind of location in a PPDF resolves, from its
// stored Sum or file and line, to what parsing its text again gave
// (what the engine did before PPDF version 2), with and without a load
// bias, whether the PPDF was built with --symbols or without. With
// --symbols, the build-time value moved by the bias is the same value too
// (what the engine uses when the live file cannot answer).
func TestSumsResolveAsTheTextDid(t *testing.T) {
	need(t, "gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "prog.c")
	os.WriteFile(src, []byte(`#include <stdio.h>
struct req { long id; char name[16]; int flags; struct { short a, b; } slot[4]; };
struct req current = { 7, "x", 1 };
long counter;
int handle(struct req *r) {
	int n = r->flags * 2;   /* line 6 */
	return n + (int)r->id;
}
int main(void) {
	counter++;
	return handle(&current) == 0;
}
`), 0o644)
	bin := filepath.Join(dir, "prog")
	if out, err := exec.Command("gcc", "-g", "-O0", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	exprs := []string{
		"current",
		"sizeof(struct req)",
		"offsetof(struct req, flags)",
		"offsetof(struct req, slot[2].b)+8",
		"handle-main",
		"main - handle + 0x10",
		"2*sizeof(struct req) + current - offsetof(struct req, name)",
		"~counter",
		"-counter",
		"counter << 3",
		"(counter - counter) / 4 + sizeof(long) * 3",
	}
	var b strings.Builder
	b.WriteString("name = prog\nmodtype = user\noffset = handle\n")
	for _, e := range exprs {
		fmt.Fprintf(&b, "push d,%s\n", e)
	}
	fmt.Fprintf(&b, "log %d\nexit\noffset = handle+4\nexit\noffset = main - handle + handle\nexit\noffset = prog.c:6\nexit\noffset = 0x1000\nexit\n", len(exprs))
	dpdfPath := filepath.Join(dir, "p.dpdf")
	os.WriteFile(dpdfPath, []byte(b.String()), 0o644)
	withSyms, without := filepath.Join(dir, "with.ppdf"), filepath.Join(dir, "without.ppdf")
	mustRun(t, "build", dpdfPath, "--symbols", bin, "-o", withSyms)
	mustRun(t, "build", dpdfPath, "-o", without)

	tab, err := symbols.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	set := symbols.NewSet(tab)
	for _, path := range []string{withSyms, without} {
		m, err := ppdf.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Relocs) != len(exprs) {
			t.Fatalf("%s: %d relocs, want %d", path, len(m.Relocs), len(exprs))
		}
		resolved := path == withSyms
		for _, bias := range []uint64{0, 0x5555_5555_4000} {
			env := probe.Symbols{Set: set, Bias: bias}
			for i, r := range m.Relocs {
				if r.Expr != exprs[i] || r.Resolved != resolved {
					t.Fatalf("%s: reloc %d is %q resolved %v", path, i, r.Expr, r.Resolved)
				}
				want := evalText(t, r.Expr, env)
				got, err := r.Sum.Eval(env)
				if err != nil || got != want {
					t.Errorf("%s: push d,%s at bias %#x: the Sum %v gives %#x (%v), the text %#x", path, r.Expr, bias, r.Sum, got, err, want)
				}
				if resolved && r.Value+r.Sum.BiasFactor()*bias != want {
					t.Errorf("%s: push d,%s at bias %#x: the build-time value %#x moved by %d×bias is not %#x", path, r.Expr, bias, r.Value, r.Sum.BiasFactor(), want)
				}
			}
		}
		env := probe.Symbols{Set: set}
		kinds := []rpn.LocKind{rpn.LocExpr, rpn.LocExpr, rpn.LocExpr, rpn.LocLine, rpn.LocAbsolute}
		for i, p := range m.Probes {
			l := p.Loc
			if l.Kind != kinds[i] {
				t.Fatalf("%s: probe %d %q is %v", path, i, l.Text, l.Kind)
			}
			var got, want uint64
			switch l.Kind {
			case rpn.LocExpr:
				want = evalText(t, l.Text, env)
				got, err = l.Sum.Eval(env)
			case rpn.LocLine:
				// as the engine split the text before
				file, line, _ := strings.Cut(l.Text, ":")
				var n int
				fmt.Sscan(line, &n)
				want, _, err = set.LineAddr(file, n)
				if err != nil {
					t.Fatal(err)
				}
				got, _, err = set.LineAddr(l.File, int(l.Line))
			case rpn.LocAbsolute:
				want, got = 0x1000, l.Addr
			}
			if err != nil || got != want || resolved && l.Addr != want {
				t.Errorf("%s: offset = %s: %#x (%v), the text gives %#x, built as %#x", path, l.Text, got, err, want, l.Addr)
			}
		}

		// what a process target does with it (probe.Resolver): from the
		// file's symbols, and for the PPDF built --symbols from its
		// values of build time where the file is stripped; each probe's
		// address and each push d, moved by the load bias as the text
		// would be
		for _, bias := range []uint64{0, 0x5555_5555_4000} {
			env := probe.Symbols{Set: set, Bias: bias}
			lines := func(file string, line int) (uint64, error) {
				a, _, err := set.LineAddr(file, line)
				return a, err
			}
			rs := map[string]probe.Resolver{"the file's symbols": {Env: probe.Symbols{Set: set}, Bias: bias, Lines: lines}}
			if resolved {
				rs["a stripped file"] = probe.Resolver{Bias: bias}
			}
			for what, r := range rs {
				prog, refused, err := r.Relocate(m)
				if err != nil || refused != nil {
					t.Fatalf("%s, %s, bias %#x: relocate: %v %v", path, what, bias, err, refused)
				}
				for i, rl := range m.Relocs {
					want := evalText(t, rl.Expr, env)
					if got := binary.LittleEndian.Uint64(prog.Module().Code[rl.Off:]); got != want {
						t.Errorf("%s, %s, bias %#x: push d,%s holds %#x, the text gives %#x", path, what, bias, exprs[i], got, want)
					}
				}
				for i := range m.Probes {
					d := &m.Probes[i]
					want := uint64(0x1000)
					switch d.Loc.Kind {
					case rpn.LocExpr:
						want = evalText(t, d.Loc.Text, probe.Symbols{Set: set})
					case rpn.LocLine:
						want, _ = lines(d.Loc.File, int(d.Loc.Line))
					}
					if got, err := r.Location(d); err != nil || got != want+bias {
						t.Errorf("%s, %s, bias %#x: offset = %s at %#x (%v), want %#x", path, what, bias, d.Loc.Text, got, err, want+bias)
					}
				}
			}
		}
		if !resolved {
			// stripped, and nothing from build time: the probe is refused
			_, refused, err := probe.Resolver{}.Relocate(m)
			if err != nil || len(refused) != 1 || refused[0] != "push d,current: no symbols" {
				t.Errorf("%s stripped: %v %v", path, err, refused)
			}
		}
	}
}

// evalText evaluates an expression from its text, as the engine did
// before PPDF version 2.
func evalText(t *testing.T, text string, env dpdf.Env) uint64 {
	t.Helper()
	n, err := dpdf.ParseExpr(text)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dpdf.Eval(n, env)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
