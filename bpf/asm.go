package bpf

import (
	"fmt"
	"slices"

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
	// islands are places (instruction indices) the code never runs
	// into, for trampolines (relax)
	islands []int
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

// maxJump is the farthest an eBPF jump reaches, in 8-byte slots (a signed
// 16-bit offset; BPF_JA's 32-bit form is Linux 6.6's).
const maxJump = 32767

// island marks the next instruction's place as one where the code never
// runs into (after a jump or a return): finish may put trampolines there,
// "goto l" jumps that a jump too far for its 16-bit offset goes through.
func (a *assembler) island() { a.islands = append(a.islands, len(a.ins)) }

// insertJumps puts a "goto" before each instruction index of at (in
// any order; several at one index go there in the order given), each
// bound to its label and jumping to its target: every label bound at or
// after an index moves with the code (a label bound at an island's place
// names the instruction after the island).
func (a *assembler) insertJumps(at []int, ls, to []label) {
	order := make([]int, len(at))
	for k := range order {
		order[k] = k
	}
	slices.SortStableFunc(order, func(x, y int) int { return at[x] - at[y] })
	// shift[i]: how many go before old instruction i
	n := len(a.ins)
	shift := make([]int, n+1)
	k := 0
	for i := 0; i <= n; i++ {
		for k < len(order) && at[order[k]] <= i {
			k++
		}
		shift[i] = k
	}
	// a place at old index i: the new instructions there are
	// before i's instruction, after those at lower places
	ins := make(asm.Instructions, 0, n+len(at))
	rpn := make([]int, 0, n+len(at))
	k = 0
	newJumps := make([]jumpRef, 0, len(at))
	for i := 0; i <= n; i++ {
		for k < len(order) && at[order[k]] == i {
			o := order[k]
			a.labels[ls[o]] = len(ins)
			newJumps = append(newJumps, jumpRef{len(ins), to[o]})
			ins = append(ins, asm.Ja.Label("").WithReference(""))
			rpn = append(rpn, -1)
			k++
		}
		if i < n {
			ins = append(ins, a.ins[i])
			rpn = append(rpn, a.rpn[i])
		}
	}
	fresh := map[label]bool{}
	for _, l := range ls {
		fresh[l] = true
	}
	for l, t := range a.labels {
		if t >= 0 && !fresh[label(l)] {
			a.labels[l] = t + shift[t]
		}
	}
	for j := range a.jumps {
		a.jumps[j].at += shift[a.jumps[j].at]
	}
	for j, p := range a.islands {
		a.islands[j] = p + shift[p] // after those put there: the next go after them
	}
	if len(a.notes) > 0 {
		notes := make(map[int]string, len(a.notes))
		for i, s := range a.notes {
			notes[i+shift[i]] = s
		}
		a.notes = notes
	}
	a.ins, a.rpn = ins, rpn
	a.jumps = append(a.jumps, newJumps...)
}

// relax routes every jump that its offset cannot carry through
// trampolines in the islands between it and its target (branch
// relaxation): each hop reaches the farthest island toward the target
// within range, less a margin for the trampolines added meanwhile.
func (a *assembler) relax() error {
	type key struct {
		island int // index in a.islands
		l      label
	}
	tramp := map[key]label{}
	const margin = 4096
	for pass := 0; ; pass++ {
		if pass > 64 {
			return fmt.Errorf("bpf: internal error: jumps still out of reach after %d passes", pass)
		}
		off, _ := a.raw()
		type add struct {
			at int
			l  label // the trampoline's own label
			to label
		}
		var adds []add
		for j := range a.jumps {
			from, t := off[a.jumps[j].at], off[a.labels[a.jumps[j].l]]
			d := t - from - 1
			if d >= -maxJump-1 && d <= maxJump {
				continue
			}
			best, bestDist := -1, 0
			for k, p := range a.islands {
				q := off[p]
				if (d > 0 && (q <= from || q > t)) || (d < 0 && (q >= from || q < t)) {
					continue
				}
				dist := q - from
				if dist < 0 {
					dist = -dist
				}
				if dist < maxJump-margin && dist > bestDist {
					best, bestDist = k, dist
				}
			}
			if best < 0 {
				return fmt.Errorf("bpf: the program is too large: a jump spans %d instructions (at most %d) with no place between for a trampoline", d, maxJump)
			}
			kk := key{best, a.jumps[j].l}
			tl, ok := tramp[kk]
			if !ok {
				tl = a.newLabel()
				tramp[kk] = tl
				adds = append(adds, add{a.islands[best], tl, a.jumps[j].l})
			}
			a.jumps[j].l = tl
		}
		if len(adds) == 0 {
			return nil
		}
		at, ls, to := make([]int, len(adds)), make([]label, len(adds)), make([]label, len(adds))
		for k, ad := range adds {
			at[k], ls[k], to[k] = ad.at, ad.l, ad.to
		}
		a.insertJumps(at, ls, to)
	}
}

// finish resolves the jumps.
func (a *assembler) finish() error {
	if err := a.relax(); err != nil {
		return err
	}
	off, _ := a.raw()
	for _, j := range a.jumps {
		t := a.labels[j.l]
		if t < 0 {
			return fmt.Errorf("bpf: internal error: label %d never bound", j.l)
		}
		d := off[t] - off[j.at] - 1
		if d < -maxJump-1 || d > maxJump {
			return fmt.Errorf("bpf: internal error: a jump spans %d instructions after relaxation", d)
		}
		a.ins[j.at].Offset = int16(d)
	}
	for i, s := range a.notes {
		a.ins[i] = a.ins[i].WithSource(asm.Comment(s))
	}
	return nil
}
