package x86

// Jump placement, for jump pads (docs/engine.md, "Jump pads: probes that run inside the process").
//
// A fast probe replaces the instruction at a probe address with a 5-byte
// `jmp rel32` (e9 + rel32) to a pad in the process. When that instruction
// is shorter than 5 bytes the jump also overwrites the instruction(s) after
// it, which then run from the pad as well. PlanJump decides, from the
// function's original bytes alone, whether that is safe: which
// instructions the jump covers, that each can run from the pad, and that
// no branch in the function lands inside the covered bytes. What the bytes
// cannot tell (threads, signal frames, the pad's distance) is the caller's;
// docs/x86.md, "Jump placement (for jump pads)", lists it.

import (
	"fmt"

	"golang.org/x/arch/x86/x86asm"
)

// JumpLen is the length of the jump a fast probe writes: e9 rel32.
const JumpLen = 5

// JumpPlan says whether a 5-byte jump can replace the instructions at addr
// of a function, and which ones it covers.
type JumpPlan struct {
	// Covered are the decoded instructions the jump covers, in order,
	// starting with the one at addr; their lengths sum to >= JumpLen. When
	// Reason is not empty they are what the jump would have covered, as
	// far as that could be worked out (nil when the function does not
	// decode, addr is not an instruction boundary or the function ends
	// too soon).
	Covered []Insn
	// Len is the number of bytes covered: the sum of the Covered lengths.
	Len int
	// Reason is "" when the jump is safe as far as the function's bytes
	// tell; else why not, without the route (query prints "int3: " +
	// Reason).
	Reason string
}

// OK reports whether the jump may go in (as far as the bytes tell).
func (p JumpPlan) OK() bool { return p.Reason == "" && p.Len >= JumpLen }

// PlanJump decides whether a JumpLen-byte jump can replace the instruction
// at addr in fn, the whole function's ORIGINAL code (every int3 or jump a
// probe planted replaced by the saved bytes), which starts at fnAddr; mode
// is 64 or 32.
//
// It decodes the function linearly from fnAddr to its end and refuses when
//
//   - the function does not decode to its end (its branches are unknown),
//     or addr is not an instruction boundary or is outside it;
//   - the function ends less than JumpLen bytes after addr;
//   - a covered instruction cannot run from a pad: class Refuse, an
//     eip-relative operand (67 prefix), or a control transfer (relative
//     branch, call, indirect jmp or call, ret) anywhere but last;
//   - a direct branch of the function (jmp, jcc, call, loop*, jrcxz,
//     xbegin's abort address) lands strictly inside (addr, addr+Len), or a
//     branch has an operand-size prefix (16-bit target);
//   - the function holds an indirect jump that may land anywhere (through
//     a register, or through memory with a base or index register: jump
//     tables, computed goto). An indirect jump through one fixed memory
//     word (`jmp *x(%rip)`, `jmp *abs`) is a tail call and accepted.
//
// A RIP-relative operand in a covered instruction is accepted: the pad
// rebases it. Whether the pad reaches its operand (±2 GiB), system calls
// and software interrupts among the covered instructions, and everything
// about threads are the caller's; see docs/x86.md.
func PlanJump(fn []byte, fnAddr, addr uint64, mode int) JumpPlan {
	if mode != 64 && mode != 32 {
		return JumpPlan{Reason: fmt.Sprintf("mode %d is not 64 or 32", mode)}
	}
	fnEnd := fnAddr + uint64(len(fn))
	if fnEnd < fnAddr || mode == 32 && fnEnd > 1<<32 {
		return JumpPlan{Reason: fmt.Sprintf("the function at %#x (%d bytes) wraps around the address space", fnAddr, len(fn))}
	}
	if addr < fnAddr || addr >= fnEnd {
		return JumpPlan{Reason: fmt.Sprintf("%#x is outside the function [%#x, %#x)", addr, fnAddr, fnEnd)}
	}
	sc, err := scan(fn, fnAddr, mode)
	if err != "" {
		return JumpPlan{Reason: err}
	}
	if !sc.starts[addr-fnAddr] {
		pc := addr - fnAddr
		for !sc.starts[pc] {
			pc--
		}
		in, _ := Decode(fn[pc:], fnAddr+pc, mode)
		return JumpPlan{Reason: fmt.Sprintf("%#x is inside `%s` at %#x (%d bytes), not an instruction boundary", addr, in.String(), in.Addr, in.Len)}
	}
	if left := fnEnd - addr; left < JumpLen {
		unit := "bytes"
		if left == 1 {
			unit = "byte"
		}
		return JumpPlan{Reason: fmt.Sprintf("the function ends %d %s after the probe", left, unit)}
	}

	var p JumpPlan
	for pc := addr; p.Len < JumpLen; {
		in, err := Decode(fn[pc-fnAddr:], pc, mode)
		if err != nil { // scan decoded it: cannot happen
			return JumpPlan{Reason: err.Error()}
		}
		p.Covered = append(p.Covered, in)
		p.Len += in.Len
		pc += uint64(in.Len)
	}
	for i := range p.Covered {
		if why := relocatable(&p.Covered[i], i == len(p.Covered)-1); why != "" {
			p.Reason = why
			return p
		}
	}
	lo, hi := CoveredRange(p, addr)
	for _, b := range sc.branches {
		if b.p66 {
			p.Reason = fmt.Sprintf("the branch at %#x has an operand-size prefix: its target is 16-bit", b.from)
			return p
		}
		if b.to >= lo && b.to < hi {
			p.Reason = fmt.Sprintf("a branch at %#x lands inside the covered bytes (at %#x)", b.from, b.to)
			return p
		}
	}
	if len(sc.indirect) > 0 {
		in, _ := Decode(fn[sc.indirect[0]-fnAddr:], sc.indirect[0], mode)
		p.Reason = fmt.Sprintf("an indirect jump in the function may land inside the covered bytes (`%s` at %#x)", in.String(), in.Addr)
		return p
	}
	return p
}

// CoveredRange returns the addresses a thread must not be at when the jump
// is written, as the half-open range [lo, hi): every covered byte but the
// first, (addr, addr+p.Len). A thread at addr itself is fine (it runs the
// jump); one at any other covered byte would resume inside the jump's
// rel32 or inside the next instruction. lo == hi when nothing lies beyond
// addr.
func CoveredRange(p JumpPlan, addr uint64) (lo, hi uint64) {
	if p.Len <= 1 {
		return addr + 1, addr + 1
	}
	return addr + 1, addr + uint64(p.Len)
}

// InsideCovered reports whether pc is strictly inside the bytes the jump
// at addr covers: a thread stopped there forbids the jump (and so does a
// return address or a signal frame's saved pc there; see docs/x86.md).
func InsideCovered(p JumpPlan, addr, pc uint64) bool {
	lo, hi := CoveredRange(p, addr)
	return pc >= lo && pc < hi
}

// BranchTargets decodes code (at codeAddr) linearly and returns the
// targets of its direct branches (jmp, jcc, call, loop*, jrcxz, xbegin).
// PlanJump sees the branches of the function it is given only; a caller
// checks the others that may enter the function (gcc's `.cold` parts, the
// shared tails of hand-written assembly) with BranchTargets and
// InsideCovered. The error says where decoding stopped.
func BranchTargets(code []byte, codeAddr uint64, mode int) ([]uint64, error) {
	if mode != 64 && mode != 32 {
		return nil, fmt.Errorf("mode %d is not 64 or 32", mode)
	}
	sc, why := scan(code, codeAddr, mode)
	if why != "" {
		return nil, fmt.Errorf("%s", why)
	}
	out := make([]uint64, 0, len(sc.branches))
	for _, b := range sc.branches {
		out = append(out, b.to)
	}
	return out, nil
}

type branch struct {
	from, to uint64
	p66      bool // operand-size prefix: 16-bit target (the length was already vendor-dependent in 64-bit mode and failed to decode)
}

// scanned is what a linear decode of a function found.
type scanned struct {
	starts   []bool // starts[i]: an instruction starts at fnAddr+i
	branches []branch
	indirect []uint64 // indirect jumps that may land anywhere
}

// scan decodes fn linearly with the structural decoder (x86asm only for
// indirect jumps). why is not empty when it cannot decode all of fn.
func scan(fn []byte, fnAddr uint64, mode int) (sc scanned, why string) {
	sc.starts = make([]bool, len(fn))
	for pc := 0; pc < len(fn); {
		l, err := parseLayout(fn[pc:], mode)
		if err != nil {
			n := min(len(fn)-pc, maxInsnLen)
			return sc, fmt.Sprintf("the function does not decode to its end, so its branches are unknown: at %#x (% x): %v", fnAddr+uint64(pc), fn[pc:pc+n], err)
		}
		sc.starts[pc] = true
		at := fnAddr + uint64(pc)
		next := at + uint64(l.len)
		if mode == 32 {
			next &= 0xffffffff
		}
		code := fn[pc : pc+l.len]
		if rel, ok := relBranch(&l, code); ok {
			to := next + rel
			if mode == 32 {
				to &= 0xffffffff
			}
			sc.branches = append(sc.branches, branch{from: at, to: to, p66: l.p66})
		} else if mayLandAnywhere(&l, code, at, mode) {
			sc.indirect = append(sc.indirect, at)
		}
		pc += l.len
	}
	return sc, ""
}

// relBranch returns the sign-extended displacement of a direct branch:
// jcc, jmp, call, loop*, jrcxz (relative to the next instruction), and
// xbegin, whose abort address is relative too.
func relBranch(l *layout, code []byte) (uint64, bool) {
	if l.esc != escNone || l.immOff < 0 {
		return 0, false
	}
	switch op := l.op; {
	case l.omap == 0 && (op >= 0x70 && op <= 0x7f || op == 0xeb || op == 0xe9 || op == 0xe8 || op >= 0xe0 && op <= 0xe3),
		l.omap == 0 && op == 0xc7 && l.modrm == 0xf8,
		l.omap == 1 && op >= 0x80 && op <= 0x8f:
	default:
		return 0, false
	}
	b := code[l.immOff : l.immOff+l.immLen]
	switch l.immLen {
	case 1:
		return uint64(int64(int8(b[0]))), true
	case 2:
		return uint64(int64(int16(uint16(b[0]) | uint16(b[1])<<8))), true
	case 4:
		return uint64(int64(int32(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24))), true
	}
	return 0, false
}

// mayLandAnywhere reports whether the instruction is an indirect jump
// whose target PlanJump cannot bound: near or far `jmp` through a register
// or through memory addressed with a base or index register (a jump
// table). A near jump through one fixed word (RIP-relative or absolute,
// no index) reads a GOT or PLT slot: a tail call to another function.
func mayLandAnywhere(l *layout, code []byte, at uint64, mode int) bool {
	if l.esc != escNone || l.omap != 0 || l.op != 0xff || (l.reg() != 4 && l.reg() != 5) {
		return false
	}
	if l.reg() == 5 || l.mod() == 3 {
		return true
	}
	in, err := Decode(code, at, mode)
	if err != nil || !in.asmOK {
		return true
	}
	m, ok := in.Inst.Args[0].(x86asm.Mem)
	if !ok {
		return true
	}
	fixed := (m.Base == 0 || m.Base == x86asm.RIP) && m.Index == 0 && !l.p67
	return !fixed
}

// relocatable says why the covered instruction in cannot run from a pad,
// or "". last says it is the last covered instruction.
func relocatable(in *Insn, last bool) string {
	if in.Class == Refuse {
		return fmt.Sprintf("`%s` at %#x cannot run out of line: %s", in.String(), in.Addr, in.Why)
	}
	l := &in.lay
	if l.ripRel && l.p67 {
		return fmt.Sprintf("`%s` at %#x has an eip-relative operand (address-size prefix): it cannot be relocated to a pad", in.String(), in.Addr)
	}
	if last {
		return ""
	}
	legacy := l.esc == escNone
	switch {
	case in.Class == Branch && legacy && l.omap == 0 && l.op == 0xe8,
		legacy && l.omap == 0 && l.op == 0xff && l.reg() == 2:
		return fmt.Sprintf("`%s` at %#x is a call in the middle of the covered bytes: its return address %#x would be inside the jump", in.String(), in.Addr, in.truncIP(in.Addr+uint64(in.Len)))
	case in.Class == Branch,
		legacy && l.omap == 0 && (l.op == 0xc2 || l.op == 0xc3 || l.op == 0xff && l.reg() == 4):
		return fmt.Sprintf("`%s` at %#x transfers control in the middle of the covered bytes: only the last covered instruction may (the pad ends with it)", in.String(), in.Addr)
	}
	return ""
}
