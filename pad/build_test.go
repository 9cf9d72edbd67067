package pad

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/arch/x86/x86asm"

	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/jit"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/x86"
)

// A pad decodes instruction by instruction from its first byte to its
// programs; its landmarks are where the engine looks for them: the system
// call a thread with a signal held stops at, the popfq and lea after the held
// check, the jump back to the code after the covered bytes, the fixup of
// the thread-id load; the covered instructions are there twice (the copy
// run with a record pending maps each of its instructions to its twin in
// the other), and the pool's addresses are the last 16 bytes.
func TestBuildLandmarks(t *testing.T) {
	const addr, at, region = 0x401000, 0x501040, 0x7f0000000000
	fn := []byte{0x55, 0x48, 0x89, 0xe5, 0x48, 0x8d, 0x04, 0x7f, 0x5d, 0xc3} // push; mov; lea; pop; ret
	plan := x86.PlanJump(fn, addr, addr, 64)
	if !plan.OK() {
		t.Fatal(plan.Reason)
	}
	f, err := dpdf.ParseSource("t.dpdf", []byte("name = t\nmodtype = user\nvars = 1\noffset = 0x401000\ninc lv,0\npush r,rdi\nlog 1\nexit 1\n"), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := compiler.Compile(f, rpn.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prog, err := rpn.Load(m)
	if err != nil {
		t.Fatal(err)
	}
	code, err := jit.Compile(prog, 0, jit.Layout{LV: region + OffLV, GV: region + 0x100000, Probe: region + OffCounters, Clock: region + OffClock, Threads: region + OffThreads})
	if err != nil {
		t.Fatal(err)
	}
	const pool = 0x7f1000000000
	p, err := Build(Spec{At: at, Addr: addr, Covered: plan.Covered, Probes: []Probe{{Code: code, LogMax: 1024}}, Region: region, RingSize: DefaultRingSize, Held: at - 0x40, Pool: pool, Live: 0x7f2000000000})
	if err != nil {
		t.Fatal(err)
	}
	if p.Ret != addr+8 {
		t.Errorf("ret %#x, want %#x (push, mov, lea covered)", p.Ret, addr+8)
	}
	seen := map[uint64]string{}
	pc := uint64(at)
	end := at + uint64(len(p.Code)) - 16
	if binary.LittleEndian.Uint64(p.Code[len(p.Code)-16:]) != FirstSlot(pool) || binary.LittleEndian.Uint64(p.Code[len(p.Code)-8:]) != pool+PoolSize {
		t.Errorf("the pool's addresses are not the last 16 bytes: % x", p.Code[len(p.Code)-16:])
	}
	for off := 0; pc < end; {
		in, err := x86asm.Decode(p.Code[off:], 64)
		if err != nil {
			t.Fatalf("at %#x: %v", pc, err)
		}
		seen[pc] = x86asm.GNUSyntax(in, pc, nil)
		off += in.Len
		pc += uint64(in.Len)
	}
	for a, want := range map[uint64]string{p.Popf: "popfq", p.Lea: "lea 0x80(%rsp),%rsp", p.Final: "jmpq 0x401008", p.Back: fmt.Sprintf("jmpq %#x", p.Final)} {
		if seen[a] != want {
			t.Errorf("at %#x: %q, want %q", a, seen[a], want)
		}
	}
	if seen[p.Sys] != "syscall" {
		t.Errorf("the stop for a held signal at %#x is %q, not a system call", p.Sys, seen[p.Sys])
	}
	for a := range p.Displaced {
		if _, ok := seen[a]; !ok {
			t.Errorf("displaced instruction at %#x is not on an instruction boundary of the pad", a)
		}
	}
	if len(p.Displaced) != 9 || len(p.Pending) != 3 || len(p.Holding) != 3 {
		t.Errorf("%d displaced instructions, %d of them run with a record pending, %d with none; want 9, 3, 3", len(p.Displaced), len(p.Pending), len(p.Holding))
	}
	for a, c := range p.Holding {
		if p.Displaced[a] != p.Displaced[c] || seen[a] != seen[c] || a == c || c < p.CopyC {
			t.Errorf("%#x (%s) has twin %#x (%s) in the checked copy (from %#x)", a, seen[a], c, seen[c], p.CopyC)
		}
	}
	if !strings.HasPrefix(seen[p.Checked], "jne ") {
		t.Errorf("the first held check's jump is %q", seen[p.Checked])
	}
	for i, want := range []string{"pop %rbp", "pop %rax", "popfq", "lea 0x80(%rsp),%rsp"} {
		if seen[p.Unwind[i]] != want {
			t.Errorf("unwind %d: %q, want %q", i, seen[p.Unwind[i]], want)
		}
	}
	deltas := map[uint64]int64{addr: 0, addr + 1: -8, addr + 4: -8} // push, mov, lea
	for b, tw := range p.Pending {
		if p.Displaced[b] != p.Displaced[tw.A] || seen[b] != seen[tw.A] || b == tw.A {
			t.Errorf("%#x (%s) has twin %#x (%s)", b, seen[b], tw.A, seen[tw.A])
		}
		if d := deltas[p.Displaced[b]]; d != tw.Delta {
			t.Errorf("%#x (%s): rsp moved %d before it, want %d", b, seen[b], tw.Delta, d)
		}
	}
	fixed := 0
	for from, to := range p.Fixups {
		if from < at || from >= at+uint64(len(p.Code)) || to < at || to >= at+uint64(len(p.Code)) {
			t.Errorf("fixup %#x -> %#x outside the pad", from, to)
		}
		if seen[from] == "mov (%rdx,%rcx),%eax" {
			fixed++
		}
	}
	if fixed != 1 {
		t.Errorf("the thread-id load has %d fixups, want 1", fixed)
	}
}
