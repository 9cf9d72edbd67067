package x86

import (
	"encoding/binary"
	"sync"

	"golang.org/x/arch/x86/x86asm"

	"github.com/gprobes/gprobes/rpn"
)

// Mem is the target's memory as the emulator sees it. Both methods report
// false when the access faults; EmulateInsn then returns false and the engine
// falls back to Step, so a faulting instruction faults natively in the
// target.
//
// The emulator makes at most one Read and at most one Write per
// instruction, each of the operand's exact size (1, 2, 4 or 8 bytes), and
// all reads before the write. An implementation must not read-modify-write
// neighbouring bytes (another thread may own them: PTRACE_POKEDATA on an
// unaligned or sub-word store does exactly that), and should perform a
// naturally aligned access of up to 8 bytes as one access so a concurrent
// writer cannot tear it (PTRACE_PEEKDATA of the containing word does;
// process_vm_readv does not promise it).
type Mem interface {
	Read(addr uint64, p []byte) bool
	Write(addr uint64, p []byte) bool
}

// emu is one emulation in progress: a scratch copy of the registers and
// the one pending store.
type emu struct {
	in  *Insn
	r   Regs
	mem Mem

	store     bool
	storeAddr uint64
	storeSize int
	storeVal  uint64
}

// EmulateInsn applies an Emulate-class instruction to regs: rip advances to
// Addr+Len (or to the target of ret, indirect jmp and indirect call), and
// the arithmetic flags CF PF AF ZF SF OF change exactly as the CPU would
// change them, other rflags bits untouched. It returns false, changing
// nothing, when it cannot: the instruction is not of class Emulate, or a
// memory access fails (the engine then steps it out of line).
func EmulateInsn(in *Insn, regs *Regs, mem Mem) bool {
	if in.Class != Emulate {
		return false
	}
	return emulate(in, regs, mem)
}

func emulate(in *Insn, regs *Regs, mem Mem) bool {
	e := emu{in: in, r: *regs, mem: mem}
	if !e.run() || !e.commitStore() {
		return false
	}
	*regs = e.r
	return true
}

// bufPool holds the 8-byte buffers memory accesses go through: a buffer on
// the stack would escape through the Mem interface call and cost an
// allocation per hit.
var bufPool = sync.Pool{New: func() any { return new([8]byte) }}

func (e *emu) commitStore() bool {
	if !e.store {
		return true
	}
	buf := bufPool.Get().(*[8]byte)
	binary.LittleEndian.PutUint64(buf[:], e.storeVal)
	ok := e.mem.Write(e.storeAddr, buf[:e.storeSize])
	bufPool.Put(buf)
	return ok
}

// encToReg maps the x86 register encoding (0 = ax, 1 = cx, ... 15 = r15)
// to the canonical register.
var encToReg = [16]rpn.Reg{
	rpn.RegRAX, rpn.RegRCX, rpn.RegRDX, rpn.RegRBX, rpn.RegRSP, rpn.RegRBP, rpn.RegRSI, rpn.RegRDI,
	rpn.RegR8, rpn.RegR9, rpn.RegR10, rpn.RegR11, rpn.RegR12, rpn.RegR13, rpn.RegR14, rpn.RegR15,
}

// gpr describes a general-purpose register operand: which canonical
// register, its size in bytes, and its bit offset (8 for ah ch dh bh).
func gpr(r x86asm.Reg) (idx rpn.Reg, size int, shift uint, ok bool) {
	switch {
	case r >= x86asm.AL && r <= x86asm.BL:
		return encToReg[r-x86asm.AL], 1, 0, true
	case r >= x86asm.AH && r <= x86asm.BH:
		return encToReg[r-x86asm.AH], 1, 8, true
	case r >= x86asm.SPB && r <= x86asm.R15B:
		return encToReg[r-x86asm.SPB+4], 1, 0, true
	case r >= x86asm.AX && r <= x86asm.R15W:
		return encToReg[r-x86asm.AX], 2, 0, true
	case r >= x86asm.EAX && r <= x86asm.R15L:
		return encToReg[r-x86asm.EAX], 4, 0, true
	case r >= x86asm.RAX && r <= x86asm.R15:
		return encToReg[r-x86asm.RAX], 8, 0, true
	}
	return 0, 0, 0, false
}

func (e *emu) getReg(r x86asm.Reg) (uint64, int, bool) {
	idx, size, shift, ok := gpr(r)
	if !ok {
		return 0, 0, false
	}
	return e.r[idx] >> shift & sizeMask(size), size, true
}

// setReg writes v to a register operand with x86-64 semantics: 8- and
// 16-bit writes merge, 32-bit writes zero-extend to 64 bits.
func (e *emu) setReg(r x86asm.Reg, v uint64) bool {
	idx, size, shift, ok := gpr(r)
	if !ok {
		return false
	}
	switch size {
	case 1, 2:
		m := sizeMask(size) << shift
		e.r[idx] = e.r[idx]&^m | v<<shift&m
	case 4:
		e.r[idx] = v & 0xffffffff
	default:
		e.r[idx] = v
	}
	return true
}

func (e *emu) setFlags(mask, f uint64) {
	e.r[rpn.RegRFLAGS] = e.r[rpn.RegRFLAGS]&^mask | f&mask
}

func (e *emu) flags() uint64 { return e.r[rpn.RegRFLAGS] }

// next is the address of the following instruction.
func (e *emu) next() uint64 { return e.in.truncIP(e.in.Addr + uint64(e.in.Len)) }

// canonical reports whether a 64-bit mode target can be jumped to: a
// control transfer to a non-canonical address raises #GP on the transfer
// itself (nothing pushed, rip unchanged), which the emulator leaves to the
// CPU.
func (in *Insn) canonical(a uint64) bool {
	return in.Mode != 64 || uint64(int64(a<<16)>>16) == a
}

// truncIP wraps an instruction address to the mode's width.
func (in *Insn) truncIP(a uint64) uint64 {
	if in.Mode == 32 {
		return a & 0xffffffff
	}
	return a
}

// ea computes the effective address of the instruction's memory operand.
// It refuses 16-bit addressing, fs and gs (their bases are not in the
// registers the engine passes), and in 32-bit mode any segment override.
func (e *emu) ea(m x86asm.Mem, lea bool) (uint64, bool) {
	l := &e.in.lay
	if !lea {
		switch {
		case l.seg == 0x64 || l.seg == 0x65:
			return 0, false
		case e.in.Mode == 32 && l.seg != 0 && l.seg != 0x3e && l.seg != 0x36:
			return 0, false // es, cs: flat on Linux, but not on every guest
		}
	}
	asz := l.addrSize()
	if asz == 16 {
		return 0, false
	}
	var a uint64
	switch m.Base {
	case 0:
	case x86asm.RIP, x86asm.EIP:
		a = e.in.Addr + uint64(e.in.Len)
	default:
		v, size, ok := e.getReg(m.Base)
		if !ok || size*8 != asz {
			return 0, false
		}
		a = v
	}
	if m.Index != 0 {
		v, size, ok := e.getReg(m.Index)
		if !ok || size*8 != asz {
			return 0, false
		}
		a += v * uint64(m.Scale)
	}
	a += e.in.disp()
	if asz == 32 {
		a &= 0xffffffff
	}
	return a, true
}

// disp returns the memory operand's displacement, sign-extended (x86asm
// zero-extends disp32), or for mov moffs the absolute offset.
func (in *Insn) disp() uint64 {
	l := &in.lay
	if l.dispOff >= 0 {
		b := in.Bytes[l.dispOff:]
		switch l.dispLen {
		case 1:
			return uint64(int64(int8(b[0])))
		case 2:
			return uint64(int64(int16(binary.LittleEndian.Uint16(b))))
		case 4:
			return uint64(int64(int32(binary.LittleEndian.Uint32(b))))
		}
	}
	if l.esc == escNone && l.omap == 0 && l.op >= 0xa0 && l.op <= 0xa3 {
		var v [8]byte
		copy(v[:], in.Bytes[l.immOff:l.immOff+l.immLen])
		return binary.LittleEndian.Uint64(v[:])
	}
	return 0
}

func (e *emu) load(addr uint64, size int) (uint64, bool) {
	buf := bufPool.Get().(*[8]byte)
	*buf = [8]byte{}
	ok := e.mem.Read(addr, buf[:size])
	v := binary.LittleEndian.Uint64(buf[:])
	bufPool.Put(buf)
	return v, ok
}

// value reads an operand of size bytes: register, immediate (sign-extended
// then truncated, as the CPU extends imm8 and imm32) or memory.
func (e *emu) value(a x86asm.Arg, size int) (uint64, bool) {
	switch a := a.(type) {
	case x86asm.Reg:
		v, s, ok := e.getReg(a)
		if !ok || s != size {
			return 0, false
		}
		return v, true
	case x86asm.Imm:
		return uint64(a) & sizeMask(size), true
	case x86asm.Mem:
		addr, ok := e.ea(a, false)
		if !ok {
			return 0, false
		}
		return e.load(addr, size)
	}
	return 0, false
}

// size returns the size in bytes of a register or memory operand.
func (e *emu) size(a x86asm.Arg) int {
	switch a := a.(type) {
	case x86asm.Reg:
		_, s, _, ok := gpr(a)
		if ok {
			return s
		}
	case x86asm.Mem:
		return e.in.Inst.MemBytes
	}
	return 0
}

// stackWidth is the size of a push or pop: 8 (4 in 32-bit mode), 2 with
// an operand-size prefix.
func (in *Insn) stackWidth() int {
	switch {
	case in.lay.p66:
		return 2
	case in.Mode == 32:
		return 4
	}
	return 8
}

func (e *emu) sp() uint64 {
	if e.in.Mode == 32 {
		return e.r[rpn.RegRSP] & 0xffffffff
	}
	return e.r[rpn.RegRSP]
}

func (e *emu) setSP(v uint64) {
	if e.in.Mode == 32 {
		v &= 0xffffffff
	}
	e.r[rpn.RegRSP] = v
}

// push queues the store of v and moves the stack pointer.
func (e *emu) push(v uint64, width int) {
	sp := e.sp() - uint64(width)
	if e.in.Mode == 32 {
		sp &= 0xffffffff
	}
	e.setSP(sp)
	e.store, e.storeAddr, e.storeSize, e.storeVal = true, sp, width, v&sizeMask(width)
}

func (e *emu) pop(width int) (uint64, bool) {
	sp := e.sp()
	v, ok := e.load(sp, width)
	if !ok {
		return 0, false
	}
	e.setSP(sp + uint64(width))
	return v, true
}

// cc is the condition code of jcc, setcc and cmovcc: the opcode's low nibble.
func (in *Insn) cc() byte { return in.lay.op & 0xf }

// run executes the instruction on e.r. It reports false when the
// instruction is not one the emulator knows or a read fails.
func (e *emu) run() bool {
	in := e.in
	if in.isEndbr() {
		e.r[rpn.RegRIP] = e.next()
		return true
	}
	if !in.asmOK || in.lay.lock {
		return false
	}
	args := &in.Inst.Args
	a0, a1 := args[0], args[1]
	dstReg, dstIsReg := a0.(x86asm.Reg)
	nextIP := e.next()

	switch op := in.Inst.Op; op {
	case x86asm.NOP, x86asm.PAUSE, x86asm.PREFETCHNTA, x86asm.PREFETCHT0, x86asm.PREFETCHT1,
		x86asm.PREFETCHT2, x86asm.PREFETCHW:
		// Prefetches are hints: they never fault and change nothing visible.

	case x86asm.MOV:
		if !dstIsReg {
			return false
		}
		size := e.size(a0)
		if size == 0 {
			return false
		}
		v, ok := e.value(a1, size)
		if !ok {
			return false
		}
		e.setReg(dstReg, v)

	case x86asm.MOVZX, x86asm.MOVSX, x86asm.MOVSXD:
		if !dstIsReg {
			return false
		}
		dsz, ssz := e.size(a0), e.size(a1)
		if dsz == 0 || ssz == 0 {
			return false
		}
		v, ok := e.value(a1, ssz)
		if !ok {
			return false
		}
		if op != x86asm.MOVZX && v&signBit(ssz) != 0 {
			v |= ^sizeMask(ssz)
		}
		e.setReg(dstReg, v&sizeMask(dsz))

	case x86asm.LEA:
		m, ok := a1.(x86asm.Mem)
		if !dstIsReg || !ok {
			return false
		}
		addr, ok := e.ea(m, true)
		if !ok {
			return false
		}
		e.setReg(dstReg, addr&sizeMask(e.size(a0)))

	case x86asm.ADD, x86asm.ADC, x86asm.SUB, x86asm.SBB, x86asm.CMP,
		x86asm.AND, x86asm.OR, x86asm.XOR, x86asm.TEST:
		size := e.size(a0)
		if size == 0 || !dstIsReg && op != x86asm.CMP && op != x86asm.TEST {
			return false // read-modify-write of memory: stepped
		}
		a, ok := e.value(a0, size)
		if !ok {
			return false
		}
		b, ok := e.value(a1, size)
		if !ok {
			return false
		}
		cf := e.flags() & FlagCF
		var r, f uint64
		switch op {
		case x86asm.ADD:
			r, f = add(a, b, 0, size)
		case x86asm.ADC:
			r, f = add(a, b, cf, size)
		case x86asm.SUB, x86asm.CMP:
			r, f = sub(a, b, 0, size)
		case x86asm.SBB:
			r, f = sub(a, b, cf, size)
		case x86asm.AND, x86asm.TEST:
			r = a & b
			f = logic(r, size)
		case x86asm.OR:
			r = a | b
			f = logic(r, size)
		case x86asm.XOR:
			r = a ^ b
			f = logic(r, size)
		}
		e.setFlags(ArithFlags, f)
		if op != x86asm.CMP && op != x86asm.TEST {
			e.setReg(dstReg, r)
		}

	case x86asm.INC, x86asm.DEC, x86asm.NEG, x86asm.NOT:
		if !dstIsReg {
			return false
		}
		size := e.size(a0)
		a, ok := e.value(a0, size)
		if !ok {
			return false
		}
		var r, f uint64
		switch op {
		case x86asm.INC:
			r, f = add(a, 1, 0, size)
			e.setFlags(ArithFlags&^FlagCF, f)
		case x86asm.DEC:
			r, f = sub(a, 1, 0, size)
			e.setFlags(ArithFlags&^FlagCF, f)
		case x86asm.NEG:
			r, f = sub(0, a, 0, size)
			e.setFlags(ArithFlags, f)
		case x86asm.NOT:
			r = ^a
		}
		e.setReg(dstReg, r)

	case x86asm.XCHG:
		r1, ok := a1.(x86asm.Reg)
		if !dstIsReg || !ok {
			return false // xchg with memory is locked: stepped
		}
		size := e.size(a0)
		a, ok := e.value(a0, size)
		if !ok {
			return false
		}
		b, ok := e.value(a1, size)
		if !ok {
			return false
		}
		e.setReg(dstReg, b)
		e.setReg(r1, a)

	case x86asm.CMOVA, x86asm.CMOVAE, x86asm.CMOVB, x86asm.CMOVBE, x86asm.CMOVE, x86asm.CMOVG,
		x86asm.CMOVGE, x86asm.CMOVL, x86asm.CMOVLE, x86asm.CMOVNE, x86asm.CMOVNO, x86asm.CMOVNP,
		x86asm.CMOVNS, x86asm.CMOVO, x86asm.CMOVP, x86asm.CMOVS:
		if !dstIsReg {
			return false
		}
		size := e.size(a0)
		v, ok := e.value(a1, size) // the source is read even when the condition is false
		if !ok {
			return false
		}
		if !cond(in.cc(), e.flags()) {
			v, _ = e.value(a0, size) // a 32-bit cmov zero-extends its destination regardless
		}
		e.setReg(dstReg, v)

	case x86asm.SETA, x86asm.SETAE, x86asm.SETB, x86asm.SETBE, x86asm.SETE, x86asm.SETG,
		x86asm.SETGE, x86asm.SETL, x86asm.SETLE, x86asm.SETNE, x86asm.SETNO, x86asm.SETNP,
		x86asm.SETNS, x86asm.SETO, x86asm.SETP, x86asm.SETS:
		if !dstIsReg {
			return false
		}
		var v uint64
		if cond(in.cc(), e.flags()) {
			v = 1
		}
		e.setReg(dstReg, v)

	case x86asm.CBW, x86asm.CWDE, x86asm.CDQE:
		// Sign-extend the low half of the accumulator into all of it.
		size, dst := 4, x86asm.RAX
		switch op {
		case x86asm.CBW:
			size, dst = 1, x86asm.AX
		case x86asm.CWDE:
			size, dst = 2, x86asm.EAX
		}
		v := e.r[rpn.RegRAX] & sizeMask(size)
		if v&signBit(size) != 0 {
			v |= ^sizeMask(size)
		}
		e.setReg(dst, v&sizeMask(size*2))

	case x86asm.CWD, x86asm.CDQ, x86asm.CQO:
		// Fill the data register with the accumulator's sign.
		size, dst := 8, x86asm.RDX
		switch op {
		case x86asm.CWD:
			size, dst = 2, x86asm.DX
		case x86asm.CDQ:
			size, dst = 4, x86asm.EDX
		}
		var v uint64
		if e.r[rpn.RegRAX]&signBit(size) != 0 {
			v = sizeMask(size)
		}
		e.setReg(dst, v)

	case x86asm.CLC:
		e.setFlags(FlagCF, 0)
	case x86asm.STC:
		e.setFlags(FlagCF, FlagCF)
	case x86asm.CMC:
		e.setFlags(FlagCF, e.flags()^FlagCF)
	case x86asm.CLD:
		e.setFlags(FlagDF, 0)
	case x86asm.STD:
		e.setFlags(FlagDF, FlagDF)

	case x86asm.PUSH:
		w := in.stackWidth()
		var v uint64
		var ok bool
		switch a := a0.(type) {
		case x86asm.Reg:
			var size int
			v, size, ok = e.getReg(a)
			ok = ok && size == w
		case x86asm.Imm:
			v, ok = uint64(a), true
		case x86asm.Mem:
			v, ok = e.value(a, w) // the address uses the stack pointer before the push
		}
		if !ok {
			return false
		}
		e.push(v, w)

	case x86asm.PUSHF, x86asm.PUSHFD, x86asm.PUSHFQ:
		// The pushed image has VM and RF clear.
		e.push(e.flags()&^(FlagVM|FlagRF), in.stackWidth())

	case x86asm.POP:
		if !dstIsReg {
			return false // pop to memory, segment registers: stepped
		}
		w := in.stackWidth()
		if e.size(a0) != w {
			return false
		}
		v, ok := e.pop(w)
		if !ok {
			return false
		}
		e.setReg(dstReg, v) // pop %rsp: the loaded value wins over the increment

	case x86asm.LEAVE:
		if in.lay.p66 {
			return false
		}
		w := in.stackWidth()
		e.setSP(e.r[rpn.RegRBP])
		v, ok := e.pop(w)
		if !ok {
			return false
		}
		e.r[rpn.RegRBP] = v

	case x86asm.RET:
		if in.lay.p66 {
			return false
		}
		w := in.stackWidth()
		v, ok := e.pop(w)
		if !ok {
			return false
		}
		if imm, ok := a0.(x86asm.Imm); ok {
			e.setSP(e.sp() + uint64(imm)&0xffff)
		}
		if !in.canonical(v) {
			return false
		}
		nextIP = in.truncIP(v)

	case x86asm.CALL, x86asm.JMP:
		if in.lay.p66 {
			return false
		}
		w := in.stackWidth()
		var target uint64
		switch a := a0.(type) {
		case x86asm.Reg:
			v, size, ok := e.getReg(a)
			if !ok || size != w {
				return false
			}
			target = v
		case x86asm.Mem:
			if in.Inst.MemBytes != w {
				return false // far pointers: refused before this
			}
			v, ok := e.value(a, w)
			if !ok {
				return false
			}
			target = v
		default:
			return false // relative: EmulateBranch
		}
		if !in.canonical(target) {
			return false
		}
		if op == x86asm.CALL {
			e.push(nextIP, w)
		}
		nextIP = in.truncIP(target)

	default:
		return false
	}
	e.r[rpn.RegRIP] = nextIP
	return true
}

// EmulateBranch applies a Branch-class instruction: jmp rel8/rel32, jcc
// (all 16 conditions from rflags), call rel32 (pushes Addr+Len through
// mem), loop, loope, loopne, jrcxz, jecxz and jcxz. It returns false,
// changing nothing, if the instruction is not of class Branch or the push
// faults.
func EmulateBranch(in *Insn, regs *Regs, mem Mem) bool {
	if in.Class != Branch {
		return false
	}
	e := emu{in: in, r: *regs, mem: mem}
	next := e.next()
	target := in.truncIP(next + in.rel())
	taken := true
	l := &in.lay
	switch {
	case l.omap == 0 && l.op >= 0x70 && l.op <= 0x7f, l.omap == 1 && l.op >= 0x80 && l.op <= 0x8f:
		taken = cond(in.cc(), e.flags())
	case l.omap == 0 && l.op >= 0xe0 && l.op <= 0xe3:
		// The count register is rcx, ecx or cx by address size; loop
		// decrements it without touching the flags.
		asz := l.addrSize() / 8
		cnt := e.r[rpn.RegRCX] & sizeMask(asz)
		if l.op != 0xe3 {
			cnt = (cnt - 1) & sizeMask(asz)
			switch asz {
			case 2:
				e.r[rpn.RegRCX] = e.r[rpn.RegRCX]&^0xffff | cnt
			default:
				e.r[rpn.RegRCX] = cnt // ecx zero-extends like any 32-bit write
			}
		}
		zf := e.flags()&FlagZF != 0
		switch l.op {
		case 0xe0: // loopne
			taken = cnt != 0 && !zf
		case 0xe1: // loope
			taken = cnt != 0 && zf
		case 0xe2: // loop
			taken = cnt != 0
		case 0xe3: // jrcxz
			taken = cnt == 0
		}
	case l.omap == 0 && l.op == 0xe8: // call rel32
		e.push(next, in.stackWidth())
	}
	if taken {
		if !in.canonical(target) {
			return false
		}
		e.r[rpn.RegRIP] = target
	} else {
		e.r[rpn.RegRIP] = next
	}
	if !e.commitStore() {
		return false
	}
	*regs = e.r
	return true
}

// rel returns the sign-extended displacement of a relative branch.
func (in *Insn) rel() uint64 {
	l := &in.lay
	b := in.Bytes[l.immOff:]
	switch l.immLen {
	case 1:
		return uint64(int64(int8(b[0])))
	case 2:
		return uint64(int64(int16(binary.LittleEndian.Uint16(b))))
	case 4:
		return uint64(int64(int32(binary.LittleEndian.Uint32(b))))
	}
	return 0
}

// Target returns the destination of a Branch-class instruction when it is
// taken.
func (in *Insn) Target() uint64 {
	return in.truncIP(in.Addr + uint64(in.Len) + in.rel())
}
