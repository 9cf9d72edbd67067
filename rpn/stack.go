package rpn

// The stack analysis of the lowering (lower.go), which the machine and the
// compilers of verified programs (package jit for jump pads, package bpf
// for the kernel) share: whether every path reaches
// each instruction of a probe with the same TOS index, so that the
// 32-entry stack's slots are at fixed places ("static stack"), and which
// slots a hit may read before writing them (those the machine's zeroed
// stack must give as 0).

// StackEffect is what one instruction does to the stack: entries read
// (from the TOS down), the change of the TOS index, entries written (from
// the new TOS down).
func StackEffect(in Insn) (reads, delta, writes int) {
	switch in.Op {
	case OpJz, OpJnz, OpJlt, OpJle, OpJgt, OpJge:
		return 1, 0, 0
	case OpLoop:
		return 1, 0, 1
	case OpLogN:
		return int(in.A), -int(in.A), 0
	case OpRos:
		return 0, -int(in.A), 0
	case OpLogStr, OpLogMrf, OpPopMrf, OpPopIO, OpPopLV, OpPopGV:
		return 2, -2, 0
	case OpSetMaj, OpSetMin, OpPopLP, OpPopLVI, OpPopGVI, OpPopR, OpPopU, OpPopIV,
		OpIncLV, OpDecLV, OpIncGV, OpDecGV:
		return 1, -1, 0
	case OpMoveLVI, OpMoveGVI:
		return 1, 0, 0
	case OpMoveLV, OpMoveGV:
		return 2, -1, 0
	case OpPushLP, OpPushLVI, OpPushGVI, OpPushR, OpPushU, OpPushD,
		OpPushPID, OpPushTID, OpPushProcID, OpPushTask, OpPushTS, OpPushField, OpPushIV, OpPushArg:
		return 0, 1, 1
	case OpPushLV, OpPushGV, OpNot, OpNeg,
		OpShlI, OpShrI, OpSarI, OpRolI, OpRorI,
		OpVfyR, OpVfyRW, OpPushMrf, OpPushIO:
		return 1, 0, 1
	case OpAdd, OpSub, OpMul, OpAnd, OpOr, OpXor,
		OpShl, OpShr, OpSar, OpRol, OpRor:
		return 2, -1, 1
	case OpDiv, OpIDiv, OpXchg:
		return 2, 0, 2
	case OpPop:
		return 0, -1, 0
	case OpDup:
		return 1, 1, 1
	}
	// nop, jmp, call, ret, exit, abort, rem, log lv/gv, setmaj/setmin
	// immediate, inc/dec lv/gv immediate, enable, disable
	return 0, 0, 0
}

// Ends reports whether control never falls through to the next
// instruction.
func (op Opcode) Ends() bool { return op.ends() }

// StackLayout is what StaticStack found for a probe.
type StackLayout struct {
	// Static: every path reaches each instruction with the same TOS index
	// (none when the probe calls a routine, which may run at several
	// depths, or has a ret).
	Static bool
	// NeedZero: the slots (bit k: slot k, TOS index 0 at the hit) a hit
	// may read before writing them; all of them when not Static.
	NeedZero uint32
	// Reach and Depth, when Static, by instruction of the probe (0 its
	// first): whether a path reaches it, and the TOS index it has there.
	Reach []bool
	Depth []int
}

// staticStack is a forward data flow over probe pi's instructions of the
// TOS index (which must agree on every path into an instruction) and the
// slots surely written or read before (intersected where paths meet). A
// read of a slot not surely written is one the hit must zero first.
func (p *Program) staticStack(pi int) StackLayout {
	first, n := p.Entry(pi), p.End(pi)-p.Entry(pi)
	out := StackLayout{NeedZero: ^uint32(0)}
	for i := 0; i < n; i++ {
		if op := p.Insn(first + i).Op; op == OpCall || op == OpRet {
			return out // a routine may be called at several depths
		}
	}
	type state struct {
		d     int
		known uint32
		ok    bool
	}
	st := make([]state, n)
	st[0] = state{ok: true}
	work := []int{0}
	var need uint32
	for len(work) > 0 {
		i := work[len(work)-1]
		work = work[:len(work)-1]
		s := st[i]
		in := p.Insn(first + i)
		r, delta, w := StackEffect(in)
		for k := 0; k < r; k++ {
			bit := uint32(1) << ((s.d - k) & 31)
			if s.known&bit == 0 {
				need |= bit
				s.known |= bit // zeroed at the hit from now on
			}
		}
		d := (s.d + delta) & 31
		for k := 0; k < w; k++ {
			s.known |= 1 << ((d - k) & 31)
		}
		var succ [2]int
		ns := 0
		if !in.Op.ends() {
			succ[ns] = i + 1
			ns++
		}
		if in.Op.IsJump() {
			succ[ns] = int(in.C) - first
			ns++
		}
		for _, j := range succ[:ns] {
			t := &st[j]
			switch {
			case !t.ok:
				*t = state{d: d, known: s.known, ok: true}
				work = append(work, j)
			case t.d != d:
				return out // depends on the path: dynamic
			case t.known&s.known != t.known:
				t.known &= s.known
				work = append(work, j)
			}
		}
	}
	out.Static, out.NeedZero = true, need
	out.Reach, out.Depth = make([]bool, n), make([]int, n)
	for i, s := range st {
		out.Reach[i], out.Depth[i] = s.ok, s.d
	}
	return out
}
