package bpf

import (
	"testing"

	"github.com/cilium/ebpf/asm"
)

// Jumps past 32767 instructions go through trampolines in the islands
// between (relax): each jump's offset fits its 16 bits, and following the
// jumps from each leads to its label, forward and backward.
func TestRelaxFarJumps(t *testing.T) {
	var a assembler
	a.cur = -1
	far, back, near := a.newLabel(), a.newLabel(), a.newLabel()
	a.bind(back)
	a.emit(asm.Mov.Imm(asm.R0, 1))
	a.jmpImm(asm.JEq, asm.R1, 0, far, false) // forward, ~100000 on
	a.jmpImm(asm.JEq, asm.R1, 1, near, false)
	a.bind(near)
	const n = 100000
	for i := 0; i < n; i++ {
		if i > 0 && i%islandEvery == 0 {
			over := a.newLabel()
			a.ja(over)
			a.island()
			a.bind(over)
		}
		a.emit(asm.Mov.Imm(asm.R2, int32(i)))
	}
	a.jmpImm(asm.JNE, asm.R2, 0, back, false) // backward, ~100000 back
	a.bind(far)
	a.emit(asm.Mov.Imm(asm.R0, 0), asm.Return())
	if err := a.finish(); err != nil {
		t.Fatal(err)
	}
	off, _ := a.raw()
	at := map[int]int{} // raw offset -> index
	for i := range a.ins {
		at[off[i]] = i
	}
	// follow a jump at index i to where it lands, through trampolines
	follow := func(i int) (int, int) {
		hops := 0
		for {
			in := a.ins[i]
			to := off[i] + 1 + int(in.Offset)
			j, ok := at[to]
			if !ok {
				t.Fatalf("a jump at %d lands inside an instruction (%d)", i, to)
			}
			hops++
			if a.ins[j].OpCode.JumpOp() != asm.Ja || a.ins[j].Offset == 0 || a.rpn[j] != -1 || !isTrampoline(&a, j) {
				return j, hops
			}
			i = j
		}
	}
	if j, hops := follow(1); j != a.labels[far] || hops < 4 {
		t.Errorf("the far jump lands at %d (after %d hops), its label is at %d", j, hops, a.labels[far])
	}
	if j, hops := follow(a.labels[far] - 1); j != a.labels[back] || hops < 4 {
		t.Errorf("the backward jump lands at %d (after %d hops), its label is at %d", j, hops, a.labels[back])
	}
	if j, hops := follow(2); j != a.labels[near] || hops != 1 {
		t.Errorf("the near jump lands at %d after %d hops", j, hops)
	}
	t.Logf("%d instructions, %d islands", len(a.ins), len(a.islands))
}

// isTrampoline reports whether instruction j was put in an island by relax
// (a "goto" right at an island's place or after another trampoline).
func isTrampoline(a *assembler, j int) bool {
	for _, p := range a.islands {
		if j < p && j >= p-64 { // the trampolines are just before the island's end
			for k := j; k < p; k++ {
				if a.ins[k].OpCode.JumpOp() != asm.Ja {
					return false
				}
			}
			return true
		}
	}
	return false
}
