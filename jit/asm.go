package jit

import (
	"encoding/binary"
	"fmt"
)

// A small x86-64 encoder: the instructions the compiler emits and nothing
// more. Every form is checked against golang.org/x/arch/x86/x86asm in
// asm_test.go. Jumps and calls are always rel32 to a label, patched when
// the code is finished.

// reg is a general-purpose register by its hardware number.
type reg uint8

const (
	rax reg = iota
	rcx
	rdx
	rbx
	rsp
	rbp
	rsi
	rdi
	r8
	r9
	r10
	r11
	r12
	r13
	r14
	r15

	noReg reg = 0xff
)

// mem is a memory operand [base + index*scale + disp]. index is noReg
// when there is none; base is always a register (no rip-relative or
// absolute forms are needed).
type mem struct {
	base  reg
	index reg
	scale uint8 // 1, 2, 4, 8
	disp  int32
}

func at(base reg, disp int32) mem { return mem{base: base, index: noReg, scale: 1, disp: disp} }
func atIdx(base, index reg, scale uint8, disp int32) mem {
	return mem{base: base, index: index, scale: scale, disp: disp}
}

// cond is an x86 condition code (the low nibble of jcc, cmovcc).
type cond uint8

const (
	condO  cond = 0x0
	condNO cond = 0x1
	condB  cond = 0x2 // unsigned <, carry
	condAE cond = 0x3
	condE  cond = 0x4
	condNE cond = 0x5
	condBE cond = 0x6
	condA  cond = 0x7
	condS  cond = 0x8
	condNS cond = 0x9
	condL  cond = 0xc // signed <
	condGE cond = 0xd
	condLE cond = 0xe
	condG  cond = 0xf
)

func (c cond) not() cond { return c ^ 1 }

// aluOp is the /digit of the 0x80-0x83 group and the opcode row of the
// two-operand forms.
type aluOp uint8

const (
	aluAdd aluOp = 0
	aluOr  aluOp = 1
	aluAnd aluOp = 4
	aluSub aluOp = 5
	aluXor aluOp = 6
	aluCmp aluOp = 7
)

// shiftOp is the /digit of the 0xc1/0xd3 group.
type shiftOp uint8

const (
	shRol shiftOp = 0
	shRor shiftOp = 1
	shShl shiftOp = 4
	shShr shiftOp = 5
	shSar shiftOp = 7
)

// unaryOp is the /digit of the 0xf7 group.
type unaryOp uint8

const (
	unNot  unaryOp = 2
	unNeg  unaryOp = 3
	unMul  unaryOp = 4
	unDiv  unaryOp = 6
	unIDiv unaryOp = 7
)

// sreg is a segment register as the 0x8c encoding numbers them.
type sreg uint8

const (
	sES sreg = 0
	sCS sreg = 1
	sSS sreg = 2
	sDS sreg = 3
	sFS sreg = 4
	sGS sreg = 5
)

type label int

type relFix struct {
	pos int // offset of the rel32
	l   label
}

type asm struct {
	b      []byte
	labels []int // offset of each label, -1 until bound
	fixes  []relFix
}

func (a *asm) pos() int { return len(a.b) }

func (a *asm) newLabel() label {
	a.labels = append(a.labels, -1)
	return label(len(a.labels) - 1)
}

func (a *asm) bind(l label) {
	if a.labels[l] >= 0 {
		panic(fmt.Sprintf("jit: label %d bound twice", l))
	}
	a.labels[l] = len(a.b)
}

func (a *asm) bound(l label) bool { return a.labels[l] >= 0 }

// finish patches every rel32; a jump to a label never bound is a bug of
// the compiler.
func (a *asm) finish() error {
	for _, f := range a.fixes {
		t := a.labels[f.l]
		if t < 0 {
			return fmt.Errorf("jit: internal error: label %d not bound", f.l)
		}
		binary.LittleEndian.PutUint32(a.b[f.pos:], uint32(int32(t-(f.pos+4))))
	}
	return nil
}

func (a *asm) emit(b ...byte) { a.b = append(a.b, b...) }
func (a *asm) imm8(v int8)    { a.b = append(a.b, byte(v)) }
func (a *asm) imm16(v uint16) { a.b = binary.LittleEndian.AppendUint16(a.b, v) }
func (a *asm) imm32(v int32)  { a.b = binary.LittleEndian.AppendUint32(a.b, uint32(v)) }
func (a *asm) imm64(v uint64) { a.b = binary.LittleEndian.AppendUint64(a.b, v) }

func fits8(v int64) bool  { return v >= -128 && v <= 127 }
func fits32(v int64) bool { return v >= -1<<31 && v < 1<<31 }

// rex emits a REX prefix when one is needed: w for 64-bit operand size,
// r, x, b the high bits of the ModRM reg, SIB index and base/rm fields;
// force for byte operations on spl, bpl, sil, dil.
func (a *asm) rex(w bool, r, x, b reg, force bool) {
	v := byte(0x40)
	if w {
		v |= 8
	}
	if r != noReg && r&8 != 0 {
		v |= 4
	}
	if x != noReg && x&8 != 0 {
		v |= 2
	}
	if b != noReg && b&8 != 0 {
		v |= 1
	}
	if v != 0x40 || force {
		a.emit(v)
	}
}

// opRR emits prefixes, REX, opcode and a register-direct ModRM with r in
// the reg field (a register or a /digit) and rm in the rm field.
func (a *asm) opRR(pfx []byte, w bool, op []byte, r, rm reg, byteRegs bool) {
	a.emit(pfx...)
	force := byteRegs && ((r >= 4 && r < 8) || (rm >= 4 && rm < 8))
	a.rex(w, r, noReg, rm, force)
	a.emit(op...)
	a.emit(0xc0 | byte(r&7)<<3 | byte(rm&7))
}

// opRM emits prefixes, REX, opcode and a memory ModRM (with SIB and
// displacement as needed), r in the reg field.
func (a *asm) opRM(pfx []byte, w bool, op []byte, r reg, m mem, byteReg bool) {
	a.emit(pfx...)
	force := byteReg && r >= 4 && r < 8
	a.rex(w, r, m.index, m.base, force)
	a.emit(op...)
	var mod byte
	switch {
	case m.disp == 0 && m.base&7 != 5:
		mod = 0
	case fits8(int64(m.disp)):
		mod = 1
	default:
		mod = 2
	}
	rf := byte(r&7) << 3
	if m.index == noReg && m.base&7 != 4 {
		a.emit(mod<<6 | rf | byte(m.base&7))
	} else {
		if m.index == rsp {
			panic("jit: rsp cannot be an index")
		}
		idx := byte(4) // none
		if m.index != noReg {
			idx = byte(m.index & 7)
		}
		var ss byte
		switch m.scale {
		case 1:
		case 2:
			ss = 1
		case 4:
			ss = 2
		case 8:
			ss = 3
		default:
			panic("jit: bad scale")
		}
		a.emit(mod<<6|rf|4, ss<<6|idx<<3|byte(m.base&7))
	}
	switch mod {
	case 1:
		a.imm8(int8(m.disp))
	case 2:
		a.imm32(m.disp)
	}
}

// Moves.

func (a *asm) movRR(w bool, dst, src reg)  { a.opRR(nil, w, []byte{0x89}, src, dst, false) }
func (a *asm) load(w bool, dst reg, m mem) { a.opRM(nil, w, []byte{0x8b}, dst, m, false) }
func (a *asm) store(w bool, m mem, src reg) {
	a.opRM(nil, w, []byte{0x89}, src, m, false)
}
func (a *asm) store8(m mem, src reg)  { a.opRM(nil, false, []byte{0x88}, src, m, true) }
func (a *asm) store16(m mem, src reg) { a.opRM([]byte{0x66}, false, []byte{0x89}, src, m, false) }

// storeImm stores a 32-bit immediate, sign-extended to 64 bits with w.
func (a *asm) storeImm(w bool, m mem, v int32) {
	a.opRM(nil, w, []byte{0xc7}, 0, m, false)
	a.imm32(v)
}
func (a *asm) store8Imm(m mem, v uint8) {
	a.opRM(nil, false, []byte{0xc6}, 0, m, false)
	a.emit(v)
}
func (a *asm) store16Imm(m mem, v uint16) {
	a.opRM([]byte{0x66}, false, []byte{0xc7}, 0, m, false)
	a.imm16(v)
}

// movImm loads a 64-bit constant with the shortest form.
func (a *asm) movImm(dst reg, v uint64) {
	switch {
	case v <= 0xffffffff: // mov r32, imm32 zero-extends
		a.rex(false, noReg, noReg, dst, false)
		a.emit(0xb8 + byte(dst&7))
		a.imm32(int32(uint32(v)))
	case fits32(int64(v)):
		a.opRR(nil, true, []byte{0xc7}, 0, dst, false)
		a.imm32(int32(int64(v)))
	default:
		a.rex(true, noReg, noReg, dst, false)
		a.emit(0xb8 + byte(dst&7))
		a.imm64(v)
	}
}

// movAbs always uses the 10-byte form (an address the pad may read back).
func (a *asm) movAbs(dst reg, v uint64) {
	a.rex(true, noReg, noReg, dst, false)
	a.emit(0xb8 + byte(dst&7))
	a.imm64(v)
}

func (a *asm) movzx8(dst reg, m mem)  { a.opRM(nil, false, []byte{0x0f, 0xb6}, dst, m, false) }
func (a *asm) movzx16(dst reg, m mem) { a.opRM(nil, false, []byte{0x0f, 0xb7}, dst, m, false) }
func (a *asm) movzx16R(dst, src reg)  { a.opRR(nil, false, []byte{0x0f, 0xb7}, dst, src, false) }
func (a *asm) movsxd(dst reg, m mem)  { a.opRM(nil, true, []byte{0x63}, dst, m, false) }
func (a *asm) lea(w bool, dst reg, m mem) {
	a.opRM(nil, w, []byte{0x8d}, dst, m, false)
}

// movFromSreg: mov r32, sreg.
func (a *asm) movFromSreg(dst reg, s sreg) { a.opRR(nil, false, []byte{0x8c}, reg(s), dst, false) }

func (a *asm) cmov(c cond, w bool, dst, src reg) {
	a.opRR(nil, w, []byte{0x0f, 0x40 | byte(c)}, dst, src, false)
}

// Arithmetic.

func (a *asm) aluRR(op aluOp, w bool, dst, src reg) {
	a.opRR(nil, w, []byte{byte(op)<<3 | 1}, src, dst, false)
}
func (a *asm) aluRM(op aluOp, w bool, dst reg, m mem) {
	a.opRM(nil, w, []byte{byte(op)<<3 | 3}, dst, m, false)
}
func (a *asm) aluMR(op aluOp, w bool, m mem, src reg) {
	a.opRM(nil, w, []byte{byte(op)<<3 | 1}, src, m, false)
}
func (a *asm) aluRI(op aluOp, w bool, dst reg, v int32) {
	if fits8(int64(v)) {
		a.opRR(nil, w, []byte{0x83}, reg(op), dst, false)
		a.imm8(int8(v))
		return
	}
	a.opRR(nil, w, []byte{0x81}, reg(op), dst, false)
	a.imm32(v)
}
func (a *asm) aluMI(op aluOp, w bool, m mem, v int32) {
	if fits8(int64(v)) {
		a.opRM(nil, w, []byte{0x83}, reg(op), m, false)
		a.imm8(int8(v))
		return
	}
	a.opRM(nil, w, []byte{0x81}, reg(op), m, false)
	a.imm32(v)
}

// lockOr8MI: lock or byte [m], imm8.
func (a *asm) lockOr8MI(m mem, v uint8) {
	a.opRM([]byte{0xf0}, false, []byte{0x80}, reg(aluOr), m, false)
	a.emit(v)
}

func (a *asm) testRR(w bool, r1, r2 reg) { a.opRR(nil, w, []byte{0x85}, r2, r1, false) }

// test8RI: test r8, imm8 (the low byte of r).
func (a *asm) test8RI(r reg, v uint8) {
	a.opRR(nil, false, []byte{0xf6}, 0, r, true)
	a.emit(v)
}

func (a *asm) shiftRI(op shiftOp, w bool, r reg, n uint8) {
	a.opRR(nil, w, []byte{0xc1}, reg(op), r, false)
	a.emit(n)
}
func (a *asm) shiftMI(op shiftOp, w bool, m mem, n uint8) {
	a.opRM(nil, w, []byte{0xc1}, reg(op), m, false)
	a.emit(n)
}
func (a *asm) shiftRCL(op shiftOp, w bool, r reg) { a.opRR(nil, w, []byte{0xd3}, reg(op), r, false) }

// shrdCL: shrd dst, src, cl.
func (a *asm) shrdCL(w bool, dst, src reg) { a.opRR(nil, w, []byte{0x0f, 0xad}, src, dst, false) }

func (a *asm) imulRR(w bool, dst, src reg) { a.opRR(nil, w, []byte{0x0f, 0xaf}, dst, src, false) }
func (a *asm) imulRM(w bool, dst reg, m mem) {
	a.opRM(nil, w, []byte{0x0f, 0xaf}, dst, m, false)
}

// imulRRI: imul dst, src, imm32.
func (a *asm) imulRRI(w bool, dst, src reg, v int32) {
	a.opRR(nil, w, []byte{0x69}, dst, src, false)
	a.imm32(v)
}

func (a *asm) unaryR(op unaryOp, w bool, r reg) { a.opRR(nil, w, []byte{0xf7}, reg(op), r, false) }
func (a *asm) unaryM(op unaryOp, w bool, m mem) { a.opRM(nil, w, []byte{0xf7}, reg(op), m, false) }

func (a *asm) incR(w bool, r reg) { a.opRR(nil, w, []byte{0xff}, 0, r, false) }
func (a *asm) decR(w bool, r reg) { a.opRR(nil, w, []byte{0xff}, 1, r, false) }

// lockIncM, lockDecM: lock inc/dec [m].
func (a *asm) lockIncM(w bool, m mem) { a.opRM([]byte{0xf0}, w, []byte{0xff}, 0, m, false) }
func (a *asm) lockDecM(w bool, m mem) { a.opRM([]byte{0xf0}, w, []byte{0xff}, 1, m, false) }

// lockXadd: lock xadd [m], src.
func (a *asm) lockXadd(w bool, m mem, src reg) {
	a.opRM([]byte{0xf0}, w, []byte{0x0f, 0xc1}, src, m, false)
}

// lockCmpxchg: lock cmpxchg [m], src (compares with rax/eax).
func (a *asm) lockCmpxchg(w bool, m mem, src reg) {
	a.opRM([]byte{0xf0}, w, []byte{0x0f, 0xb1}, src, m, false)
}

// Control flow.

func (a *asm) rel(op []byte, l label) {
	a.emit(op...)
	a.fixes = append(a.fixes, relFix{len(a.b), l})
	a.imm32(0)
}
func (a *asm) jmp(l label)         { a.rel([]byte{0xe9}, l) }
func (a *asm) jcc(c cond, l label) { a.rel([]byte{0x0f, 0x80 | byte(c)}, l) }
func (a *asm) call(l label)        { a.rel([]byte{0xe8}, l) }
func (a *asm) ret()                { a.emit(0xc3) }

// Others.

func (a *asm) syscall()  { a.emit(0x0f, 0x05) }
func (a *asm) rdtsc()    { a.emit(0x0f, 0x31) }
func (a *asm) cld()      { a.emit(0xfc) }
func (a *asm) repMovsb() { a.emit(0xf3, 0xa4) }
func (a *asm) cqo()      { a.emit(0x48, 0x99) }
func (a *asm) ud2()      { a.emit(0x0f, 0x0b) }
func (a *asm) push(r reg) {
	a.rex(false, noReg, noReg, r, false)
	a.emit(0x50 + byte(r&7))
}
func (a *asm) pop(r reg) {
	a.rex(false, noReg, noReg, r, false)
	a.emit(0x58 + byte(r&7))
}

// rdfsbase/rdgsbase r64.
func (a *asm) rdfsbase(r reg) { a.opRR([]byte{0xf3}, true, []byte{0x0f, 0xae}, 0, r, false) }
func (a *asm) rdgsbase(r reg) { a.opRR([]byte{0xf3}, true, []byte{0x0f, 0xae}, 1, r, false) }
