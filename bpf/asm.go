package bpf

import (
	"fmt"

	"github.com/cilium/ebpf/asm"
)

// A thin layer over cilium/ebpf's asm: labels that any number of jumps
// name and that may share an instruction (asm's symbols allow one per
// instruction), resolved to raw offsets when the program is finished, and
// for every instruction the RPN instruction it was emitted for, so that
// the verifier's complaints name the DPDF line.

type label int

type jumpRef struct {
	at int // index in ins
	l  label
}

type assembler struct {
	ins    asm.Instructions
	rpn    []int // per instruction: the RPN instruction index (relative to the probe's entry), -1 for glue
	cur    int   // the RPN instruction being compiled, -1 outside the body
	labels []int // label -> instruction index, -1 while unbound
	jumps  []jumpRef
	notes  map[int]string // instruction index -> line info text
}

func (a *assembler) newLabel() label {
	a.labels = append(a.labels, -1)
	return label(len(a.labels) - 1)
}

// bind places l at the next instruction emitted.
func (a *assembler) bind(l label) { a.labels[l] = len(a.ins) }

func (a *assembler) emit(ins ...asm.Instruction) {
	for _, in := range ins {
		a.ins = append(a.ins, in)
		a.rpn = append(a.rpn, a.cur)
	}
}

// note attaches a line of text (BTF line info: the verifier log prints it)
// to the next instruction emitted.
func (a *assembler) note(s string) {
	if a.notes == nil {
		a.notes = map[int]string{}
	}
	a.notes[len(a.ins)] = s
}

// jmpImm emits "if dst op imm goto l" (64-bit compare; 32-bit with w32).
func (a *assembler) jmpImm(op asm.JumpOp, dst asm.Register, imm int32, l label, w32 bool) {
	var in asm.Instruction
	if w32 {
		in = op.Imm32(dst, imm, "")
	} else {
		in = op.Imm(dst, imm, "")
	}
	a.jumps = append(a.jumps, jumpRef{len(a.ins), l})
	a.emit(in.WithReference(""))
}

// jmpReg emits "if dst op src goto l" (64-bit compare).
func (a *assembler) jmpReg(op asm.JumpOp, dst, src asm.Register, l label) {
	a.jumps = append(a.jumps, jumpRef{len(a.ins), l})
	a.emit(op.Reg(dst, src, "").WithReference(""))
}

// ja emits "goto l".
func (a *assembler) ja(l label) {
	a.jumps = append(a.jumps, jumpRef{len(a.ins), l})
	a.emit(asm.Ja.Label("").WithReference(""))
}

// raw returns the raw offset (in 8-byte slots) of every instruction and
// the total.
func (a *assembler) raw() ([]int, int) {
	off := make([]int, len(a.ins)+1)
	n := 0
	for i, in := range a.ins {
		off[i] = n
		n += int(in.Width())
	}
	off[len(a.ins)] = n
	return off, n
}

// finish resolves the jumps.
func (a *assembler) finish() error {
	off, _ := a.raw()
	for _, j := range a.jumps {
		t := a.labels[j.l]
		if t < 0 {
			return fmt.Errorf("bpf: internal error: label %d never bound", j.l)
		}
		d := off[t] - off[j.at] - 1
		if d < -32768 || d > 32767 {
			return fmt.Errorf("bpf: the program is too large: a jump spans %d instructions (at most 32767)", d)
		}
		a.ins[j.at].Offset = int16(d)
	}
	for i, s := range a.notes {
		a.ins[i] = a.ins[i].WithSource(asm.Comment(s))
	}
	return nil
}
