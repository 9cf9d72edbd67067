package rpn

// The lowering: one analysis of each verified probe, made by Load and
// read by the three code generators of the bytecode (this package's
// machine, package jit for jump pads, package bpf for the kernel)
// instead of each walking the program again (docs/design.md, "One
// lowering").

// Needs says what instructions use beyond the stack: the set of one
// instruction (Opcode.Needs) or, in a Lowering, of every instruction of a
// probe.
type Needs uint32

const (
	NeedJump      Needs = 1 << iota // a jump, conditional jump, loop or call: counted against jmpmax
	NeedCall                        // call or ret: the call stack
	NeedLog                         // changes the log's length: log, log str/mrf/lv/gv/ustack/kstack, pop lp
	NeedMemRead                     // reads the target's memory: push mrf, log str, log mrf, vfy_r, vfy_rw
	NeedMemWrite                    // writes it: pop mrf
	NeedRegs                        // reads the probed registers: push r
	NeedSetRegs                     // writes them: pop r
	NeedUserRegs                    // the task's user-mode registers: push u, pop u
	NeedLV                          // the module's local variables
	NeedGV                          // the global variables
	NeedIV                          // the call's instance variables: push iv, pop iv
	NeedTime                        // push ts
	NeedIDs                         // the thread's ids: push pid, push tid
	NeedProcID                      // push procid
	NeedTask                        // push task
	NeedField                       // a tracepoint's field: push field
	NeedArg                         // a usdt argument: push arg
	NeedStackWalk                   // log ustack, log kstack
	NeedSwitch                      // enable, disable
	NeedIO                          // port IO: push io, pop io
)

// Has reports whether every need of x is in n.
func (n Needs) Has(x Needs) bool { return n&x == x }

// Needs is what instructions of op use beyond the stack.
func (op Opcode) Needs() Needs {
	var n Needs
	if op.IsJump() {
		n |= NeedJump
	}
	switch op {
	case OpCall, OpRet:
		n |= NeedCall
	case OpLogN, OpLogLV, OpLogGV, OpPopLP:
		n |= NeedLog
	case OpLogStr, OpLogMrf:
		n |= NeedLog | NeedMemRead
	case OpLogUStack, OpLogKStack:
		n |= NeedLog | NeedStackWalk
	case OpPushMrf, OpVfyR, OpVfyRW:
		n |= NeedMemRead
	case OpPopMrf:
		n |= NeedMemWrite
	case OpPushR:
		n |= NeedRegs
	case OpPopR:
		n |= NeedSetRegs
	case OpPushU, OpPopU:
		n |= NeedUserRegs
	case OpPushIV, OpPopIV:
		n |= NeedIV
	case OpPushTS:
		n |= NeedTime
	case OpPushPID, OpPushTID:
		n |= NeedIDs
	case OpPushProcID:
		n |= NeedProcID
	case OpPushTask:
		n |= NeedTask
	case OpPushField:
		n |= NeedField
	case OpPushArg:
		n |= NeedArg
	case OpEnable, OpDisable:
		n |= NeedSwitch
	case OpPushIO, OpPopIO:
		n |= NeedIO
	}
	switch op {
	case OpPushLVI, OpPopLVI, OpMoveLVI, OpIncLVI, OpDecLVI,
		OpPushLV, OpPopLV, OpMoveLV, OpIncLV, OpDecLV, OpLogLV:
		n |= NeedLV
	case OpPushGVI, OpPopGVI, OpMoveGVI, OpIncGVI, OpDecGVI,
		OpPushGV, OpPopGV, OpMoveGV, OpIncGV, OpDecGV, OpLogGV:
		n |= NeedGV
	}
	return n
}

// Lowering is the analysis of one verified probe that the code
// generators share. Instructions are numbered from the probe's first (0)
// to N-1: instruction i is Program.Insn(First+i). A Lowering belongs to
// its Program and must not be modified.
type Lowering struct {
	First, N int // the probe's instructions: Program.Insn(First) .. Insn(First+N-1)

	// Stack: the TOS index at each instruction when every path agrees
	// (Static), and the slots a hit may read before writing them.
	Stack StackLayout

	// Needs: what the probe's instructions use (the union of their
	// Opcode.Needs).
	Needs Needs

	// Live: a path from the entry reaches the instruction, following
	// jumps and calls.
	Live []bool

	// Ways: the ways into each instruction: one for the entry into
	// instruction 0, and one for each live instruction that falls or
	// jumps into it (a call's target not counted). An instruction with
	// two or more is where paths meet.
	Ways []int

	// BlockStart: the instruction starts a block: the entry, and of live
	// instructions each jump's or call's target and the instruction
	// after a call (where its ret comes back).
	BlockStart []bool

	// Cyclic: the jumps of the code reachable from the entry (calls not
	// followed) make a cycle.
	Cyclic bool

	// MostJumps: the most jumps (taken conditional jumps included) any
	// path takes, when neither Cyclic nor NeedCall; -1 otherwise.
	MostJumps int
}

// Lowering is probe pi's analysis, made once by Load.
func (p *Program) Lowering(pi int) *Lowering { return &p.lower[pi] }

// StaticStack is probe pi's stack analysis (Lowering(pi).Stack).
func (p *Program) StaticStack(pi int) StackLayout { return p.lower[pi].Stack }

// lowerAll makes the Lowering of every probe of a verified program.
func (p *Program) lowerAll() {
	p.lower = make([]Lowering, len(p.entry))
	for pi := range p.lower {
		p.lower[pi] = p.lowerProbe(pi)
	}
}

// lowerProbe analyses probe pi.
func (p *Program) lowerProbe(pi int) Lowering {
	first := int(p.entry[pi])
	n := int(p.end[pi]) - first
	l := Lowering{First: first, N: n, MostJumps: -1}
	at := func(i int) *insn { return &p.code[first+i] }
	for i := 0; i < n; i++ {
		l.Needs |= at(i).op.Needs()
	}
	l.Stack = p.staticStack(pi)

	// successors of instruction i; calls not followed
	succ := func(i int, s *[2]int) []int {
		in := at(i)
		k := 0
		if !in.op.ends() {
			s[k] = i + 1
			k++
		}
		if in.op.IsJump() && in.op != OpCall {
			s[k] = int(in.c) - first
			k++
		}
		return s[:k]
	}

	// a cycle in the jumps (depth first, iteratively: a long program
	// must not grow the goroutine's stack by one frame per instruction)
	color := make([]uint8, n)
	type frame struct{ i, next int }
	var buf [2]int
	stack := []frame{{0, 0}}
	color[0] = 1
	for len(stack) > 0 {
		f := &stack[len(stack)-1]
		s := succ(f.i, &buf)
		if f.next == len(s) {
			color[f.i] = 2
			stack = stack[:len(stack)-1]
			continue
		}
		j := s[f.next]
		f.next++
		switch color[j] {
		case 0:
			color[j] = 1
			stack = append(stack, frame{j, 0})
		case 1:
			l.Cyclic = true
		}
	}

	// live: following jumps and calls
	l.Live = make([]bool, n)
	l.Live[0] = true
	work := []int{0}
	for len(work) > 0 {
		i := work[len(work)-1]
		work = work[:len(work)-1]
		next := succ(i, &buf)
		if in := at(i); in.op == OpCall {
			next = append(next, int(in.c)-first)
		}
		for _, j := range next {
			if !l.Live[j] {
				l.Live[j] = true
				work = append(work, j)
			}
		}
	}

	l.Ways = make([]int, n)
	l.Ways[0] = 1
	l.BlockStart = make([]bool, n)
	l.BlockStart[0] = true
	for i := 0; i < n; i++ {
		if !l.Live[i] {
			continue
		}
		for _, j := range succ(i, &buf) {
			l.Ways[j]++
		}
		in := at(i)
		if in.op.IsJump() {
			l.BlockStart[int(in.c)-first] = true
		}
		if in.op == OpCall {
			l.BlockStart[i+1] = true
		}
	}

	if !l.Cyclic && l.Needs&NeedCall == 0 {
		// without a cycle, the most jumps of a path is known
		l.MostJumps = mostJumps(n, func(i int) (Opcode, int) { in := at(i); return in.op, int(in.c) - first })
	}
	return l
}

// mostJumps is the most jumps a path from instruction 0 takes in code
// without a cycle (memoised over the instructions a path reaches).
func mostJumps(n int, insn func(i int) (Opcode, int)) int {
	best := make([]int, n)
	done := make([]bool, n)
	// an explicit stack of instructions whose successors are pending
	work := []int{0}
	for len(work) > 0 {
		i := work[len(work)-1]
		if done[i] {
			work = work[:len(work)-1]
			continue
		}
		op, t := insn(i)
		pending := false
		if !op.ends() && !done[i+1] {
			work = append(work, i+1)
			pending = true
		}
		if op.IsJump() && !done[t] {
			work = append(work, t)
			pending = true
		}
		if pending {
			continue
		}
		b := 0
		if !op.ends() {
			b = best[i+1]
		}
		if op.IsJump() {
			b = max(b, 1+best[t])
		}
		best[i], done[i] = b, true
		work = work[:len(work)-1]
	}
	return best[0]
}
