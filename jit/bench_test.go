//go:build linux && amd64

package jit_test

import (
	"testing"

	"github.com/gprobes/gprobes/internal/jitexec"
	"github.com/gprobes/gprobes/jit"
	"github.com/gprobes/gprobes/rpn"
)

// The cost of a hit of compiled code, called through the test trampoline
// (which saves and restores Go's registers and switches stacks: measured
// alone by BenchmarkTrampoline) with the pad's registers.
func benchHit(b *testing.B, src string) {
	h := newHarness(b, 12)
	p := compileSrc(b, src)
	r, err := h.start(p)
	if err != nil {
		b.Fatal(err)
	}
	st, err := jitexec.NewStack()
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	frame, scratch := uintptr(h.addr(dFrame)), uintptr(h.addr(dScratch))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r.x.CallOn(st, frame, scratch) != jit.ResultCommit {
			b.Fatal("no commit")
		}
	}
}

// BenchmarkHit: push r,rdi; push r,rsi; log 2; exit 1.
func BenchmarkHit(b *testing.B) {
	benchHit(b, "push r,rdi\npush r,rsi\nlog 2\nexit 1")
}

// BenchmarkHitLoop: a loop of 100 taken jumps and a variable update.
func BenchmarkHitLoop(b *testing.B) {
	benchHit(b, "vars = 1\npush d,100\nl: inc lv,0\nloop l\nlog 1\nexit 1")
}

// BenchmarkHitString: log str of a 32-byte string.
func BenchmarkHitString(b *testing.B) {
	h := newHarness(b, 13)
	h.poke(0, []byte("0123456789abcdef0123456789abcdef\x00"))
	src := "push d,100\npush d," + itoa(h.base) + "\nlog str\nexit 1"
	benchHit(b, src)
}

func itoa(v uint64) string {
	const hex = "0123456789abcdef"
	s := ""
	for v > 0 || s == "" {
		s = string(hex[v&15]) + s
		v >>= 4
	}
	return "0x" + s
}

// BenchmarkTrampoline: the trampoline calling a bare ret.
func BenchmarkTrampoline(b *testing.B) {
	x, err := jitexec.Load([]byte{0xc3}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	st, err := jitexec.NewStack()
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	for i := 0; i < b.N; i++ {
		x.CallOn(st, 0, 0)
	}
}

// BenchmarkMachine: the same hit in the interpreter, for comparison.
func BenchmarkMachine(b *testing.B) {
	p := compileSrc(b, "push r,rdi\npush r,rsi\nlog 2\nexit 1")
	h := newHarness(b, 14)
	e := &env{h: h}
	var m rpn.Machine
	var st rpn.ProbeState
	lv, gv := make([]uint64, 1), make([]uint64, rpn.MaxGVars)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.Run(p, 0, &st, lv, gv, e)
	}
}
