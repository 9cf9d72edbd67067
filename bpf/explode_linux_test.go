//go:build linux

package bpf_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/bpf"
)

// diamonds writes n diamonds on the first argument's bits: diamond i
// increments lv[i%64] when bit i%64 of rdi is set.
func diamonds(b *strings.Builder, n int, label string) {
	for i := 0; i < n; i++ {
		fmt.Fprintf(b, "push u,rdi\nshr %d\npush d,1\nand\njz %s%d\ninc lv,%d\n%s%d: nop\n", i%64, label, i, i%64, label, i)
	}
}

// Many conditional branches: 400 diamonds, alone (straight mode), in an
// RPN loop run 3 times and in a routine called twice (loop mode), load
// and count exactly: each program runs at syscalls:sys_enter_getppid for
// this thread's getppid calls, beside rpn.Machine, and lv holds what the
// test computes from the calls' first argument. Straight, the verifier
// used to walk every path (past its million instructions at 400
// diamonds); in loop mode, the blocks again from every block before them.
func TestManyBranches(t *testing.T) {
	needBPF(t)
	r := newRegion(t, 9)
	const n = 400
	for _, c := range []struct {
		name  string
		times int // how many times the diamonds run per hit
		loop  bool
		src   func(b *strings.Builder)
	}{
		{"straight", 1, false, func(b *strings.Builder) {
			diamonds(b, n, "l")
		}},
		{"in a loop", 3, true, func(b *strings.Builder) {
			b.WriteString("push d,3\npop lv,64\nagain: nop\n")
			diamonds(b, n, "l")
			b.WriteString("dec lv,64\npush lv,64\njnz again\n")
		}},
		{"in a routine called twice", 2, true, func(b *strings.Builder) {
			b.WriteString("call f\ncall f\njmp out\nf: nop\n")
			diamonds(b, n, "l")
			b.WriteString("ret\nout: nop\n")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var b strings.Builder
			b.WriteString("vars = 65\nlogmax = 64\n")
			c.src(&b)
			b.WriteString("push lv,0\npush lv,63\nlog 2\nexit 1\n")
			p := compileSrc(t, b.String())
			rng := rand.New(rand.NewPCG(uint64(n), 1))
			t0 := time.Now()
			k := startRun(t, p, r, rng, false)
			took := time.Since(t0)
			if k.compiled.Loop != c.loop {
				t.Errorf("loop mode %v, want %v", k.compiled.Loop, c.loop)
			}
			w := work(t, k)
			t.Logf("%d RPN instructions, %d eBPF (loop mode %v, %d regions): the verifier processed %d (%.1f per RPN instruction, %.2f per eBPF; the compiler's bound %d); compiled, loaded and attached in %v",
				w.rpn, w.insns, k.compiled.Loop, k.compiled.Regions, w.processed, float64(w.processed)/float64(w.rpn), float64(w.processed)/float64(w.insns), k.compiled.Estimate(), took.Round(time.Millisecond))
			if w.processed > k.compiled.Estimate() {
				t.Errorf("the verifier processed %d instructions, past the compiler's bound %d", w.processed, k.compiled.Estimate())
			}
			want := make([]uint64, 65)
			copy(want, k.ref.LV)
			const hits = 20
			for h := 0; h < hits; h++ {
				args := [6]uint64{rng.Uint64()}
				for i := 0; i < n; i++ {
					if args[0]>>(i%64)&1 == 1 {
						want[i%64] += uint64(c.times)
					}
				}
				if d := k.hit(args); d != "" {
					t.Fatalf("hit %d (rdi %#x): %s", h+1, args[0], d)
				}
			}
			got, err := k.m.Vars(false)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 64; i++ {
				if got[i] != want[i] {
					t.Fatalf("lv[%d] = %d after %d hits, want %d", i, got[i], hits, want[i])
				}
			}
			cn, err := k.m.ProbeCounters(0)
			if err != nil {
				t.Fatal(err)
			}
			if cn.Runs != hits || cn.Faults != 0 {
				t.Errorf("counters %+v, want %d runs and no fault", cn, hits)
			}
		})
	}
}

// The verifier's work per RPN instruction, on large programs of one
// instruction (or one small group) repeated, straight and in loop mode:
// it stays within the compiler's bound (Compiled.Estimate, which Budget
// holds against the kernel's million), and per RPN instruction within
// the figure each group has here (docs/kernel.md has the table).
func TestVerifierCost(t *testing.T) {
	needBPF(t)
	r := newRegion(t, 1)
	for _, h := range []struct {
		name, src string
		most      float64 // the most processed per RPN instruction (the group's count of them)
	}{
		{"push d, add", "push d,1\nadd", 8},
		{"a diamond on an argument's bit", "push u,rdi\nshr %d\npush d,1\nand\njz l%d\npush d,%d\nlog 1\nl%d: nop", 14},
		{"push mrf", "push d,$BASE\npush mrf\npop", 20},
		{"log str", "push d,20\npush d,$BASE\nlog str", 140},
		{"log mrf", "push d,20\npush d,$BASE\nlog mrf", 45},
		{"log 32", "log 32", 90},
		{"idiv", "push u,rdi\npush u,rsi\nidiv\npop", 25},
		{"shifts by a register", "push u,rdi\npush u,rsi\nshl\npush u,rdi\nror\npop", 12},
		{"vfy_r", "push d,$BASE\nvfy_r\npop", 18},
		{"log lv", "log lv,0,16", 50},
		{"push lv indexed", "push d,3\npush lv\npop", 10},
		{"push lp, pop lp", "push lp\npop lp", 14},
	} {
		for _, loop := range []bool{false, true} {
			name := h.name
			if loop {
				name += " (loop mode)"
			}
			t.Run(name, func(t *testing.T) {
				var b strings.Builder
				b.WriteString("logmax = 400\nvars = 16\n")
				nr := 0
				for i := 0; nr < 1000; i++ {
					s := h.src
					if strings.Contains(s, "%d") {
						s = fmt.Sprintf(s, i%64, i, i, i)
					}
					b.WriteString(r.subst(s) + "\n")
					nr += strings.Count(s, "\n") + 1
				}
				b.WriteString("exit 1\n")
				p := compileSrc(t, b.String())
				prog, _, c := load(t, p, bpf.Options{Loop: loop})
				info, err := prog.Info()
				if err != nil {
					t.Fatal(err)
				}
				vi, ok := info.VerifiedInstructions()
				if !ok {
					t.Fatal("the kernel does not say how many instructions its verifier processed")
				}
				n := c.Spec.Instructions.Size() / 8
				rpnN := p.End(0) - p.Entry(0)
				per := float64(vi) / float64(rpnN)
				t.Logf("%d RPN, %d eBPF instructions (loop mode %v, %d regions): %d processed, %.2f per eBPF instruction, %.1f per RPN instruction; bound %d",
					rpnN, n, c.Loop, c.Regions, vi, float64(vi)/float64(n), per, c.Estimate())
				if int(vi) > c.Estimate() {
					t.Errorf("processed %d, past the compiler's bound %d", vi, c.Estimate())
				}
				if per > h.most {
					t.Errorf("%.1f processed per RPN instruction, more than %.0f", per, h.most)
				}
			})
		}
	}
}

// A program past the verifier's budget is refused before it is loaded,
// naming the probe, the DPDF line where it goes past, and the kernel's
// figure.
func TestTooLarge(t *testing.T) {
	var b strings.Builder
	const n = 8000 // log 32: about 75 eBPF instructions each, 2 verifier steps each at most
	for i := 0; i < n; i++ {
		b.WriteString("log 32\n")
	}
	b.WriteString("exit 1\n")
	p := compileSrc(t, b.String())
	c, err := bpf.CompileProbe(p, 0, bpf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Budget()
	var tl *bpf.TooLarge
	if !errors.As(err, &tl) {
		t.Fatalf("Budget: %v, want a TooLarge", err)
	}
	t.Log(err)
	m := regexp.MustCompile(`^test\.dpdf:(\d+):`).FindStringSubmatch(tl.Where)
	if m == nil || !tl.HasPC || tl.Max != 1000000 || tl.Need <= tl.Max || !strings.Contains(err.Error(), "1000000") {
		t.Fatalf("%#v", tl)
	}
	// the line where the estimate goes past a million: most of the way
	if line, _ := strconv.Atoi(m[1]); line < n/2 || line > n+3 {
		t.Errorf("past the budget at line %d of %d", line, n+3)
	}
	needBPF(t)
	if _, err := c.Load(); !errors.As(err, &tl) {
		t.Errorf("Load: %v, want the TooLarge before loading", err)
	}
}
