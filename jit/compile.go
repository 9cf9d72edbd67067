package jit

import (
	"fmt"
	"math/bits"
	"unsafe"

	"github.com/gprobes/gprobes/rpn"
)

// The compiled code, for one probe (Compile):
//
//	prologue   the probe's switch (Layout.Switch: off returns at once,
//	           nothing counted), Hits, Disabled, pass count, Runs, max
//	           hits (the off, skip and over-max exits are out of line)
//	init       major/minor and truncated into the header, log length 0,
//	           the jump budget, the call depth, the stack slots that need it
//	           zeroed
//	body       one template per RPN instruction, in program order, each
//	           bound to a label (the jump targets)
//	stubs      out of line: exception exits (one per instruction and
//	           exception), fault handlers (Code.Fixups), slow paths (log
//	           with truncation, idiv by -1)
//	helpers    append (one word, byte by byte, truncating), the common
//	           exception exit
//
// Register allocation. rbp (the register frame) and rbx (the scratch
// area) are the pad's, read only. The compiled code owns:
//
//	r8   Layout.LV, when the program uses lv
//	r9   Layout.GV, when the program uses gv
//	r12  RPN call depth (only when the program has call): the native stack
//	     holds one return address per RPN call, and every exit does
//	     lea (%rsp,%r12,8),%rsp before its ret
//	r13  the TOS index, 0..31 (only in dynamic-stack mode, below)
//	r14  the log length in bytes (0..logmax)
//	r15  the jumps left before max-jumps (jmpmax - taken jumps), when the
//	     program has jumps
//	rax rcx rdx rsi rdi  temporaries within one template (the syscall of
//	     push pid/tid/procid and fs_base clobbers rcx and r11; nothing is
//	     kept in them across templates)
//	r10 r11  stack indices of entries below the TOS (dynamic mode)
//
// The RPN stack is 32 8-byte slots in the scratch area at StackOffset.
// Static-stack mode: when the program has no call and every instruction
// is reached with one TOS index whatever the path (rpn's lowering,
// Lowering.Stack), the compiler knows which slot each access is and addresses it
// as [rbx+disp32]; no register holds the TOS. It also knows which slots
// can be read before the program wrote them and zeroes only those at each
// hit (as the machine does: a hit starts with a zeroed stack). Otherwise
// dynamic-stack mode: r13 is the TOS index, entry k below the TOS is
// [rbx + ((r13-k)&31)*8 + StackOffset], and all 32 slots are zeroed at
// each hit.
//
// Words: a 32-bit module (i386) keeps the machine's exact rules, which
// mask some results to 32 bits and not others (and, or, xor, shr, div and
// push lv/gv do not mask; a variable may hold a wider value that gprobes
// wrote): 32-bit operations where the machine masks, 64-bit ones where it
// does not. inc/dec lv/gv of a 32-bit module is a lock cmpxchg loop, the
// only way to be atomic and mask.
//
// Stack use below rsp: at most 8 bytes per RPN call level (MaxCallDepth),
// plus 8 for a call of the append helper and 8 for the fs_base/gs_base
// system call's result: 272 bytes, within StackUse.
//
// Counters and concurrency. Hits and Runs are counted with lock xadd, so
// each thread gets its own hit and run number. A hit whose number is at
// or below the pass count, or that finds Disabled set, counts Skipped and
// returns ResultNone. The run that gets number MaxHits sets Disabled (as
// the machine does). A run numbered above MaxHits can only be a thread
// that passed the Disabled check before the MaxHits-th run set it: it
// undoes its Runs increment (lock dec), counts Skipped and does not run,
// so at most MaxHits runs ever execute and Hits = Skipped + Runs once the
// threads are out. rem sets Disabled after the program (a plain store).
// Faults is incremented with lock inc by every exception exit.
//
// Memory. push mrf, pop mrf, log str, log mrf, vfy_r and vfy_rw are plain
// loads and stores; each listed in Code.Fixups with its handler:
//
//	push mrf, pop mrf  load/store of 1, 2, 4, 8 bytes at rsi; handler:
//	                   invalid-address at rsi
//	log mrf            rep movsb (cld first: the thread's DF is not ours),
//	                   rdx = the address; handler: invalid-address at rdx
//	log str            one byte at a time, movzbl (%rsi) with rsi the next
//	                   address; handler: invalid-address at rsi, the first
//	                   unreadable byte, as the machine reports it. Once the
//	                   log is full with bytes left, one more byte is read
//	                   to see whether the string ended there (its handler:
//	                   truncated, as the machine does when that read fails)
//	vfy_r              movzbl (%rsi); handler: the result is 1
//	vfy_rw             lock orb $0,(%rsi): a write access that changes
//	                   nothing (on a private page it breaks copy-on-write
//	                   sharing of that page, as any write would); handler:
//	                   the result is 1
//
// A handler expects every register as the faulting instruction found it
// (x86 faults are precise; rep movsb may have advanced rsi/rdi/rcx, which
// its handler does not use).

// Counters and Clock field offsets.
var (
	offHits     = int32(unsafe.Offsetof(Counters{}.Hits))
	offSkipped  = int32(unsafe.Offsetof(Counters{}.Skipped))
	offRuns     = int32(unsafe.Offsetof(Counters{}.Runs))
	offFaults   = int32(unsafe.Offsetof(Counters{}.Faults))
	offDisabled = int32(unsafe.Offsetof(Counters{}.Disabled))
	offTSC0     = int32(unsafe.Offsetof(Clock{}.TSC0))
	offNS0      = int32(unsafe.Offsetof(Clock{}.NS0))
	offMult     = int32(unsafe.Offsetof(Clock{}.Mult))
	offShift    = int32(unsafe.Offsetof(Clock{}.Shift))
)

// Linux x86-64 system calls.
const (
	sysGetpid       = 39
	sysGettid       = 186
	sysArchPrctl    = 158
	sysClockGettime = 228
	archGetFS       = 0x1003
	archGetGS       = 0x1004
)

// threadHash is the multiplier of the thread table (Layout.Threads).
const threadHash = 0x9e3779b1

type exKey struct {
	ex rpn.Exception
	i  int
}

type fixupRef struct {
	at      int
	handler label
}

type compiler struct {
	p      *rpn.Program
	mod    *rpn.Module
	pr     *rpn.Probe
	l      Layout
	a      asm
	pi     int // the probe
	first  int // instruction index of the probe's entry
	n      int // instructions in the probe
	is32   bool
	w      int   // word size in bytes
	logmax int32 // bytes
	so     int32 // StackOffset

	static   bool
	reach    []bool
	depth    []int // TOS index at each instruction (static mode)
	needZero uint32
	d        int // the TOS index at the instruction being compiled (static mode)

	hasCalls, hasJumps, usesLV, usesGV bool

	labels       []label // one per instruction
	stubs        []func()
	fixups       []fixupRef
	tscSites     []fixupRef // rdtsc, and the system-call read instead
	exStubs      map[exKey]label
	exCommon     label // exception exit, Addr 0; ecx PC, edx exception
	exAddrCommon label // exception exit, Addr already stored
	appendL      label // the append helper, if used
	appendUsed   bool
}

// Compile compiles probe pi of p for a jump pad with the shared state at
// l. It returns an *Unsupported error for a program the pad cannot run.
func Compile(p *rpn.Program, pi int, l Layout) (*Code, error) {
	if pi < 0 || pi >= p.NumProbes() {
		return nil, fmt.Errorf("jit: no probe %d (the program has %d)", pi, p.NumProbes())
	}
	mod := p.Module()
	lw := p.Lowering(pi)
	c := &compiler{
		p:       p,
		mod:     mod,
		pr:      &mod.Probes[pi],
		l:       l,
		pi:      pi,
		first:   lw.First,
		n:       lw.N,
		is32:    p.WordSize() == 4,
		w:       p.WordSize(),
		logmax:  int32(mod.LogMax),
		so:      int32(StackOffset(int(mod.LogMax))),
		exStubs: map[exKey]label{},
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	c.analyze()
	c.exCommon = c.a.newLabel()
	c.exAddrCommon = c.a.newLabel()
	c.appendL = c.a.newLabel()
	c.labels = make([]label, c.n)
	for i := range c.labels {
		c.labels[i] = c.a.newLabel()
	}
	c.prologue()
	for i := 0; i < c.n; i++ {
		if c.static {
			if !c.reach[i] {
				continue
			}
			c.d = c.depth[i]
		}
		c.a.bind(c.labels[i])
		c.insn(i)
	}
	for len(c.stubs) > 0 {
		f := c.stubs[0]
		c.stubs = c.stubs[1:]
		f()
	}
	if c.appendUsed {
		c.appendHelper()
	}
	c.exceptionExit()
	if err := c.a.finish(); err != nil {
		return nil, err
	}
	code := &Code{Bytes: c.a.b}
	for _, f := range c.fixups {
		code.Fixups = append(code.Fixups, Fixup{At: uint32(f.at), Handler: uint32(c.a.labels[f.handler])})
	}
	for _, f := range c.tscSites {
		code.TSC = append(code.TSC, Fixup{At: uint32(f.at), Handler: uint32(c.a.labels[f.handler])})
	}
	return code, nil
}

// check refuses what the pad cannot run.
func (c *compiler) check() error {
	for i := 0; i < c.n; i++ {
		in := c.p.Insn(c.first + i)
		switch in.Op {
		case rpn.OpExit:
			if in.A == rpn.ExitDump || in.A == rpn.ExitDebugger {
				return &Unsupported{Reason: fmt.Sprintf("exit %d: needs the tracer", in.A)}
			}
		case rpn.OpPopU:
			return &Unsupported{Reason: "pop u"}
		case rpn.OpEnable, rpn.OpDisable:
			// a store to the minor's switch byte (Layout.Switch)
			if c.l.Switch == 0 {
				return &Unsupported{Reason: fmt.Sprintf("%s: no switches in this layout", in.Op)}
			}
		case rpn.OpPushIV, rpn.OpPopIV:
			// a call's instance variables live in the engine, with the
			// return probe that reads them (engine/retprobe.go)
			return &Unsupported{Reason: "push iv/pop iv: instance variables are the int3 route's"}
		case rpn.OpLogUStack, rpn.OpLogKStack:
			// unwinding needs the modules' CFI and the tracer's reads of
			// the stack: the int3 route's (docs/engine.md, "Stacks")
			return &Unsupported{Reason: fmt.Sprintf("%s: stacks are unwound on the int3 route", in.Op)}
		case rpn.OpPushField:
			// only tracepoint probes have one, and they run on the
			// kernel target (package bpf), never in a process's pad
			return &Unsupported{Reason: "push field: tracepoint probes run on --target kernel only"}
		case rpn.OpPushArg:
			// only usdt probes have one: a pad does not read a
			// site's arguments yet, the int3 route does (engine/usdt.go)
			return &Unsupported{Reason: "push arg: a usdt probe's arguments are read on the int3 route, not in a jump pad yet"}
		case rpn.OpPopR:
			switch r := rpn.Reg(in.B); r.Canonical() {
			case rpn.RegRIP, rpn.RegRSP, rpn.RegFSBase, rpn.RegGSBase:
				return &Unsupported{Reason: fmt.Sprintf("pop r %s: the pad does not restore it", r)}
			}
		}
	}
	return nil
}

// analyze reads what the program uses and decides between static- and
// dynamic-stack mode (see the top of this file) from rpn's lowering,
// which the machine and package bpf read too.
func (c *compiler) analyze() {
	lw := c.p.Lowering(c.pi)
	c.hasCalls = lw.Needs.Has(rpn.NeedCall) // ret without call: r12 = 0 makes it raise call-depth
	c.hasJumps = lw.Needs.Has(rpn.NeedJump)
	c.usesLV = lw.Needs.Has(rpn.NeedLV)
	c.usesGV = lw.Needs.Has(rpn.NeedGV)
	l := lw.Stack
	c.needZero = l.NeedZero
	if !l.Static {
		return
	}
	c.static = true
	c.reach, c.depth = l.Reach, l.Depth
}

// later queues out-of-line code and returns its label; the code is
// emitted after the body, with the TOS index of now.
func (c *compiler) later(f func()) label {
	l := c.a.newLabel()
	d := c.d
	c.stubs = append(c.stubs, func() {
		c.d = d
		c.a.bind(l)
		f()
	})
	return l
}

// raise returns the label of an exit raising ex at instruction i.
func (c *compiler) raise(ex rpn.Exception, i int) label {
	k := exKey{ex, i}
	if l, ok := c.exStubs[k]; ok {
		return l
	}
	pc := c.p.PC(c.first + i)
	l := c.later(func() {
		c.a.movImm(rcx, uint64(pc))
		c.a.movImm(rdx, uint64(ex))
		c.a.jmp(c.exCommon)
	})
	c.exStubs[k] = l
	return l
}

// raiseAddr returns the label of a fault handler raising invalid-address
// at instruction i with the address in r.
func (c *compiler) raiseAddr(i int, r reg) label {
	pc := c.p.PC(c.first + i)
	return c.later(func() {
		c.a.store(true, at(rbx, OffAddr), r)
		c.a.movImm(rcx, uint64(pc))
		c.a.movImm(rdx, uint64(rpn.ExInvalidAddress))
		c.a.jmp(c.exAddrCommon)
	})
}

// access emits a memory-access instruction with its fault handler.
func (c *compiler) access(handler label, emit func()) {
	at := c.a.pos()
	emit()
	c.fixups = append(c.fixups, fixupRef{at, handler})
}

// slot is the operand of the stack entry k below the TOS (0: the TOS).
// In dynamic mode an entry below the TOS needs its index computed into
// idx first, which slot emits.
func (c *compiler) slot(k int, idx reg) mem {
	if c.static {
		return at(rbx, c.so+int32(((c.d-k)&31)*8))
	}
	if k == 0 {
		return atIdx(rbx, r13, 8, c.so)
	}
	c.a.lea(false, idx, at(r13, int32(-k)))
	c.a.aluRI(aluAnd, false, idx, 31)
	return atIdx(rbx, idx, 8, c.so)
}

// adjust moves the TOS index by delta.
func (c *compiler) adjust(delta int) {
	if c.static {
		c.d = (c.d + delta) & 31
		return
	}
	if delta&31 != 0 {
		c.a.aluRI(aluAdd, false, r13, int32(delta))
		c.a.aluRI(aluAnd, false, r13, 31)
	}
}

// push pushes register r.
func (c *compiler) push(r reg) {
	c.adjust(1)
	c.a.store(true, c.slot(0, noReg), r)
}

// maskW masks r to the word width.
func (c *compiler) maskW(r reg) {
	if c.is32 {
		c.a.movRR(false, r, r)
	}
}

// cmpImm compares r with an unsigned 64-bit constant (rcx may be used).
func (c *compiler) cmpImm(r reg, v uint64) {
	if v < 1<<31 {
		c.a.aluRI(aluCmp, true, r, int32(v))
		return
	}
	c.a.movImm(rcx, v)
	c.a.aluRR(aluCmp, true, r, rcx)
}

// epilogue returns eax to the pad, dropping the return addresses of RPN
// calls still on the native stack.
func (c *compiler) epilogue() {
	if c.hasCalls {
		c.a.lea(true, rsp, atIdx(rsp, r12, 8, 0))
	}
	c.a.ret()
}

func (c *compiler) prologue() {
	a := &c.a
	pr := c.pr
	if c.l.Switch != 0 {
		// switched off: no hit at all, nothing counted
		a.movAbs(rax, c.l.Switch+uint64(pr.Minor))
		a.movzx8(rax, at(rax, 0))
		a.testRR(false, rax, rax)
		off := c.later(func() {
			a.aluRR(aluXor, false, rax, rax)
			a.ret()
		})
		a.jcc(condNE, off)
	}
	a.movAbs(rdi, c.l.Probe)
	a.movImm(rax, 1)
	a.lockXadd(true, at(rdi, offHits), rax)
	a.aluMI(aluCmp, true, at(rdi, offDisabled), 0)
	skip := c.later(func() {
		// rdi is still Layout.Probe: reached from the prologue only
		a.lockIncM(true, at(rdi, offSkipped))
		a.aluRR(aluXor, false, rax, rax)
		a.ret()
	})
	a.jcc(condNE, skip)
	if pr.PassCount > 0 {
		a.incR(true, rax) // this hit's number
		c.cmpImm(rax, pr.PassCount)
		a.jcc(condBE, skip)
	}
	a.movImm(rax, 1)
	a.lockXadd(true, at(rdi, offRuns), rax)
	if pr.MaxHits > 0 {
		a.incR(true, rax) // this run's number
		c.cmpImm(rax, pr.MaxHits)
		run := a.newLabel()
		a.jcc(condB, run)
		over := c.later(func() {
			// another thread made run MaxHits meanwhile: not a run
			a.lockDecM(true, at(rdi, offRuns))
			a.jmp(skip)
		})
		a.jcc(condA, over)
		a.storeImm(true, at(rdi, offDisabled), 1)
		a.bind(run)
	}

	// init
	a.storeImm(false, at(rbx, OffMajor), int32(uint32(c.mod.Major)|uint32(pr.Minor)<<16))
	a.store8Imm(at(rbx, OffTruncated), 0)
	// the header is on the thread's stack: what an earlier hit left there
	// (an exception) must not reach this hit's record
	a.store8Imm(at(rbx, OffException), 0)
	a.aluRR(aluXor, false, r14, r14)
	if c.hasJumps {
		a.movImm(r15, uint64(c.mod.JmpMax))
	}
	if c.hasCalls {
		a.aluRR(aluXor, false, r12, r12)
	}
	if !c.static {
		a.aluRR(aluXor, false, r13, r13)
	}
	if c.usesLV {
		a.movAbs(r8, c.l.LV)
	}
	if c.usesGV {
		a.movAbs(r9, c.l.GV)
	}
	if c.needZero != 0 {
		a.aluRR(aluXor, false, rax, rax)
		for s := range 32 {
			if c.needZero&(1<<s) != 0 {
				a.store(true, at(rbx, c.so+int32(s*8)), rax)
			}
		}
	}
}

// countJump charges one taken jump: max-jumps when none is left.
func (c *compiler) countJump(i int) {
	c.a.aluRI(aluSub, false, r15, 1)
	c.a.jcc(condB, c.raise(rpn.ExMaxJumps, i))
}

// commit ends the program with a record: exit facility, log length.
func (c *compiler) commit(exit uint8) {
	c.a.store8Imm(at(rbx, OffExit), exit)
	c.a.store(false, at(rbx, OffLogLen), r14)
	c.a.movImm(rax, ResultCommit)
	c.epilogue()
}

func (c *compiler) insn(i int) {
	a := &c.a
	in := c.p.Insn(c.first + i)
	w64 := !c.is32 // operand size of the operations the machine masks
	switch in.Op {
	case rpn.OpNop:

	case rpn.OpJmp:
		c.countJump(i)
		a.jmp(c.labels[int(in.C)-c.first])
	case rpn.OpJz, rpn.OpJnz, rpn.OpJlt, rpn.OpJle, rpn.OpJgt, rpn.OpJge:
		cc := map[rpn.Opcode]cond{rpn.OpJz: condE, rpn.OpJnz: condNE, rpn.OpJlt: condL,
			rpn.OpJle: condLE, rpn.OpJgt: condG, rpn.OpJge: condGE}[in.Op]
		a.aluMI(aluCmp, w64, c.slot(0, noReg), 0)
		skip := a.newLabel()
		a.jcc(cc.not(), skip)
		c.countJump(i)
		a.jmp(c.labels[int(in.C)-c.first])
		a.bind(skip)
	case rpn.OpLoop:
		s := c.slot(0, noReg)
		if c.is32 {
			a.load(false, rax, s)
			a.aluRI(aluSub, false, rax, 1)
			a.store(true, s, rax) // mov keeps the flags of the sub
		} else {
			a.aluMI(aluSub, true, s, 1)
		}
		skip := a.newLabel()
		a.jcc(condE, skip)
		c.countJump(i)
		a.jmp(c.labels[int(in.C)-c.first])
		a.bind(skip)
	case rpn.OpCall:
		a.aluRI(aluCmp, false, r12, rpn.MaxCallDepth)
		a.jcc(condAE, c.raise(rpn.ExCallDepth, i))
		c.countJump(i)
		a.incR(false, r12)
		a.call(c.labels[int(in.C)-c.first])
	case rpn.OpRet:
		a.testRR(false, r12, r12)
		a.jcc(condE, c.raise(rpn.ExCallDepth, i))
		a.decR(false, r12)
		a.ret()

	case rpn.OpExit:
		if in.A == rpn.ExitNone {
			a.aluRR(aluXor, false, rax, rax)
			c.epilogue()
		} else {
			c.commit(in.A)
		}
	case rpn.OpAbort:
		a.aluRR(aluXor, false, rax, rax)
		c.epilogue()
	case rpn.OpEnable, rpn.OpDisable:
		// a plain byte store: every later hit, on any thread, loads it
		// in its prologue (x86 keeps stores in order)
		a.movAbs(rax, c.l.Switch+uint64(in.B))
		v := uint8(0)
		if in.Op == rpn.OpDisable {
			v = 1
		}
		a.store8Imm(at(rax, 0), v)
	case rpn.OpRem:
		a.movAbs(rax, c.l.Probe)
		a.storeImm(true, at(rax, offDisabled), 1)
		c.commit(rpn.ExitLog)

	case rpn.OpLogN:
		c.logN(int(in.A))
	case rpn.OpLogStr:
		c.logStr(i)
	case rpn.OpLogMrf:
		c.logMrf(i)
	case rpn.OpLogLV:
		c.logVars(r8, int(in.B), int(in.C))
	case rpn.OpLogGV:
		c.logVars(r9, int(in.B), int(in.C))
	case rpn.OpSetMajI:
		a.store16Imm(at(rbx, OffMajor), in.B)
	case rpn.OpSetMinI:
		a.store16Imm(at(rbx, OffMinor), in.B)
	case rpn.OpSetMaj, rpn.OpSetMin:
		a.load(true, rax, c.slot(0, noReg))
		c.adjust(-1)
		a.aluRI(aluCmp, true, rax, 0xffff)
		a.jcc(condA, c.raise(rpn.ExInvalidOperand, i))
		off := int32(OffMajor)
		if in.Op == rpn.OpSetMin {
			off = OffMinor
		}
		a.store16(at(rbx, off), rax)
	case rpn.OpPushLP:
		c.push(r14)
	case rpn.OpPopLP:
		a.load(true, rax, c.slot(0, noReg))
		c.adjust(-1)
		a.aluRR(aluCmp, true, rax, r14)
		a.jcc(condA, c.raise(rpn.ExInvalidOperand, i))
		a.movRR(false, r14, rax)

	case rpn.OpPushLVI, rpn.OpPushGVI:
		a.load(true, rax, at(c.varBase(in.Op), int32(in.B)*8))
		c.push(rax)
	case rpn.OpPopLVI, rpn.OpPopGVI:
		a.load(true, rax, c.slot(0, noReg))
		a.store(true, at(c.varBase(in.Op), int32(in.B)*8), rax)
		c.adjust(-1)
	case rpn.OpMoveLVI, rpn.OpMoveGVI:
		a.load(true, rax, c.slot(0, noReg))
		a.store(true, at(c.varBase(in.Op), int32(in.B)*8), rax)
	case rpn.OpIncLVI, rpn.OpIncGVI:
		c.incVar(at(c.varBase(in.Op), int32(in.B)*8), 1)
	case rpn.OpDecLVI, rpn.OpDecGVI:
		c.incVar(at(c.varBase(in.Op), int32(in.B)*8), -1)
	case rpn.OpPushLV, rpn.OpPopLV, rpn.OpMoveLV, rpn.OpIncLV, rpn.OpDecLV,
		rpn.OpPushGV, rpn.OpPopGV, rpn.OpMoveGV, rpn.OpIncGV, rpn.OpDecGV:
		c.indexedVar(i, in.Op)

	case rpn.OpAdd, rpn.OpSub:
		op := aluAdd
		if in.Op == rpn.OpSub {
			op = aluSub
		}
		s1 := c.slot(1, r10)
		if c.is32 {
			a.load(false, rax, s1)
			a.aluRM(op, false, rax, c.slot(0, noReg))
			a.store(true, s1, rax)
		} else {
			a.load(true, rax, c.slot(0, noReg))
			a.aluMR(op, true, s1, rax)
		}
		c.adjust(-1)
	case rpn.OpMul:
		s1 := c.slot(1, r10)
		a.load(w64, rax, s1)
		a.imulRM(w64, rax, c.slot(0, noReg))
		a.store(true, s1, rax)
		c.adjust(-1)
	case rpn.OpAnd, rpn.OpOr, rpn.OpXor:
		op := map[rpn.Opcode]aluOp{rpn.OpAnd: aluAnd, rpn.OpOr: aluOr, rpn.OpXor: aluXor}[in.Op]
		s1 := c.slot(1, r10)
		a.load(true, rax, c.slot(0, noReg))
		a.aluMR(op, true, s1, rax) // never masked, as the machine
		c.adjust(-1)
	case rpn.OpDiv:
		s0, s1 := c.slot(0, noReg), c.slot(1, r10)
		a.load(true, rcx, s0)
		a.testRR(true, rcx, rcx)
		a.jcc(condE, c.raise(rpn.ExDivideByZero, i))
		a.load(true, rax, s1)
		a.aluRR(aluXor, false, rdx, rdx)
		a.unaryR(unDiv, true, rcx)
		a.store(true, s1, rdx)
		a.store(true, s0, rax)
	case rpn.OpIDiv:
		c.idiv(i)
	case rpn.OpNot, rpn.OpNeg:
		op := unNot
		if in.Op == rpn.OpNeg {
			op = unNeg
		}
		s := c.slot(0, noReg)
		if c.is32 {
			a.load(false, rax, s)
			a.unaryR(op, false, rax)
			a.store(true, s, rax)
		} else {
			a.unaryM(op, true, s)
		}
	case rpn.OpShlI, rpn.OpShrI, rpn.OpSarI, rpn.OpRolI, rpn.OpRorI:
		op := [...]shiftOp{shShl, shShr, shSar, shRol, shRor}[in.Op-rpn.OpShlI]
		s := c.slot(0, noReg)
		if c.is32 && op != shShr { // shr is never masked: x>>n of the whole word
			a.load(false, rax, s)
			a.shiftRI(op, false, rax, in.A)
			a.store(true, s, rax)
		} else {
			a.shiftMI(op, true, s, in.A)
		}
	case rpn.OpShl, rpn.OpShr, rpn.OpSar, rpn.OpRol, rpn.OpRor:
		c.shift(in.Op)

	case rpn.OpVfyR, rpn.OpVfyRW:
		s := c.slot(0, noReg)
		a.load(true, rsi, s)
		join := a.newLabel()
		handler := c.later(func() {
			a.storeImm(true, s, 1)
			a.jmp(join)
		})
		c.access(handler, func() {
			if in.Op == rpn.OpVfyR {
				a.movzx8(rax, at(rsi, 0))
			} else {
				a.lockOr8MI(at(rsi, 0), 0)
			}
		})
		a.storeImm(true, s, 0)
		a.bind(join)

	case rpn.OpPop:
		c.adjust(-1)
	case rpn.OpDup:
		a.load(true, rax, c.slot(0, noReg))
		c.push(rax)
	case rpn.OpXchg:
		s0, s1 := c.slot(0, noReg), c.slot(1, r10)
		a.load(true, rax, s0)
		a.load(true, rcx, s1)
		a.store(true, s0, rcx)
		a.store(true, s1, rax)
	case rpn.OpRos:
		c.adjust(-int(in.A))

	case rpn.OpPushR, rpn.OpPushU:
		// push u in a process: the user-mode registers are the thread's own
		c.pushReg(i, rpn.Reg(in.B))
	case rpn.OpPopR:
		r := rpn.Reg(in.B)
		a.load(true, rax, c.slot(0, noReg))
		c.adjust(-1)
		if r.Is32() {
			a.movRR(false, rax, rax)
		}
		a.store(true, at(rbp, int32(r.Canonical())*8), rax)

	case rpn.OpPushD:
		c.adjust(1)
		if fits32(int64(in.Imm)) {
			a.storeImm(true, c.slot(0, noReg), int32(int64(in.Imm)))
		} else {
			a.movImm(rax, in.Imm)
			a.store(true, c.slot(0, noReg), rax)
		}
	case rpn.OpPushMrf:
		s := c.slot(0, noReg)
		a.load(true, rsi, s)
		c.access(c.raiseAddr(i, rsi), func() {
			switch in.A {
			case 1:
				a.movzx8(rax, at(rsi, 0))
			case 2:
				a.movzx16(rax, at(rsi, 0))
			case 4:
				a.load(false, rax, at(rsi, 0))
			default:
				a.load(true, rax, at(rsi, 0))
			}
		})
		a.store(true, s, rax) // not masked, as the machine
	case rpn.OpPopMrf:
		a.load(true, rax, c.slot(0, noReg))
		a.load(true, rsi, c.slot(1, r10))
		c.adjust(-2)
		c.access(c.raiseAddr(i, rsi), func() {
			switch in.A {
			case 1:
				a.store8(at(rsi, 0), rax)
			case 2:
				a.store16(at(rsi, 0), rax)
			case 4:
				a.store(false, at(rsi, 0), rax)
			default:
				a.store(true, at(rsi, 0), rax)
			}
		})

	case rpn.OpPushPID:
		if c.l.PidNS {
			c.threadEntry(i, 12)
		} else {
			c.sysID(OffPid, sysGetpid)
		}
		c.push(rax)
	case rpn.OpPushTID:
		if c.l.PidNS {
			c.threadEntry(i, 8)
		} else {
			c.sysID(OffTid, sysGettid)
		}
		c.push(rax)
	case rpn.OpPushProcID:
		c.procID(i)
	case rpn.OpPushTS:
		c.timestamp()
	case rpn.OpPushTask, rpn.OpPushIO, rpn.OpPopIO:
		// a process has no task structure and no IO space: the machine's
		// process environment answers false
		a.jmp(c.raise(rpn.ExInvalidOperand, i))

	default:
		// OpPopU, OpPushField, OpPushIV, OpPopIV, exit 3/4 and pop r of
		// rip/rsp were refused by check; nothing else exists
		panic(fmt.Sprintf("jit: %v not handled", in.Op))
	}
}

func (c *compiler) varBase(op rpn.Opcode) reg {
	switch op {
	case rpn.OpPushGVI, rpn.OpPopGVI, rpn.OpMoveGVI, rpn.OpIncGVI, rpn.OpDecGVI,
		rpn.OpPushGV, rpn.OpPopGV, rpn.OpMoveGV, rpn.OpIncGV, rpn.OpDecGV:
		return r9
	}
	return r8
}

// incVar adds 1 or -1 to a variable, atomically, masked to the word.
func (c *compiler) incVar(m mem, by int32) {
	a := &c.a
	if !c.is32 {
		if by > 0 {
			a.lockIncM(true, m)
		} else {
			a.lockDecM(true, m)
		}
		return
	}
	// (v+by) & 0xffffffff in one atomic step
	a.load(true, rax, m)
	retry := a.newLabel()
	a.bind(retry)
	a.lea(false, rcx, at(rax, by))
	a.lockCmpxchg(true, m, rcx)
	a.jcc(condNE, retry)
}

// indexedVar is push/pop/move/inc/dec lv and gv with the index on the stack.
func (c *compiler) indexedVar(i int, op rpn.Opcode) {
	a := &c.a
	base := c.varBase(op)
	n := c.mod.Vars
	if base == r9 {
		n = c.mod.GVars
		op -= rpn.OpPushGV - rpn.OpPushLV
	}
	check := func(r reg) {
		a.aluRI(aluCmp, true, r, int32(n))
		a.jcc(condAE, c.raise(rpn.ExInvalidOperand, i))
	}
	switch op {
	case rpn.OpPushLV: // i PUSH LV lv[i]
		s := c.slot(0, noReg)
		a.load(true, rsi, s)
		check(rsi)
		a.load(true, rax, atIdx(base, rsi, 8, 0))
		a.store(true, s, rax)
	case rpn.OpPopLV: // i x POP LV
		a.load(true, rsi, c.slot(1, r10))
		check(rsi)
		a.load(true, rax, c.slot(0, noReg))
		a.store(true, atIdx(base, rsi, 8, 0), rax)
		c.adjust(-2)
	case rpn.OpMoveLV: // x i MOVE LV x
		a.load(true, rsi, c.slot(0, noReg))
		check(rsi)
		c.adjust(-1)
		a.load(true, rax, c.slot(0, noReg))
		a.store(true, atIdx(base, rsi, 8, 0), rax)
	case rpn.OpIncLV, rpn.OpDecLV: // i INC LV
		a.load(true, rsi, c.slot(0, noReg))
		check(rsi)
		c.adjust(-1)
		by := int32(1)
		if op == rpn.OpDecLV {
			by = -1
		}
		c.incVar(atIdx(base, rsi, 8, 0), by)
	}
}

// idiv: y x IDIV y%x y/x, signed at the word width; MinInt64 / -1 is
// MinInt64 remainder 0, as Go defines it (x86 would trap).
func (c *compiler) idiv(i int) {
	a := &c.a
	s0, s1 := c.slot(0, noReg), c.slot(1, r10)
	if c.is32 {
		a.movsxd(rcx, s0)
		a.testRR(true, rcx, rcx)
		a.jcc(condE, c.raise(rpn.ExDivideByZero, i))
		a.movsxd(rax, s1)
		a.cqo()
		a.unaryR(unIDiv, true, rcx) // 32-bit operands in 64 bits: no overflow
		a.movRR(false, rax, rax)
		a.movRR(false, rdx, rdx)
		a.store(true, s1, rdx)
		a.store(true, s0, rax)
		return
	}
	a.load(true, rcx, s0)
	a.testRR(true, rcx, rcx)
	a.jcc(condE, c.raise(rpn.ExDivideByZero, i))
	a.load(true, rax, s1)
	join := a.newLabel()
	minus1 := c.later(func() {
		a.unaryR(unNeg, true, rax)
		a.store(true, s0, rax)
		a.storeImm(true, s1, 0)
		a.jmp(join)
	})
	a.aluRI(aluCmp, true, rcx, -1)
	a.jcc(condE, minus1)
	a.cqo()
	a.unaryR(unIDiv, true, rcx)
	a.store(true, s1, rdx)
	a.store(true, s0, rax)
	a.bind(join)
}

// shift: y n SHL/SHR/SAR/ROL/ROR. Counts at or beyond the width give 0
// for shl and shr and the sign for sar; rotations count modulo the width
// (which is what the hardware does with cl).
func (c *compiler) shift(op rpn.Opcode) {
	a := &c.a
	w64 := !c.is32
	width := int32(c.w * 8)
	s1 := c.slot(1, r10)
	a.load(true, rcx, c.slot(0, noReg))
	switch op {
	case rpn.OpShl, rpn.OpShr:
		sh, w := shShl, w64
		if op == rpn.OpShr {
			sh, w = shShr, true // shr is never masked: x>>n of the whole word
		}
		a.load(w, rax, s1)
		a.shiftRCL(sh, w, rax)
		a.aluRR(aluXor, false, rdx, rdx)
		a.aluRI(aluCmp, true, rcx, width)
		a.cmov(condAE, true, rax, rdx)
	case rpn.OpSar:
		a.load(w64, rax, s1)
		a.movImm(rdx, uint64(width-1))
		a.aluRI(aluCmp, true, rcx, width)
		a.cmov(condAE, false, rcx, rdx)
		a.shiftRCL(shSar, w64, rax)
	case rpn.OpRol:
		a.load(w64, rax, s1)
		a.shiftRCL(shRol, w64, rax)
	case rpn.OpRor:
		a.load(w64, rax, s1)
		a.shiftRCL(shRor, w64, rax)
	}
	a.store(true, s1, rax)
	c.adjust(-1)
}

// pushReg: push r,REG. The frame holds rax ... rflags; segment registers
// are read from the thread (the pad does not change them); fs_base and
// gs_base with rdfsbase/rdgsbase or arch_prctl; control registers do not
// exist in a process.
func (c *compiler) pushReg(i int, r rpn.Reg) {
	a := &c.a
	switch cr := r.Canonical(); {
	case cr <= rpn.RegRFLAGS:
		a.load(true, rax, at(rbp, int32(cr)*8))
		if r.Is32() {
			a.movRR(false, rax, rax)
		}
		c.maskW(rax)
	case cr >= rpn.RegCS && cr <= rpn.RegGS:
		s := [...]sreg{sCS, sSS, sDS, sES, sFS, sGS}[cr-rpn.RegCS]
		a.movFromSreg(rax, s)
		a.movzx16R(rax, rax)
	case cr == rpn.RegFSBase || cr == rpn.RegGSBase:
		fs := cr == rpn.RegFSBase
		if c.l.FSGSBase {
			if fs {
				a.rdfsbase(rax)
			} else {
				a.rdgsbase(rax)
			}
		} else {
			// arch_prctl(ARCH_GET_FS/GS, &v), v on the stack (below rsp
			// only with rsp moved: a signal could land there)
			code := uint64(archGetFS)
			if !fs {
				code = archGetGS
			}
			a.push(rax)
			a.movImm(rdi, code)
			a.movRR(true, rsi, rsp)
			a.movImm(rax, sysArchPrctl)
			a.syscall()
			a.pop(rcx)
			a.testRR(false, rax, rax)
			a.jcc(condNE, c.raise(rpn.ExInvalidOperand, i))
			a.movRR(true, rax, rcx)
		}
		c.maskW(rax)
	default: // cr0 ... cr4
		a.jmp(c.raise(rpn.ExInvalidOperand, i))
		return
	}
	c.push(rax)
}

// sysID leaves in rax the pid or tid cached in the header at off,
// fetching it with the system call nr the first time in a hit.
func (c *compiler) sysID(off int32, nr uint64) {
	a := &c.a
	a.load(true, rax, at(rbx, off))
	a.testRR(true, rax, rax)
	have := a.newLabel()
	a.jcc(condNE, have)
	a.movImm(rax, nr)
	a.syscall()
	a.store(true, at(rbx, off), rax)
	a.bind(have)
}

// procID: push procid, the thread's index in the thread table.
func (c *compiler) procID(i int) {
	c.threadEntry(i, 4)
	c.push(rax)
}

// threadEntry leaves in rax the 32-bit field at off of the calling
// thread's entry in the thread table (Layout.Threads): open addressing
// from uint32(tid*0x9e3779b1) >> (32-ThreadBits), linear; an empty slot
// (tid 0) or a whole table searched is an invalid-operand exception.
// The entry's first 8 bytes are read with one load (gprobes writes them
// with one store, after the rest).
func (c *compiler) threadEntry(i int, off int32) {
	a := &c.a
	c.sysID(OffTid, sysGettid)
	notFound := c.raise(rpn.ExInvalidOperand, i)
	h := uint32(threadHash)
	a.imulRRI(false, rdi, rax, int32(h))
	a.shiftRI(shShr, false, rdi, 32-ThreadBits)
	a.shiftRI(shShl, false, rdi, 4) // ThreadEntry
	a.movAbs(rsi, c.l.Threads)
	a.movImm(rdx, ThreadSlots)
	loop := a.newLabel()
	found := a.newLabel()
	a.bind(loop)
	a.load(true, rcx, atIdx(rsi, rdi, 1, 0))
	a.aluRR(aluCmp, false, rcx, rax)
	a.jcc(condE, found)
	a.testRR(false, rcx, rcx)
	a.jcc(condE, notFound)
	a.aluRI(aluAdd, false, rdi, ThreadEntry)
	a.aluRI(aluAnd, false, rdi, ThreadSlots*ThreadEntry-1)
	a.decR(false, rdx)
	a.jcc(condNE, loop)
	a.jmp(notFound)
	a.bind(found)
	a.load(false, rax, atIdx(rsi, rdi, 1, off))
}

// timestamp: push ts, the hit's time stamp (stamp): a time stamp counter
// value goes through the Clock, NS0 + ((tsc - TSC0) * Mult) >> Shift,
// with a 128-bit product and Shift taken modulo 128; a time in ns (bit
// 63, StampNS) is pushed as it is.
func (c *compiler) timestamp() {
	a := &c.a
	c.stamp()
	ns := a.newLabel()
	done := a.newLabel()
	a.emit(0x48, 0x0f, 0xba, 0xe0, 0x3f) // bt $63,%rax
	a.jcc(condB, ns)
	a.movAbs(rsi, c.l.Clock)
	a.aluRM(aluSub, true, rax, at(rsi, offTSC0))
	a.unaryM(unMul, true, at(rsi, offMult)) // rdx:rax
	a.load(true, rcx, at(rsi, offShift))
	a.shrdCL(true, rax, rdx)
	a.shiftRCL(shShr, true, rdx)
	a.test8RI(rcx, 64)
	a.cmov(condNE, true, rax, rdx)
	a.aluRM(aluAdd, true, rax, at(rsi, offNS0))
	a.jmp(done)
	a.bind(ns)
	a.emit(0x48, 0x0f, 0xba, 0xf0, 0x3f) // btr $63,%rax
	a.bind(done)
	c.maskW(rax)
	c.push(rax)
}

// stamp leaves the hit's time stamp in rax (OffTSC), reading it the first
// time in the hit: rdtsc, or, with the NoTSC byte set, the
// clock_gettime(CLOCK_REALTIME) system call (out of line; ns | StampNS;
// StampNS alone when the call fails). Each rdtsc is in Code.TSC with that
// code as its handler. Clobbers rcx, rdx, rsi, rdi and r11.
func (c *compiler) stamp() {
	a := &c.a
	a.load(true, rax, at(rbx, OffTSC))
	a.testRR(true, rax, rax)
	have := a.newLabel()
	a.jcc(condNE, have)
	slow := a.newLabel()
	back := a.newLabel()
	if c.l.NoTSC != 0 {
		a.movAbs(rsi, c.l.NoTSC)
		a.movzx8(rax, at(rsi, 0))
		a.testRR(false, rax, rax)
		a.jcc(condNE, slow)
	}
	c.tscSites = append(c.tscSites, fixupRef{a.pos(), slow})
	a.rdtsc()
	a.shiftRI(shShl, true, rdx, 32)
	a.aluRR(aluOr, true, rax, rdx)
	a.bind(back)
	a.store(true, at(rbx, OffTSC), rax)
	a.bind(have)
	c.stubs = append(c.stubs, func() {
		a.bind(slow)
		a.aluRI(aluSub, true, rsp, 16)
		a.aluRR(aluXor, false, rdi, rdi) // CLOCK_REALTIME
		a.movRR(true, rsi, rsp)
		a.movImm(rax, sysClockGettime)
		a.syscall()
		fail := a.newLabel()
		fin := a.newLabel()
		a.testRR(true, rax, rax)
		a.jcc(condNE, fail)
		a.load(true, rax, at(rsp, 0))
		a.imulRRI(true, rax, rax, 1000000000)
		a.aluRM(aluAdd, true, rax, at(rsp, 8))
		a.jmp(fin)
		a.bind(fail)
		a.aluRR(aluXor, false, rax, rax)
		a.bind(fin)
		a.aluRI(aluAdd, true, rsp, 16)
		a.emit(0x48, 0x0f, 0xba, 0xe8, 0x3f) // bts $63,%rax
		a.jmp(back)
	})
}

// ClockNS is what push ts computes from a TSC value and the Clock.
func ClockNS(k Clock, tsc uint64) uint64 {
	hi, lo := bits.Mul64(tsc-k.TSC0, k.Mult)
	s := k.Shift & 127
	var v uint64
	switch {
	case s == 0:
		v = lo
	case s < 64:
		v = lo>>s | hi<<(64-s)
	default:
		v = hi >> (s - 64)
	}
	return k.NS0 + v
}

// logN: log n, the n top words in push order, w bytes each.
func (c *compiler) logN(n int) {
	a := &c.a
	total := int32(n * c.w)
	join := a.newLabel()
	slow := c.later(func() {
		for j := 0; j < n; j++ {
			a.load(true, rax, c.slot(n-1-j, r10))
			a.call(c.appendL)
		}
		a.jmp(join)
	})
	c.appendUsed = true
	if total <= c.logmax {
		a.aluRI(aluCmp, false, r14, c.logmax-total)
		a.jcc(condA, slow)
		for j := 0; j < n; j++ {
			a.load(!c.is32, rax, c.slot(n-1-j, r10))
			a.store(!c.is32, atIdx(rbx, r14, 1, OffLog+int32(j*c.w)), rax)
		}
		a.aluRI(aluAdd, false, r14, total)
	} else {
		a.jmp(slow)
	}
	a.bind(join)
	c.adjust(-n)
}

// logVars: log lv/gv,i,n.
func (c *compiler) logVars(base reg, first, n int) {
	a := &c.a
	total := int32(n * c.w)
	join := a.newLabel()
	slow := c.later(func() {
		a.lea(true, rsi, at(base, int32(first*8)))
		a.movImm(rcx, uint64(n))
		loop := a.newLabel()
		a.bind(loop)
		a.load(true, rax, at(rsi, 0))
		a.call(c.appendL)
		a.aluRI(aluAdd, true, rsi, 8)
		a.decR(false, rcx)
		a.jcc(condNE, loop)
		a.jmp(join)
	})
	c.appendUsed = true
	if total > c.logmax {
		a.jmp(slow)
		a.bind(join)
		return
	}
	a.aluRI(aluCmp, false, r14, c.logmax-total)
	a.jcc(condA, slow)
	if n <= 8 {
		for j := 0; j < n; j++ {
			a.load(!c.is32, rax, at(base, int32((first+j)*8)))
			a.store(!c.is32, atIdx(rbx, r14, 1, OffLog+int32(j*c.w)), rax)
		}
	} else {
		a.lea(true, rsi, at(base, int32(first*8)))
		a.lea(true, rdi, atIdx(rbx, r14, 1, OffLog))
		a.movImm(rcx, uint64(n))
		loop := a.newLabel()
		a.bind(loop)
		a.load(!c.is32, rax, at(rsi, 0))
		a.store(!c.is32, at(rdi, 0), rax)
		a.aluRI(aluAdd, true, rsi, 8)
		a.aluRI(aluAdd, true, rdi, int32(c.w))
		a.decR(false, rcx)
		a.jcc(condNE, loop)
	}
	a.aluRI(aluAdd, false, r14, total)
	a.bind(join)
}

// logStr: len addr LOG STR. The machine reads in chunks and, when a chunk
// fails, byte by byte; the outcome is the same as reading byte by byte:
// bytes up to the NUL, at most len, at most what the log holds; a fault
// on a byte before the NUL is invalid-address at that byte. When the log
// fills with bytes left, the next byte says whether the string was cut
// (not NUL, or unreadable: truncated).
func (c *compiler) logStr(i int) {
	a := &c.a
	a.load(true, rsi, c.slot(0, noReg))
	a.load(true, rdx, c.slot(1, r10))
	c.adjust(-2)
	loop, done, full, trunc := a.newLabel(), a.newLabel(), a.newLabel(), a.newLabel()
	a.bind(loop)
	a.testRR(true, rdx, rdx)
	a.jcc(condE, done)
	a.aluRI(aluCmp, false, r14, c.logmax)
	a.jcc(condAE, full)
	c.access(c.raiseAddr(i, rsi), func() { a.movzx8(rax, at(rsi, 0)) })
	a.testRR(false, rax, rax)
	a.jcc(condE, done)
	a.store8(atIdx(rbx, r14, 1, OffLog), rax)
	a.incR(false, r14)
	a.incR(true, rsi)
	a.decR(true, rdx)
	a.jmp(loop)
	a.bind(full)
	c.access(trunc, func() { a.movzx8(rax, at(rsi, 0)) })
	a.testRR(false, rax, rax)
	a.jcc(condE, done)
	a.bind(trunc)
	a.store8Imm(at(rbx, OffTruncated), 1)
	a.bind(done)
}

// logMrf: len addr LOG MRF, len raw bytes (cut to what the log holds).
func (c *compiler) logMrf(i int) {
	a := &c.a
	a.load(true, rsi, c.slot(0, noReg))
	a.load(true, rcx, c.slot(1, r10))
	c.adjust(-2)
	a.movImm(rax, uint64(c.logmax))
	a.aluRR(aluSub, false, rax, r14) // room
	fits, done := a.newLabel(), a.newLabel()
	a.aluRR(aluCmp, true, rcx, rax)
	a.jcc(condBE, fits)
	a.movRR(true, rcx, rax)
	a.store8Imm(at(rbx, OffTruncated), 1)
	a.bind(fits)
	a.testRR(true, rcx, rcx)
	a.jcc(condE, done)
	a.cld()
	a.lea(true, rdi, atIdx(rbx, r14, 1, OffLog))
	a.aluRR(aluAdd, false, r14, rcx)
	a.movRR(true, rdx, rsi)
	c.access(c.raiseAddr(i, rdx), func() { a.repMovsb() })
	a.bind(done)
}

// appendHelper: append the low w bytes of rax to the log, byte by byte,
// setting truncated at the first byte that does not fit. Clobbers rax,
// rdx.
func (c *compiler) appendHelper() {
	a := &c.a
	a.bind(c.appendL)
	a.movImm(rdx, uint64(c.w))
	loop, trunc := a.newLabel(), a.newLabel()
	a.bind(loop)
	a.aluRI(aluCmp, false, r14, c.logmax)
	a.jcc(condAE, trunc)
	a.store8(atIdx(rbx, r14, 1, OffLog), rax)
	a.incR(false, r14)
	a.shiftRI(shShr, true, rax, 8)
	a.decR(false, rdx)
	a.jcc(condNE, loop)
	a.ret()
	a.bind(trunc)
	a.store8Imm(at(rbx, OffTruncated), 1)
	a.ret()
}

// exceptionExit: ecx the PC, edx the exception; Addr stored already when
// entered at exAddrCommon.
func (c *compiler) exceptionExit() {
	a := &c.a
	a.bind(c.exCommon)
	a.storeImm(true, at(rbx, OffAddr), 0)
	a.bind(c.exAddrCommon)
	a.store8(at(rbx, OffException), rdx)
	a.store(false, at(rbx, OffPC), rcx)
	a.store8Imm(at(rbx, OffTruncated), 0)
	a.storeImm(false, at(rbx, OffLogLen), 0)
	a.movAbs(rax, c.l.Probe)
	a.lockIncM(true, at(rax, offFaults))
	a.movImm(rax, ResultException)
	c.epilogue()
}
