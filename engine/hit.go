package engine

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	pb "github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/usdt"
	"github.com/gprobes/gprobes/x86"
)

// thread is the engine's state of one thread: its machine (the RPN
// machine's temporary log buffer is per thread) and an out-of-line step in
// flight.
type thread struct {
	tid, space int
	held       bool // stopped by the target at start, until Go
	mach       rpn.Machine
	env        hitEnv
	regs       Regs
	step       *pendingStep
	blocked    bool // its signals are blocked for the step (SignalBlocker)
	recs       []Record
	// signals the target holds back until the out-of-line step is over
	heldSigs int
	// heldPad: gprobes holds the thread's signals (blocked) until it
	// leaves the pad it is in
	heldPad bool
}

// pendingStep is a displaced instruction running out of line under
// single-step, with the records to commit once it has executed.
type pendingStep struct {
	bp   *breakpoint
	recs []Record
	// records of probes with logonfault = yes: kept if the step faults
	keepOnFault []bool
}

// hitEnv is the rpn.Env of one thread's hit.
type hitEnv struct {
	e   *Engine
	th  *thread
	now time.Time
	// system values read during this hit: on a guest each costs reads
	// of guest memory, and the records of the hit name the task too
	sys     [8]uint64
	sysHave uint8
	// the instance variables of the call the running program belongs
	// to, nil for none (retprobe.go)
	iv *[rpn.MaxIV]uint64
	// mod is the running probe's module: whose probes enable and
	// disable switch (switch.go)
	mod *Module
	// stacks the running program logged (log ustack, log kstack), named
	// in its record
	stacks []hitStack
	// args are where the arguments of the usdt site hit are (push arg,
	// usdt.go), nil for another probe
	args []usdt.Arg
}

// hitStack is one stack a program logged.
type hitStack struct {
	kernel bool
	pcs    []uint64
	exact  uint64
}

// Stack unwinds the thread's stack (rpn.StackEnv) through the OS.
func (h *hitEnv) Stack(kernel bool, pcs []uint64) (int, bool) {
	u := h.e.ab.unwinder
	if u == nil {
		return 0, false
	}
	n, exact, ok := u.Unwind(h.th.space, h.th.tid, &h.th.regs, kernel, pcs)
	if ok {
		h.stacks = append(h.stacks, hitStack{kernel: kernel, pcs: append([]uint64(nil), pcs[:n]...), exact: exact})
	}
	return n, ok
}

// namedStacks names the stacks the hit's program logged, for its record,
// and forgets them.
func (e *Engine) namedStacks(th *thread) []pb.Stack {
	if len(th.env.stacks) == 0 {
		return nil
	}
	u := e.ab.unwinder
	out := make([]pb.Stack, 0, len(th.env.stacks))
	for _, st := range th.env.stacks {
		kind := "user"
		if st.kernel {
			kind = "kernel"
		}
		out = append(out, pb.Stack{Kind: kind, Frames: u.NameFrames(th.space, st.kernel, st.pcs, st.exact)})
	}
	th.env.stacks = th.env.stacks[:0]
	return out
}

// autoStack is the stack an exception record of a probe with
// autostacktrace = yes carries: the thread's stack at the hit,
// rpn.DefaultStackFrames frames, as log ustack (a process) or log kstack
// (a kernel) would log it. Such a probe is refused at insert by an OS
// that takes no stacks (Place), so every exception record of it has one.
func (e *Engine) autoStack(th *thread) []pb.Stack {
	u, ok := e.ab.unwinder, e.ab.unwinder != nil
	if !ok {
		return nil
	}
	kernel := e.os.Kernel()
	pcs := make([]uint64, rpn.DefaultStackFrames)
	n, exact, ok := u.Unwind(th.space, th.tid, &th.regs, kernel, pcs)
	if !ok {
		return nil
	}
	kind := "user"
	if kernel {
		kind = "kernel"
	}
	return []pb.Stack{{Kind: kind, Frames: u.NameFrames(th.space, kernel, pcs[:n], exact)}}
}

func (h *hitEnv) Reg(r rpn.Reg, user bool) (uint64, bool) {
	if user {
		return h.e.os.UserReg(h.th.tid, &h.th.regs, r)
	}
	if r >= rpn.RegCR0 && !h.e.os.Kernel() {
		return 0, false // no control registers in a process
	}
	return h.th.regs[r], true
}

func (h *hitEnv) SetReg(r rpn.Reg, user bool, v uint64) bool {
	if user {
		// the saved user-mode registers of a kernel's current task, where
		// the OS can write them (a user module's pop u is pop r)
		if w := h.e.ab.userRegs; w != nil {
			return w.SetUserReg(h.th.tid, &h.th.regs, r, v)
		}
		return false
	}
	switch {
	case r <= rpn.RegRFLAGS, r == rpn.RegFSBase, r == rpn.RegGSBase:
		h.th.regs[r] = v
		return true
	}
	return false
}

func (h *hitEnv) ReadMem(addr uint64, p []byte) bool {
	return h.e.tgt.ReadMem(h.th.space, addr, p) == nil
}

func (h *hitEnv) WriteMem(addr uint64, p []byte) bool {
	return h.e.tgt.WriteMem(h.th.space, addr, p) == nil
}

func (h *hitEnv) Access(addr uint64, write bool) bool {
	var b [1]byte
	if h.e.tgt.ReadMem(h.th.space, addr, b[:]) != nil {
		return false
	}
	// writable: the target says so (a write through /proc/PID/mem or a
	// stub would succeed even on read-only text)
	return !write || h.e.os.Writable(h.th.space, addr)
}

func (h *hitEnv) Sys(v rpn.SysValue) (uint64, bool) {
	if v == rpn.SysTS {
		return uint64(h.now.UnixNano()), true
	}
	if v >= 8 {
		return 0, false
	}
	if h.sysHave&(1<<v) != 0 {
		return h.sys[v], true
	}
	x, ok := h.e.os.Sys(h.th.tid, &h.th.regs, v)
	if ok {
		h.sys[v], h.sysHave = x, h.sysHave|1<<v
	}
	return x, ok
}

func (h *hitEnv) IO(port uint64, size uint8, write bool, v uint64) (uint64, bool) {
	if p := h.e.ab.portIO; p != nil {
		x, err := p.PortIO(port, size, write, v)
		return x, err == nil
	}
	return 0, false
}

// mem lets the x86 emulator reach the thread's memory.
type mem struct {
	e  *Engine
	sp int
}

func (m mem) Read(addr uint64, p []byte) bool  { return m.e.tgt.ReadMem(m.sp, addr, p) == nil }
func (m mem) Write(addr uint64, p []byte) bool { return m.e.tgt.WriteMem(m.sp, addr, p) == nil }

// trap handles a SIGTRAP that is not the end of a step: a probe hit, an
// int3 that was taken out meanwhile, or a trap of the program's own.
func (e *Engine) trap(th *thread) {
	if err := e.tgt.GetRegs(th.tid, &th.regs); err != nil {
		return // gone
	}
	sp := e.spaces[th.space]
	addr := e.tgt.TrapPC(th.tid, th.regs[rpn.RegRIP])
	var bp *breakpoint
	if sp != nil {
		bp = sp.bps[addr]
	}
	if bp == nil {
		if sp != nil && sp.removed[addr] {
			// hit just before its probe was removed: run the original
			th.regs[rpn.RegRIP] = addr
			e.fail(e.tgt.SetRegs(th.tid, &th.regs), "put thread %d back on %#x, where a probe was removed", th.tid, addr)
			e.resume(th.tid, 0)
			return
		}
		if e.os.Kernel() && sp != nil {
			// A stub reports only its own breakpoints: this one belongs
			// to a client that went away without taking it out (QEMU
			// keeps them until a new client asks "?"). Left in, the
			// vCPU would stop on it forever: take it out and go on.
			err := e.removeForeign(sp, addr)
			e.warn(fmt.Sprintf("stop at %#x where no probe is, a breakpoint of an earlier client of the stub: removed (%v)", addr, err))
			th.regs[rpn.RegRIP] = addr
			e.fail(e.tgt.SetRegs(th.tid, &th.regs), "put vCPU %d back on %#x", th.tid, addr)
			e.resume(th.tid, 0)
			return
		}
		e.resume(th.tid, SigTrap) // the program's own: deliver it
		return
	}
	th.regs[rpn.RegRIP] = addr
	if bp.internal != nil {
		bp.internal(th)
	}
	th.env.now = time.Now()
	th.env.sysHave = 0
	recs := th.recs[:0]
	var keep []bool
	var calls callEntries
	e.gvLock.Lock()
	e.callsEnter(th, sp, addr, &calls) // return probes: a call begins here
	for _, p := range bp.probes {
		if p.State != StateActive || (p.def().Kind != rpn.ProbeOffset && p.def().Kind != rpn.ProbeUSDT) {
			continue
		}
		inst := sp.inst[p.src]
		if inst == nil {
			continue
		}
		calls.ivOf(&th.env, p)
		th.env.args = sp.usdtArgs(p, addr)
		r := e.runProbe(th, inst, p)
		th.env.args = nil
		if r == nil {
			continue // switched off: no hit
		}
		rec := e.record(th, p, addr, r)
		switch {
		case r.Outcome == rpn.OutcomeException:
			// not tied to the instruction: committed at once
			e.commit(&rec)
		case r.Commits():
			rec.KeepOnFault = p.def().LogOnFault
			recs = append(recs, rec)
			keep = append(keep, p.def().LogOnFault)
		}
	}
	th.env.iv = nil
	recs, keep = e.callsReturn(th, sp, bp, addr, recs, keep) // return probes: calls return here
	e.gvLock.Unlock()
	th.recs = recs
	if th.regs[rpn.RegRIP] != addr {
		// a program moved rip (pop r,rip): the displaced instruction is
		// skipped, as a kprobe pre-handler returning 1 does; or a return
		// probe's ret was emulated (retprobe.go)
		e.fail(e.tgt.SetRegs(th.tid, &th.regs), "move thread %d where the probe's program put rip", th.tid)
		e.commitAll(th, recs)
		e.resume(th.tid, 0)
		return
	}
	e.runDisplaced(th, bp, recs, keep)
}

// runDisplaced executes the instruction the int3 replaced, then commits.
func (e *Engine) runDisplaced(th *thread, bp *breakpoint, recs []Record, keep []bool) {
	var m x86.Mem = mem{e, th.space}
	wm := e.watchMem(th, m) // what it touched, for watch probes
	if wm != nil {
		m = wm
	}
	switch bp.insn.Class {
	case x86.Emulate:
		if x86.EmulateInsn(&bp.insn, &th.regs, m) {
			e.finish(th, e.watchEmulated(th, wm, recs))
			return
		}
	case x86.Branch:
		if x86.EmulateBranch(&bp.insn, &th.regs, m) {
			e.finish(th, e.watchEmulated(th, wm, recs))
			return
		}
	case x86.Boost:
		if bp.slot != 0 {
			// it cannot fault: commit, and let the thread run through the
			// slot and its jump back
			th.regs[rpn.RegRIP] = bp.slot
			e.finish(th, recs)
			return
		}
	}
	if bp.slot == 0 {
		// no slot (none could be mapped) and emulation failed: nothing
		// safe to do but step in place with the int3 out, briefly
		e.stepInPlace(th, bp, recs)
		return
	}
	th.regs[rpn.RegRIP] = bp.slot
	if err := e.tgt.SetRegs(th.tid, &th.regs); err != nil {
		return
	}
	th.step = &pendingStep{bp: bp, recs: append([]Record{}, recs...), keepOnFault: append([]bool{}, keep...)}
	if b := e.ab.blocker; b != nil && !isSyscall(&bp.insn) {
		// signals wait in the kernel until the step is over (a system
		// call stepped keeps them: it may be the one that waits for one)
		if b.BlockSignals(th.tid) == nil {
			th.blocked = true
		}
	}
	e.fail(e.tgt.Step(th.tid), "step thread %d through the out-of-line copy of %#x", th.tid, bp.addr)
}

// unblockSignals gives a thread whose step is over its signal mask back.
func (e *Engine) unblockSignals(th *thread) {
	if th.blocked {
		th.blocked = false
		e.fail(e.ab.blocker.UnblockSignals(th.tid), "give thread %d its signal mask back", th.tid)
	}
}

// isSyscall: syscall or sysenter.
func isSyscall(in *x86.Insn) bool {
	b := in.Bytes
	return len(b) >= 2 && b[0] == 0x0f && (b[1] == 0x05 || b[1] == 0x34)
}

// finish writes the registers, commits and resumes.
func (e *Engine) finish(th *thread, recs []Record) {
	if err := e.tgt.SetRegs(th.tid, &th.regs); err != nil {
		return
	}
	e.releaseSignals(th)
	e.commitAll(th, recs)
	if e.spaces[th.space] != nil && e.spaces[th.space].detached {
		return
	}
	e.resume(th.tid, 0)
}

// stepDone finishes an out-of-line step.
func (e *Engine) stepDone(th *thread) {
	st := th.step
	th.step = nil
	if err := e.tgt.GetRegs(th.tid, &th.regs); err != nil {
		return
	}
	if err := x86.FixupAfterStep(&st.bp.insn, st.bp.slot, &th.regs, mem{e, th.space}); err != nil {
		if errors.Is(err, x86.ErrStepAgain) {
			// a rep string instruction traps after every iteration: go on
			// stepping; the records wait until it has finished
			th.step = st
			e.fail(e.tgt.Step(th.tid), "step thread %d on through a rep instruction", th.tid)
			return
		}
		// it went somewhere we do not know how to fix: leave it there
		e.warn(fmt.Sprintf("after the out-of-line step of %#x: %v", st.bp.addr, err))
	}
	e.unblockSignals(th) // stopped still: its mask back before it runs
	e.finish(th, st.recs)
}

// stepFault handles a signal during an out-of-line step: the displaced
// instruction faulted (or a signal came first). The thread goes back to
// the original address, as if it had faulted there, and the log is
// discarded unless its probe says logonfault = yes.
func (e *Engine) stepFault(th *thread, sig int) {
	st := th.step
	th.step = nil
	e.unblockSignals(th)
	if err := e.tgt.GetRegs(th.tid, &th.regs); err != nil {
		return
	}
	if th.regs[rpn.RegRIP] == st.bp.slot {
		th.regs[rpn.RegRIP] = st.bp.addr
		e.fail(e.tgt.SetRegs(th.tid, &th.regs), "put thread %d back on %#x, where its instruction faulted", th.tid, st.bp.addr)
	}
	e.releaseSignals(th)
	var kept []Record
	for i, r := range st.recs {
		if st.keepOnFault[i] {
			kept = append(kept, r)
		}
	}
	e.commitAll(th, kept)
	e.resume(th.tid, sig)
}

// maxHeldSigs bounds the signals held during one step: signals sent
// faster than the thread can be stepped (a timer of a few tens of
// microseconds) would otherwise keep the step from ever finishing. Past
// it, the signal is delivered at the probed address, as without a
// holder, and the probe counts that execution twice.
const maxHeldSigs = 8

// holdSignal asks the target to keep back a signal sent to a thread in
// the middle of an out-of-line step, whose instruction has not run yet
// (a signal-delivery stop comes before it). Delivered there, the
// signal's handler would return to the probed address and the probe
// would fire twice for one execution.
func (e *Engine) holdSignal(th *thread) bool {
	h, ok := e.ab.holder, e.ab.holder != nil
	if !ok {
		return false
	}
	var r Regs
	if e.tgt.GetRegs(th.tid, &r) != nil || r[rpn.RegRIP] != th.step.bp.slot {
		return false
	}
	if err := h.Hold(th.tid); err != nil {
		e.warn(fmt.Sprintf("a signal during the out-of-line step of %#x is delivered there: %v", th.step.bp.addr, err))
		return false
	}
	th.heldSigs++
	return true
}

// inert reports whether the signal a thread stopped for runs none of its
// code and changes nothing when delivered (SignalHolder.Inert): it is
// delivered where the thread is, never held and sent again.
func (e *Engine) inert(ev Event) bool {
	h, ok := e.ab.holder, e.ab.holder != nil
	return ok && h.Inert(ev.Tid, ev.Sig)
}

// releaseSignals lets the signals held during a step in.
func (e *Engine) releaseSignals(th *thread) {
	if th.heldSigs == 0 {
		return
	}
	th.heldSigs = 0
	if err := e.ab.holder.Release(th.tid); err != nil {
		e.warn(fmt.Sprintf("signals held during an out-of-line step of thread %d: %v", th.tid, err))
	}
}

// stepInPlace runs the original instruction where it is: breakpoint out,
// one step, breakpoint back. On a target that stops every thread at each
// stop (a GDB stub in all-stop mode) no other thread runs meanwhile; on a
// process, other threads may miss the probe: used there only when no
// out-of-line slot could be mapped.
func (e *Engine) stepInPlace(th *thread, bp *breakpoint, recs []Record) {
	sp := e.spaces[th.space]
	if err := e.lift(sp, bp); err != nil {
		// the breakpoint is still there: run on, and the thread would
		// stop on it again for ever. A target that cannot write its own
		// code has lost its backend (a stub gone): the thread stays
		// stopped, and the backend's end is reported by Wait
		e.warn(err.Error())
		return
	}
	if err := e.tgt.SetRegs(th.tid, &th.regs); err != nil {
		e.lower(sp, bp)
		return
	}
	if err := e.tgt.Step(th.tid); err != nil {
		e.lower(sp, bp)
		return
	}
	for {
		ev, err := e.tgt.Wait()
		if err != nil {
			e.pendingEvents = append(e.pendingEvents, Event{Kind: EvSpaceExit, Space: th.space, Tid: th.tid, Exit: err.Error()})
			return
		}
		if ev.Tid == th.tid && (ev.Kind == EvTrap || ev.Kind == EvSignal || ev.Kind == EvKick) {
			if sp := e.spaces[th.space]; sp != nil {
				e.lower(sp, bp)
			}
			if ev.Kind == EvTrap {
				recs = e.watchStepped(th, recs)
			}
			sig := 0
			if ev.Kind == EvSignal {
				sig = ev.Sig
				kept := recs[:0]
				for _, r := range recs {
					if r.KeepOnFault {
						kept = append(kept, r)
					}
				}
				recs = kept
			}
			e.commitAll(th, recs)
			if sp := e.spaces[th.space]; sp == nil || !sp.detached {
				e.resume(th.tid, sig)
			}
			return
		}
		e.pendingEvents = append(e.pendingEvents, ev)
		if ev.Kind == EvSpaceExit || ev.Tid == th.tid {
			return // gone
		}
	}
}

// record builds the record of a probe's result.
func (e *Engine) record(th *thread, p *eprobe, addr uint64, r *rpn.Result) Record {
	d := p.def()
	rec := Record{
		Time: th.env.now, Kind: "log", Module: p.mod.Name, Major: r.Major, Minor: r.Minor,
		Location: d.Loc.Text, Probe: ProbeKindName(d), Address: addr, Pid: th.space, Tid: th.tid, CPU: e.tgt.ThreadIndex(th.tid),
		Exit: r.Exit, Truncated: r.Truncated,
	}
	switch r.Outcome {
	case rpn.OutcomeException:
		rec.Kind = "exception"
		rec.Exception = r.Exception.String()
		rec.PC = r.PC
		if pos, ok := p.src.LineFor(r.PC); ok {
			rec.Line = p.src.PosString(pos)
		}
		if d.AutoStack {
			rec.Stacks = e.autoStack(th)
		}
	default:
		if r.Exit == rpn.ExitTrace {
			rec.Kind = "trace"
		}
		rec.Data = append([]byte(nil), r.Log...)
		if r.Commits() {
			rec.Stacks = e.namedStacks(th)
		}
	}
	th.env.stacks = th.env.stacks[:0]
	if e.os.Kernel() && (r.Outcome == rpn.OutcomeException || r.Commits()) {
		// a kernel's records name the task that was running on the
		// vCPU (Tid stays the vCPU's thread when it is not known)
		if pid, ok := th.env.Sys(rpn.SysPID); ok {
			rec.Pid = int(pid)
		}
		if tid, ok := th.env.Sys(rpn.SysTID); ok {
			rec.Tid = int(tid)
		}
	}
	return rec
}

// commitAll commits the records of a hit, running exit facilities 3 and 4.
func (e *Engine) commitAll(th *thread, recs []Record) {
	detach := false
	for i := range recs {
		r := &recs[i]
		switch r.Exit {
		case rpn.ExitDump:
			var path string
			err := errors.New("this target cannot write dumps")
			if d := e.ab.dumper; d != nil {
				path, err = d.Dump(th.space, th.tid, e.opts.DumpDir)
			}
			if err != nil {
				r.Dump = "failed: " + err.Error()
			} else {
				r.Dump = path
			}
		case rpn.ExitDebugger:
			if h := e.ab.handover; h != nil {
				r.Debugger = h.DebuggerCommand(th.space, th.tid)
			} else {
				r.Debugger = fmt.Sprintf("gdb -p %d", th.space)
			}
			detach = true
		}
		e.commit(r)
	}
	if detach {
		// left stopped for the debugger
		if err := e.detachSpace(th.space, SigStop); err != nil {
			e.warn(fmt.Sprintf("detaching process %d for a debugger: %v", th.space, err))
		}
	}
}

func (e *Engine) commit(r *Record) {
	if e.opts.Sink != nil {
		e.commitMu.Lock()
		e.opts.Sink.Commit(r)
		e.commitMu.Unlock()
	}
}

// fail says that a call of the target failed where no caller can act on
// it: no failure of the engine's is silent. A thread that is gone is no
// failure (its exit is reported next).
func (e *Engine) fail(err error, format string, args ...any) {
	if err == nil || errors.Is(err, syscall.ESRCH) {
		return
	}
	e.warn(fmt.Sprintf(format, args...) + ": " + err.Error())
}

func (e *Engine) warn(msg string) {
	if e.opts.Warn != nil {
		e.opts.Warn(msg)
	}
}
