package rpn

// A read-only view of a verified program for the compiler to machine code
// (package jit). It exposes the decoded instructions the machine runs, so
// the compiler starts from the verifier's proofs instead of decoding the
// bytecode again.

// Insn is one decoded, verified instruction.
type Insn struct {
	Op  Opcode
	A   uint8  // u8 operand: exit facility, word count, shift count, size
	B   uint16 // u16 operand: register, variable index, major/minor
	C   uint32 // jump target as an instruction index (Insn(C)); count of log lv/gv
	Imm uint64 // push d immediate
}

// NumInsns is the number of decoded instructions of all probes.
func (p *Program) NumInsns() int { return len(p.code) }

// Insn returns instruction i (Entry(pi) <= i < End(pi) for probe pi).
func (p *Program) Insn(i int) Insn {
	in := p.code[i]
	return Insn{Op: in.op, A: in.a, B: in.b, C: in.c, Imm: in.imm}
}

// Entry is the index of probe pi's first instruction.
func (p *Program) Entry(pi int) int { return int(p.entry[pi]) }

// End is the index just past probe pi's last instruction.
func (p *Program) End(pi int) int { return int(p.end[pi]) }

// PC is the byte offset in Module.Code of instruction i: what
// Result.PC holds when instruction i faults.
func (p *Program) PC(i int) uint32 { return p.pcs[i] }

// WordMask is all ones on x86_64, 0xffffffff on i386.
func (p *Program) WordMask() uint64 { return p.mask }

// WordShift is 64 minus the word width in bits (0 or 32), the shift that
// sign-extends a word: int64(x<<s)>>s.
func (p *Program) WordShift() uint { return p.sh }

// WordSize is the width of a stack entry in bytes (8 or 4).
func (p *Program) WordSize() int { return p.w }
