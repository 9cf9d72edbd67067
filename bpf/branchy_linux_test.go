//go:build linux

package bpf_test

import (
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/rpn/rpntest"
)

// tailRunner runs programs at syscalls:sys_enter_getppid through one
// program attached once that tail-calls the program in a one-entry
// program array: putting another program there is a map update, where
// attaching and detaching each would wait for the kernel's RCU grace
// periods (tens of milliseconds a program).
type tailRunner struct {
	arr *ebpf.Map
}

func newTailRunner(t testing.TB) *tailRunner {
	t.Helper()
	arr, err := ebpf.NewMap(&ebpf.MapSpec{Name: "gp_test_tail", Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { arr.Close() })
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "gp_test_tail",
		Type: ebpf.TracePoint,
		Instructions: asm.Instructions{
			asm.LoadMapPtr(asm.R2, arr.FD()),
			asm.Mov.Imm(asm.R3, 0),
			asm.FnTailCall.Call(),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
		License: "GPL",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Close() })
	l, err := bpf.AttachTracepoint(prog, "syscalls", "sys_enter_getppid")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return &tailRunner{arr: arr}
}

// run makes k's program the one the hits run, until the test ends.
func (tr *tailRunner) run(t testing.TB, k *kernelRun) {
	t.Helper()
	if err := tr.arr.Put(uint32(0), k.prog); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.arr.Delete(uint32(0)) })
}

var _ link.Link // (the runner's link is closed at cleanup)

// verifierWork is what the verifier did for a loaded program: the
// instructions it processed ("processed N insns"), against the eBPF
// program's size and the RPN program's.
type verifierWork struct {
	processed, insns, rpn int
}

func work(t testing.TB, k *kernelRun) verifierWork {
	t.Helper()
	info, err := k.prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	vi, ok := info.VerifiedInstructions()
	if !ok {
		t.Fatal("the kernel does not say how many instructions its verifier processed (bpf_prog_info.verified_insns, Linux 5.16)")
	}
	w := verifierWork{processed: int(vi), insns: int(k.compiled.Spec.Instructions.Size() / asm.InstructionSize)}
	w.rpn = k.p.End(0) - k.p.Entry(0)
	return w
}

// TestBranchy is the differential test on branch-heavy programs: 40 to 400
// groups of random instructions, a third of them jumps (diamonds on the
// arguments' bits, loops, jumps back, calls, rets), each program
// compiled as the compiler chooses (a quarter forced into loop mode),
// loaded, and hit 3 times beside rpn.Machine. Every program the RPN
// verifier accepts must load, and agree; the verifier's work must stay
// within what the compiler promised (Compiled.Estimate).
func TestBranchy(t *testing.T) {
	needBPF(t)
	r := newRegion(t, 5)
	tr := newTailRunner(t)
	n := 2000
	if testing.Short() {
		n = 200
	}
	if s := os.Getenv("GPROBES_BPF_BRANCHY"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	verified, loops, chunked := 0, 0, 0
	var most verifierWork
	worst := 0.0
	for seed := uint64(0); seed < uint64(n); seed++ {
		// every other program jumps forward only: no cycle, no call
		g := &rpntest.Gen{Rng: rand.New(rand.NewPCG(seed, 0xb7a)), Base: r.base, Pages: memPages, Target: rpntest.Kernel, Branchy: true, Forward: seed%2 == 1}
		m := g.Module()
		p, err := rpn.Load(m)
		if err != nil {
			t.Fatalf("seed %d: the generator wrote a program the RPN verifier refuses: %v", seed, err)
		}
		verified++
		ok := t.Run("", func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			k := prepareRun(t, p, r, g.Rng, seed%4 == 1) // an acyclic program forced into loop mode now and then
			tr.run(t, k)
			if k.compiled.Loop {
				loops++
			}
			if k.compiled.Regions > 1 {
				chunked++
			}
			w := work(t, k)
			if est := k.compiled.Estimate(); w.processed > est {
				t.Errorf("seed %d: the verifier processed %d instructions, more than the %d the compiler estimates (%d eBPF, %d RPN instructions, loop mode %v)", seed, w.processed, est, w.insns, w.rpn, k.compiled.Loop)
			}
			if f := float64(w.processed) / float64(w.rpn); f > worst {
				worst, most = f, w
			}
			for i := 0; i < 3; i++ {
				var args [6]uint64
				for j := range args {
					args[j] = randWord(g.Rng, 8)
				}
				if d := k.hit(args); d != "" {
					t.Fatalf("seed %d, hit %d (args %#x): %s\n%s", seed, i+1, args, d, p.Listing(0))
				}
			}
		})
		if !ok {
			break
		}
	}
	t.Logf("%d programs of %d verified, loaded and agreed with the machine, 3 hits each (%d in loop mode, %d of them in more than one region); the most the verifier processed per RPN instruction: %.1f (%d for %d RPN, %d eBPF instructions)",
		verified, n, loops, chunked, worst, most.processed, most.rpn, most.insns)
}
