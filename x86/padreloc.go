package x86

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/arch/x86/x86asm"
)

// Relocation of the instructions a jump covers into a jump pad
// (docs/engine.md, "Jump pads: probes that run inside the process").
// PlanJump decided the instructions may move; RelocateForPad writes each
// one at its new address and StackDelta says how it moves rsp, so the pad
// finds its own state again after running them (docs/engine.md, "Jump
// pads").

// Relocated is one covered instruction rewritten to run at a pad address.
type Relocated struct {
	Code []byte
	// Exits: control does not fall through to the next pad byte in
	// general (jmp, call, ret, jcc's taken side): the pad must have done
	// its commit before it. A jcc falls through to the pad's jump back.
	Exits bool
	// Pushed, for a call, is the offset in Code of the jump that follows
	// the push of the return address: a thread stopped there has pushed
	// it already, and only the jump is left (0: not a call).
	Pushed int
}

// RelocateForPad rewrites the 64-bit instruction in to run at address at,
// doing what it did at in.Addr: a RIP-relative operand is rebased; a direct
// jmp or jcc gets a rel32 to the same target; a call pushes the original
// return address (in.Addr+in.Len) and jumps to its target, so the callee
// returns to the original code and never into the pad; ret and indirect
// jumps are copied (their operand rebased). Instructions it cannot move
// say why: loop, jrcxz, xbegin, system calls and software interrupts,
// targets beyond ±2 GiB of the pad, calls through rsp-based memory.
//
// A call becomes two instructions, push 8(%rip)... of the return address
// kept as a constant after the jump (one store: a thread is either before
// it, nothing done, or after it, the jump left; never half-way), then the
// jump (Relocated.Pushed).
func RelocateForPad(in *Insn, at uint64) (Relocated, error) {
	if in.Mode != 64 {
		return Relocated{}, fmt.Errorf("`%s` at %#x: jump pads are for 64-bit code", in.String(), in.Addr)
	}
	l := &in.lay
	legacy := l.esc == escNone
	next := in.Addr + uint64(in.Len)
	if legacy && (l.omap == 0 && (l.op == 0xcc || l.op == 0xcd || l.op == 0xce || l.op == 0xf1) ||
		l.omap == 1 && (l.op == 0x05 || l.op == 0x34 || l.op == 0x07 || l.op == 0x35)) {
		return Relocated{}, fmt.Errorf("`%s` at %#x is a system call or software interrupt: it stays where it is", in.String(), in.Addr)
	}
	if rel, ok := relBranch(l, in.Bytes); ok {
		target := next + rel
		switch {
		case l.omap == 0 && (l.op == 0xe9 || l.op == 0xeb):
			return Relocated{Code: jmpTo(at, target), Exits: true}, nil
		case l.omap == 0 && l.op >= 0x70 && l.op <= 0x7f, l.omap == 1 && l.op >= 0x80 && l.op <= 0x8f:
			cc := l.op & 0xf
			d := int64(target - (at + 6))
			if d != int64(int32(d)) {
				return Relocated{}, fmt.Errorf("`%s` at %#x: its target %#x is beyond ±2 GiB of the pad", in.String(), in.Addr, target)
			}
			code := []byte{0x0f, 0x80 | cc, 0, 0, 0, 0}
			binary.LittleEndian.PutUint32(code[2:], uint32(int32(d)))
			return Relocated{Code: code, Exits: true}, nil
		case l.omap == 0 && l.op == 0xe8:
			j := jmpTo(at+pushRetLen, target)
			return Relocated{Code: pushRet(next, j), Exits: true, Pushed: pushRetLen}, nil
		}
		return Relocated{}, fmt.Errorf("`%s` at %#x cannot be relocated to a pad (loop, jrcxz or xbegin)", in.String(), in.Addr)
	}
	code := append([]byte(nil), in.Bytes...)
	if in.RIPDispOff >= 0 {
		old := int64(int32(binary.LittleEndian.Uint32(in.Bytes[in.RIPDispOff:])))
		target := next + uint64(old)
		nd := int64(target - (at + uint64(in.Len)))
		if nd != int64(int32(nd)) {
			return Relocated{}, fmt.Errorf("`%s` at %#x: the pad at %#x is %s from its operand at %#x (rip-relative reach is ±2 GiB)", in.String(), in.Addr, at, distance(at, target), target)
		}
		binary.LittleEndian.PutUint32(code[in.RIPDispOff:], uint32(int32(nd)))
	}
	switch {
	case legacy && l.omap == 0 && (l.op == 0xc3 || l.op == 0xc2):
		return Relocated{Code: code, Exits: true}, nil
	case legacy && l.omap == 0 && l.op == 0xff && (l.reg() == 4 || l.reg() == 5):
		return Relocated{Code: code, Exits: true}, nil
	case legacy && l.omap == 0 && l.op == 0xff && l.reg() == 2:
		// call *x: push the original return address, then jmp *x (the
		// same ModRM with reg 4). An operand through rsp would see the
		// push: refused.
		if l.memOperand() && usesRSP(in) {
			return Relocated{}, fmt.Errorf("`%s` at %#x calls through the stack: it cannot be relocated", in.String(), in.Addr)
		}
		j := append([]byte(nil), in.Bytes...)
		j[l.modrmOff] = j[l.modrmOff]&^0x38 | 4<<3
		if in.RIPDispOff >= 0 {
			old := int64(int32(binary.LittleEndian.Uint32(in.Bytes[in.RIPDispOff:])))
			target := next + uint64(old)
			jat := at + pushRetLen
			nd := int64(target - (jat + uint64(in.Len)))
			if nd != int64(int32(nd)) {
				return Relocated{}, fmt.Errorf("`%s` at %#x: its operand at %#x is beyond ±2 GiB of the pad", in.String(), in.Addr, target)
			}
			binary.LittleEndian.PutUint32(j[in.RIPDispOff:], uint32(int32(nd)))
		}
		return Relocated{Code: pushRet(next, j), Exits: true, Pushed: pushRetLen}, nil
	}
	if in.Class == Branch {
		return Relocated{}, fmt.Errorf("`%s` at %#x: a control transfer the pad cannot relocate", in.String(), in.Addr)
	}
	return Relocated{Code: code}, nil
}

// jmpTo encodes a jump from at to target: e9 rel32, or jmp *0(%rip)
// followed by the absolute address when the target is beyond ±2 GiB.
func jmpTo(at, target uint64) []byte {
	d := int64(target - (at + 5))
	if d == int64(int32(d)) {
		code := []byte{0xe9, 0, 0, 0, 0}
		binary.LittleEndian.PutUint32(code[1:], uint32(int32(d)))
		return code
	}
	code := []byte{0xff, 0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.LittleEndian.PutUint64(code[6:], target)
	return code
}

// JmpTo is jmpTo for the pad builder.
func JmpTo(at, target uint64) []byte { return jmpTo(at, target) }

// pushRetLen is the length of pushRet's push.
const pushRetLen = 6

// pushRet is a relocated call: push ret(%rip), the 64-bit return address
// kept after the jump j that follows (which never falls through), then j,
// then the address. The push is the one instruction that changes
// anything before the jump, touching no register but rsp and no flag.
func pushRet(ret uint64, j []byte) []byte {
	code := []byte{0xff, 0x35, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(code[2:], uint32(len(j)))
	code = append(code, j...)
	return binary.LittleEndian.AppendUint64(code, ret)
}

func usesRSP(in *Insn) bool {
	if !in.asmOK {
		return true
	}
	for _, a := range in.Inst.Args {
		if m, ok := a.(x86asm.Mem); ok && (m.Base == x86asm.RSP || m.Index == x86asm.RSP || m.Base == x86asm.ESP) {
			return true
		}
	}
	return false
}

// StackDelta returns how much the instruction, run from a pad, moves rsp
// when control falls through it: -8 for a push, +8 for a pop, the
// immediate of add/sub to rsp, the displacement of lea d(%rsp),%rsp, 0 for
// instructions that leave rsp alone. ok is false for any other write to rsp
// (mov to rsp, and, leave, enter, a 16-bit push): the pad could not find
// its state again.
func StackDelta(in *Insn) (int64, bool) {
	if in.Mode != 64 {
		return 0, false
	}
	if !in.asmOK {
		// endbr64 and hint nops x86asm does not know: they write no register
		return 0, in.isEndbr() || in.lay.esc == escNone && in.lay.omap == 1 && in.lay.op >= 0x18 && in.lay.op <= 0x1f
	}
	inst := &in.Inst
	isRSP := func(a x86asm.Arg) bool {
		return a == x86asm.RSP || a == x86asm.ESP || a == x86asm.SP || a == x86asm.SPB
	}
	switch inst.Op {
	case x86asm.PUSH, x86asm.PUSHFQ:
		if in.lay.p66 {
			return 0, false
		}
		return -8, true
	case x86asm.POP, x86asm.POPFQ:
		if in.lay.p66 || isRSP(inst.Args[0]) {
			return 0, false
		}
		return 8, true
	case x86asm.SUB, x86asm.ADD:
		if inst.Args[0] == x86asm.RSP {
			if imm, ok := inst.Args[1].(x86asm.Imm); ok {
				if inst.Op == x86asm.SUB {
					return -int64(imm), true
				}
				return int64(imm), true
			}
			return 0, false
		}
	case x86asm.LEA:
		if inst.Args[0] == x86asm.RSP {
			if m, ok := inst.Args[1].(x86asm.Mem); ok && m.Base == x86asm.RSP && m.Index == 0 && m.Segment == 0 {
				return m.Disp, true
			}
			return 0, false
		}
	case x86asm.LEAVE, x86asm.ENTER, x86asm.PUSHF, x86asm.POPF, x86asm.PUSHA, x86asm.POPA:
		return 0, false
	}
	if inst.Op == x86asm.XCHG || inst.Op == x86asm.CMPXCHG || inst.Op == x86asm.XADD {
		for _, a := range inst.Args {
			if isRSP(a) {
				return 0, false
			}
		}
	}
	if inst.Args[0] != nil && isRSP(inst.Args[0]) {
		switch inst.Op {
		case x86asm.CMP, x86asm.TEST, x86asm.PUSH:
		default:
			return 0, false
		}
	}
	return 0, true
}
