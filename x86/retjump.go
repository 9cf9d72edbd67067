package x86

import "fmt"

// Jump placement at a function's returns, for return probes on jump pads
// (docs/engine.md, "Return probes on jump pads").
//
// A return probe's pad runs its programs with the registers as they are
// after the return, then executes the ret itself. The jump that leads
// there must end with the ret: PlanRetJump finds 5 bytes that do, from
// the function's original bytes alone.

// PlanRetJump decides where a JumpLen-byte jump can go so that it covers
// the ret at ret and ends with it. fn is the function's ORIGINAL code from
// fnAddr; after is the bytes that follow it up to the next symbol (its
// alignment padding; may be nil). It tries, in order:
//
//   - the ret alone, followed by padding: the bytes after the ret up to
//     the function's end, and after it, are int3 (0xcc) or nop fill, at
//     least JumpLen-1 of them, and no branch of the function lands among
//     them. The plan covers the ret only (Covered) but Len is JumpLen:
//     the jump overwrites fill that never runs.
//   - a run of whole instructions ending with the ret: the fewest before
//     it that make JumpLen bytes, each one relocatable and none a control
//     transfer, with no branch of the function landing strictly inside
//     (first, ret's end) (a branch to the first one is fine: it reaches
//     the jump).
//
// The function must decode to its end and hold no indirect jump that may
// land anywhere (as PlanJump). Reason says why neither fits. What else in
// the file enters the covered bytes, threads, and the pad's reach are the
// caller's, as for PlanJump.
func PlanRetJump(fn []byte, fnAddr, ret uint64, after []byte, mode int) JumpPlan {
	if mode != 64 {
		return JumpPlan{Reason: "return probes on jump pads are for 64-bit code"}
	}
	fnEnd := fnAddr + uint64(len(fn))
	if ret < fnAddr || ret >= fnEnd {
		return JumpPlan{Reason: fmt.Sprintf("%#x is outside the function [%#x, %#x)", ret, fnAddr, fnEnd)}
	}
	sc, why := scan(fn, fnAddr, mode)
	if why != "" {
		// a function with padding at its end up to its size: scan only
		// to where FunctionExits stops
		return JumpPlan{Reason: why}
	}
	if !sc.starts[ret-fnAddr] {
		return JumpPlan{Reason: fmt.Sprintf("%#x is not an instruction boundary", ret)}
	}
	rin, err := Decode(fn[ret-fnAddr:], ret, mode)
	if err != nil || !IsRet(rin.Bytes) {
		return JumpPlan{Reason: fmt.Sprintf("%#x is not a ret", ret)}
	}
	if len(sc.indirect) > 0 {
		in, _ := Decode(fn[sc.indirect[0]-fnAddr:], sc.indirect[0], mode)
		return JumpPlan{Reason: fmt.Sprintf("an indirect jump in the function may land inside the covered bytes (`%s` at %#x)", in.String(), in.Addr)}
	}
	retEnd := ret + uint64(rin.Len)
	landsIn := func(lo, hi uint64) (branch, bool) {
		for _, b := range sc.branches {
			if b.p66 || b.to >= lo && b.to < hi {
				return b, true
			}
		}
		return branch{}, false
	}
	// the ret followed by fill
	tail := append(append([]byte(nil), fn[retEnd-fnAddr:]...), after...)
	if n := fillLen(tail, retEnd, mode); rin.Len+n >= JumpLen {
		p := JumpPlan{Covered: []Insn{rin}, Len: JumpLen}
		if b, ok := landsIn(ret+1, ret+JumpLen); !ok {
			return p
		} else if b.p66 {
			return JumpPlan{Reason: fmt.Sprintf("the branch at %#x has an operand-size prefix: its target is 16-bit", b.from)}
		}
	}
	// a run of instructions ending with the ret
	var run []Insn
	total := rin.Len
	first := ret
	for total < JumpLen {
		pc := first
		if pc == fnAddr {
			return JumpPlan{Reason: fmt.Sprintf("the ret at %#x is %d bytes from the function's start, with no fill after it: no room for a %d-byte jump", ret, ret+uint64(rin.Len)-fnAddr, JumpLen)}
		}
		pc--
		for !sc.starts[pc-fnAddr] {
			pc--
		}
		in, err := Decode(fn[pc-fnAddr:], pc, mode)
		if err != nil {
			return JumpPlan{Reason: err.Error()}
		}
		if why := relocatable(&in, false); why != "" {
			return JumpPlan{Reason: why}
		}
		if in.Class == Branch || in.lay.esc == escNone && in.lay.omap == 0 && (in.lay.op == 0xc2 || in.lay.op == 0xc3 || in.lay.op == 0xff && (in.lay.reg() == 2 || in.lay.reg() == 4)) {
			return JumpPlan{Reason: fmt.Sprintf("`%s` at %#x, before the ret at %#x, transfers control: the jump cannot cover it (and no fill follows the ret)", in.String(), in.Addr, ret)}
		}
		run = append([]Insn{in}, run...)
		total += in.Len
		first = pc
	}
	p := JumpPlan{Covered: append(run, rin), Len: total}
	if b, ok := landsIn(first+1, retEnd); ok {
		if b.p66 {
			return JumpPlan{Reason: fmt.Sprintf("the branch at %#x has an operand-size prefix: its target is 16-bit", b.from)}
		}
		return JumpPlan{Covered: p.Covered, Reason: fmt.Sprintf("a branch at %#x lands inside the covered bytes (at %#x), and no fill follows the ret", b.from, b.to)}
	}
	return p
}

// fillLen is how many bytes at the start of b are alignment fill: int3s
// and nops (0x90, and the multi-byte nops 0f 1f /0 with any 66 and 2e
// prefixes that assemblers pad with), counting whole instructions only.
func fillLen(b []byte, at uint64, mode int) int {
	n := 0
	for n < len(b) && n < 16 {
		if b[n] == 0xcc || b[n] == 0x90 {
			n++
			continue
		}
		in, err := Decode(b[n:], at+uint64(n), mode)
		if err != nil || !isNop(&in) {
			break
		}
		n += in.Len
	}
	return n
}

// isNop: a multi-byte nop (0f 1f /0, with prefixes) or xchg %ax,%ax.
func isNop(in *Insn) bool {
	l := &in.lay
	return l.esc == escNone && (l.omap == 1 && l.op == 0x1f && l.reg() == 0 || l.omap == 0 && l.op == 0x90)
}

// PlanJumpFill places a jump at addr that covers the instructions from
// addr to the first ret after it and the alignment fill that follows the
// ret (to the function's end, then after, the bytes up to the next
// symbol): a short function (`ret`, `xor %eax,%eax; ret`) whose own bytes
// from addr are fewer than JumpLen. Every covered instruction but the ret
// must be relocatable and not transfer control; no branch of the function
// may land strictly inside (addr, addr+Len). Len is JumpLen when the
// instructions are shorter, else their length.
func PlanJumpFill(fn []byte, fnAddr, addr uint64, after []byte, mode int) JumpPlan {
	if mode != 64 {
		return JumpPlan{Reason: "jump pads are for 64-bit code"}
	}
	fnEnd := fnAddr + uint64(len(fn))
	if addr < fnAddr || addr >= fnEnd {
		return JumpPlan{Reason: fmt.Sprintf("%#x is outside the function [%#x, %#x)", addr, fnAddr, fnEnd)}
	}
	sc, why := scan(fn, fnAddr, mode)
	if why != "" {
		return JumpPlan{Reason: why}
	}
	if !sc.starts[addr-fnAddr] {
		return JumpPlan{Reason: fmt.Sprintf("%#x is not an instruction boundary", addr)}
	}
	if len(sc.indirect) > 0 {
		in, _ := Decode(fn[sc.indirect[0]-fnAddr:], sc.indirect[0], mode)
		return JumpPlan{Reason: fmt.Sprintf("an indirect jump in the function may land inside the covered bytes (`%s` at %#x)", in.String(), in.Addr)}
	}
	var p JumpPlan
	pc := addr
	for {
		if pc >= fnEnd || p.Len >= JumpLen {
			return JumpPlan{Reason: "no ret followed by fill within the jump's bytes"}
		}
		in, err := Decode(fn[pc-fnAddr:], pc, mode)
		if err != nil {
			return JumpPlan{Reason: err.Error()}
		}
		p.Covered = append(p.Covered, in)
		p.Len += in.Len
		pc += uint64(in.Len)
		if IsRet(in.Bytes) {
			break
		}
		if why := relocatable(&in, false); why != "" {
			return JumpPlan{Reason: why}
		}
		if in.Class == Branch || in.lay.esc == escNone && in.lay.omap == 0 && in.lay.op == 0xff && (in.lay.reg() == 2 || in.lay.reg() == 4) {
			return JumpPlan{Reason: fmt.Sprintf("`%s` at %#x transfers control before the function's ret", in.String(), in.Addr)}
		}
	}
	if p.Len < JumpLen {
		tail := append(append([]byte(nil), fn[pc-fnAddr:]...), after...)
		if p.Len+fillLen(tail, pc, mode) < JumpLen {
			return JumpPlan{Reason: fmt.Sprintf("the function ends %d bytes after the probe, and the fill after its ret is shorter than the jump", p.Len)}
		}
		p.Len = JumpLen
	}
	for _, b := range sc.branches {
		if b.p66 {
			return JumpPlan{Reason: fmt.Sprintf("the branch at %#x has an operand-size prefix: its target is 16-bit", b.from)}
		}
		if b.to > addr && b.to < addr+uint64(p.Len) {
			return JumpPlan{Reason: fmt.Sprintf("a branch at %#x lands inside the covered bytes (at %#x)", b.from, b.to)}
		}
	}
	return p
}
