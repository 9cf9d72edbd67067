package x86

// Out-of-line (XOL) execution.
//
// A slot is SlotSize bytes of executable memory in the target, within
// ±2 GiB of the probed code when possible. PrepareXOL fills it:
//
//	slot+0        the instruction, RIP-relative displacement rebased
//	slot+Len      jmp back to Addr+Len: e9 rel32 (5 bytes) when it reaches,
//	              else ff 25 00 00 00 00 + 8-byte address (14 bytes)
//	...           int3 up to SlotSize
//
// The jump back is written for Step slots as well: a single-step stops
// before it, but a thread that runs on unsupervised (the child of a clone
// or vfork stepped out of line, a thread the engine detaches from
// mid-step) still lands at Addr+Len instead of in the int3 padding.

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gprobes/gprobes/rpn"
)

// SlotSize is the size of one XOL slot: the longest instruction (15
// bytes) plus an absolute jump (14), rounded up.
const SlotSize = 32

// ErrStepAgain is returned by FixupAfterStep when a rep-prefixed string
// instruction stopped after one iteration with iterations left (a
// single-step traps after each one); rip is still at the slot and regs are
// unchanged. The engine either steps again until the fixup succeeds (one
// trap per iteration), or resumes the thread at the slot: the remaining
// iterations run natively and the slot's jump back brings the thread to
// Addr+Len, at the price of committing the log before the instruction has
// completed (a later fault is then reported at the slot: see SlotPC).
var ErrStepAgain = errors.New("string instruction has iterations left: step again, or resume at the slot")

// PrepareXOL returns the SlotSize bytes to write at slot for in: the
// instruction, its RIP-relative displacement rebased to address the same
// memory from the slot, and the jump back to Addr+Len (see the layout
// above; boost does not change the bytes, the jump back is always there).
// It refuses Branch and Refuse classes and a slot too far from the memory
// a RIP-relative operand addresses.
func PrepareXOL(in *Insn, slot uint64, boost bool) ([]byte, error) {
	_ = boost
	switch in.Class {
	case Branch:
		return nil, fmt.Errorf("prepare out-of-line slot for `%s` at %#x: a relative branch cannot run out of line (use EmulateBranch)", in.String(), in.Addr)
	case Refuse:
		return nil, fmt.Errorf("prepare out-of-line slot for `%s` at %#x: %s", in.String(), in.Addr, in.Why)
	}
	if in.Len == 0 || in.Len > maxInsnLen {
		return nil, fmt.Errorf("prepare out-of-line slot at %#x: no decoded instruction", in.Addr)
	}
	out := make([]byte, SlotSize)
	for i := range out {
		out[i] = 0xcc
	}
	copy(out, in.Bytes)
	if in.RIPDispOff >= 0 {
		if in.Mode != 64 {
			return nil, fmt.Errorf("prepare out-of-line slot for `%s`: rip-relative operand in %d-bit mode", in.String(), in.Mode)
		}
		old := int64(int32(binary.LittleEndian.Uint32(in.Bytes[in.RIPDispOff:])))
		target := in.Addr + uint64(in.Len) + uint64(old)
		nd := int64(target - (slot + uint64(in.Len)))
		if nd != int64(int32(nd)) {
			return nil, fmt.Errorf("prepare out-of-line slot for `%s` at %#x: the slot at %#x is %s from the operand at %#x; rip-relative reach is ±2 GiB: place the XOL area nearer the code",
				in.String(), in.Addr, slot, distance(slot, target), target)
		}
		binary.LittleEndian.PutUint32(out[in.RIPDispOff:], uint32(int32(nd)))
	}
	jmpBack(out[in.Len:], slot+uint64(in.Len), in.truncIP(in.Addr+uint64(in.Len)), in.Mode)
	return out, nil
}

// jmpBack encodes a jump from at to target into p (at least 14 bytes).
func jmpBack(p []byte, at, target uint64, mode int) {
	rel := int64(target - (at + 5))
	if mode == 32 || rel == int64(int32(rel)) {
		p[0] = 0xe9
		binary.LittleEndian.PutUint32(p[1:], uint32(rel))
		return
	}
	// jmp *0(%rip); .quad target
	copy(p, []byte{0xff, 0x25, 0, 0, 0, 0})
	binary.LittleEndian.PutUint64(p[6:], target)
}

func distance(a, b uint64) string {
	d := a - b
	if int64(d) < 0 {
		d = -d
	}
	return fmt.Sprintf("%#x bytes", d)
}

// FixupAfterStep adjusts regs after the engine single-stepped in at slot:
//
//   - rip at slot+Len becomes Addr+Len;
//   - an indirect call pushed slot+Len as its return address: the stack
//     word becomes Addr+Len (written through mem);
//   - pushf pushed the trap flag the step set: it is cleared in the
//     pushed image;
//   - syscall put slot+Len in rcx: it becomes Addr+Len;
//   - ret, indirect jmp and indirect call leave rip at their target, and a
//     system call may return elsewhere (rt_sigreturn, execve);
//   - a rep string instruction with iterations left is ErrStepAgain.
//
// Anything else with rip not at slot+Len is an error. regs is changed only
// on success.
func FixupAfterStep(in *Insn, slot uint64, regs *Regs, mem Mem) error {
	l := &in.lay
	end := in.truncIP(slot + uint64(in.Len))
	next := in.truncIP(in.Addr + uint64(in.Len))
	rip := regs[rpn.RegRIP]
	w := in.stackWidth()
	sp := regs[rpn.RegRSP]
	if in.Mode == 32 {
		sp &= 0xffffffff
	}

	legacy := l.esc == escNone
	isCall := legacy && l.omap == 0 && l.op == 0xff && l.reg() == 2
	isIndirect := legacy && l.omap == 0 && (l.op == 0xc2 || l.op == 0xc3 || l.op == 0xff && l.reg() == 4)
	isSyscall := legacy && (l.omap == 1 && (l.op == 0x05 || l.op == 0x34) || l.omap == 0 && l.op == 0xcd)
	isPushf := legacy && l.omap == 0 && l.op == 0x9c
	isString := in.isString()

	switch {
	case isCall:
		var buf [8]byte
		if !mem.Read(sp, buf[:w]) {
			return fmt.Errorf("fix up `%s` stepped at %#x: cannot read the return address at %#x", in.String(), slot, sp)
		}
		if got := binary.LittleEndian.Uint64(buf[:]); got != end {
			return fmt.Errorf("fix up `%s` stepped at %#x: the word at the stack top is %#x, not the return address %#x", in.String(), slot, got, end)
		}
		binary.LittleEndian.PutUint64(buf[:], next)
		if !mem.Write(sp, buf[:w]) {
			return fmt.Errorf("fix up `%s` stepped at %#x: cannot write the return address at %#x", in.String(), slot, sp)
		}
		return nil
	case isIndirect:
		return nil
	case rip == slot && isString && (l.rep || l.repne):
		return ErrStepAgain
	case rip != end:
		if isSyscall {
			return nil
		}
		return fmt.Errorf("fix up `%s` stepped at %#x: rip %#x is not the end of the instruction (%#x)", in.String(), slot, rip, end)
	}
	if isPushf {
		var buf [8]byte
		if !mem.Read(sp, buf[:w]) {
			return fmt.Errorf("fix up `%s` stepped at %#x: cannot read the pushed flags at %#x", in.String(), slot, sp)
		}
		if buf[1]&(FlagTF>>8) != 0 {
			buf[1] &^= FlagTF >> 8
			if !mem.Write(sp, buf[:w]) {
				return fmt.Errorf("fix up `%s` stepped at %#x: cannot write the pushed flags at %#x", in.String(), slot, sp)
			}
		}
	}
	if isSyscall && l.omap == 1 && l.op == 0x05 {
		if regs[rpn.RegRCX] == end {
			regs[rpn.RegRCX] = next
		}
		regs[rpn.RegR11] &^= FlagTF
	}
	regs[rpn.RegRIP] = next
	return nil
}

// isString reports whether in is a string instruction (movs, cmps, stos,
// lods, scas, ins, outs), which a rep prefix repeats.
func (in *Insn) isString() bool {
	l := &in.lay
	return l.esc == escNone && l.omap == 0 && (l.op >= 0xa4 && l.op <= 0xa7 || l.op >= 0xaa && l.op <= 0xaf || l.op >= 0x6c && l.op <= 0x6f)
}

// SlotPC maps a program counter inside in's slot to the equivalent address
// in the original code, for a thread the engine finds there (stopped by a
// signal or a fault, or when probes are removed): slot itself is Addr (the
// instruction has not completed: a fault there is the instruction's own
// fault and is delivered at Addr), anything in the jump back is Addr+Len.
// ok is false when pc is not in the slot.
func SlotPC(in *Insn, slot, pc uint64) (orig uint64, ok bool) {
	switch {
	case pc == slot:
		return in.Addr, true
	case pc >= slot+uint64(in.Len) && pc < slot+SlotSize:
		return in.truncIP(in.Addr + uint64(in.Len)), true
	}
	return 0, false
}
