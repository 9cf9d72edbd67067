// Package fake is an in-memory engine.Target: a process of a few threads
// that run a tiny subset of x86-64 out of byte arrays, so the engine's
// semantics (commit after the instruction, discard on a fault, pass
// count, max hits, insertion order, removal in the middle of a hit) are
// tested in milliseconds, without root, a compiler or ptrace. delve's
// pkg/proc/core, a target made of memory and registers only, is the
// model.
//
// The instructions: nop (90), push %rbp (55), pop %rbp (5d), mov
// (%rax),%rax (48 8b 00: faults with SIGSEGV when rax points nowhere),
// mov %rax,(%rbx) (48 89 03: faults when rbx points nowhere or at memory
// not writable), int3 (cc), call rel32 (e8), jmp rel32 (e9), jmp rel8
// (eb) and ret (c3: the end of an iteration; with Calls set, a return
// that pops its address, the iteration ending at the return to Home).
// A thread runs its function Iter times, then
// exits. A thread detached runs on natively, the way a process does once
// a tracer lets it go: an int3 left behind kills it with SIGTRAP, which
// Outcome reports. Wait runs one runnable thread (the lowest id first) to
// its next stop: the fake is deterministic.
//
// The trap: the fake does not run threads concurrently; a test that needs
// two threads stopped at once says so with Thread.StopAt.
package fake

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/engine/entries"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/symbols"
)

// Signal numbers of the events (Linux x86-64).
const (
	SIGTRAP = 5
	SIGSEGV = 11
)

// Pid is the fake process's id (its address space).
const Pid = 100

// Region is memory of the process.
type Region struct {
	Base     uint64
	Data     []byte
	Writable bool
}

// Target is the fake process.
type Target struct {
	mu      sync.Mutex
	regions []*Region
	threads map[int]*Thread
	syms    *symbols.Set
	module  string
	kicked  bool
	// OnKick runs (on the caller's goroutine) when Kick is called: a test
	// learns that a command of the engine's is waiting.
	OnKick func()
	// OnResume runs (on the engine's loop) after each Resume.
	OnResume func(tid, sig int)
	// WaitErr, when set, is asked first at each Wait: an error it
	// returns is Wait's (a backend whose wait failed: a hypercall
	// refused), the threads staying as they are.
	WaitErr func() error
	// Executed counts the instructions run at each address (int3s of
	// the engine's not counted: they are not the program's).
	Executed map[uint64]int
	queue    []engine.Event
	orig     map[uint64]byte // the original byte under each breakpoint (engine loop only)
	// Names are more module names that resolve to the program (several
	// modules probing one file).
	Names []string
	// Kernel makes the fake's code a guest kernel's, as a gdb: or xen:
	// target sees one: modtype = kernel modules go in (user ones are
	// refused) and the engine treats the code as kernel code. Set it
	// before the engine starts.
	Kernel bool
	// StackRefused, when set, makes the fake take stacks as a guest
	// kernel does (engine.StackUnwinder and engine.StackRefuser): a
	// stack of one frame, the hit's address, named "f+0"; insert asks
	// StackRefused whether a stack of the kind can be taken. Set it
	// before the engine starts.
	StackRefused func(kernel bool) string
	// A kernel module that loads and unloads, as a guest kernel's does:
	// ModName resolves while ModLoad (called from the engine's loop)
	// answers a load number above 0, a new number for each load, at
	// ModExec's [lo, hi) with the fake's symbols; RendezvousAt are the
	// places the engine is told the module list changes at. The fake
	// models an unload by the original code coming back: a breakpoint
	// the engine forgets (ForgetBreakpoint, listed in Forgotten) gets
	// its original byte back.
	ModName      string
	ModLoad      func() int
	ModExec      [2]uint64
	RendezvousAt []uint64
	Forgotten    []uint64
	// Calls makes each iteration a call of the thread's function: it
	// starts with Home pushed as the return address, ret pops its
	// address, and the iteration ends when a ret returns to Home. Set it
	// before AddThread.
	Calls bool
	// Entries, when set, is what the fake's module says of the places
	// its code is entered (engine.Loaded.Entries): without it the engine
	// knows nothing of them, and puts no jump pad there.
	Entries func() (*entries.Set, error)
	// ShadowStack: the process runs with CET shadow stacks (JumpTarget)
	ShadowStack bool
	// watches are the debug registers of the process (WatchTarget)
	watches [engine.NumWatch]*engine.Watch
	// jump is the memory and journal of a JumpTarget
	jump jumpBooks
}

// Home is the return address each iteration's call returns to (Calls).
const Home = 0xfeed0000

// Runs is how many times the instruction at addr ran.
func (t *Target) Runs(addr uint64) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.Executed[addr]
}

var _ engine.BreakpointForgetter = (*Target)(nil)

// ForgetBreakpoint: the module's code is gone; here it comes back as it
// was (see ModName).
func (t *Target) ForgetBreakpoint(space int, addr uint64) error {
	t.mu.Lock()
	t.Forgotten = append(t.Forgotten, addr)
	t.mu.Unlock()
	orig, ok := t.orig[addr]
	if !ok {
		return fmt.Errorf("fake: no breakpoint at %#x", addr)
	}
	delete(t.orig, addr)
	return t.WriteMem(space, addr, []byte{orig})
}

// Thread is one thread of the fake process.
type Thread struct {
	Tid      int
	Regs     engine.Regs
	Entry    uint64 // the function it calls Iter times
	Iter     int
	stopped  bool
	stepping bool
	detached bool
	exited   bool
	outcome  string
	// StopAt makes the thread stop (as at a breakpoint not yet handled)
	// the first time it reaches this address after another thread
	// stopped: two threads at one int3 at once.
	StopAt uint64
	// fired: the debug registers that fired on its last instruction
	// (WatchTarget), reported with the trap and cleared by WatchHit
	fired uint8
	// firedStep: the trap of a watch was also a single-step's
	firedStep bool
	// Signals blocked (BlockPadSignals): how many times
	Blocked int
	// SignalAt makes the thread stop, the first time it reaches this
	// address, for an asynchronous signal Signal (a kill from another
	// process arriving there). Resumed with it, the process dies of it,
	// unless the thread blocks its signals: then it stays pending
	// (Pending) and the thread runs on.
	SignalAt uint64
	Signal   int
	Pending  []int
}

// New makes a process whose code is code at base, named module, with
// symbols given as System.map lines ("0000000000001000 T f").
func New(module string, base uint64, code []byte, symbolMap string) (*Target, error) {
	tab, err := symbols.ReadMap(module, strings.NewReader(symbolMap))
	if err != nil {
		return nil, err
	}
	t := &Target{
		threads:  map[int]*Thread{},
		syms:     symbols.NewSet(tab),
		module:   module,
		Executed: map[uint64]int{},
	}
	t.regions = append(t.regions, &Region{Base: base, Data: append([]byte{}, code...)})
	return t, nil
}

// Map adds memory.
func (t *Target) Map(base uint64, size int, writable bool) {
	t.regions = append(t.regions, &Region{Base: base, Data: make([]byte, size), Writable: writable})
}

// AddThread adds a thread that calls entry iter times, with its own stack;
// it starts stopped, as a traced process does.
func (t *Target) AddThread(tid int, entry uint64, iter int) *Thread {
	stack := uint64(0x7f0000000000) + uint64(tid)<<20
	t.Map(stack-0x10000, 0x10000, true)
	th := &Thread{Tid: tid, Entry: entry, Iter: iter, stopped: true}
	th.Regs[rpn.RegRIP] = entry
	th.Regs[rpn.RegRSP] = stack - 64
	t.threads[tid] = th
	if t.Calls {
		t.push(th, Home)
	}
	return th
}

// SetSymbols replaces the fake's symbols with these, which may have
// sizes (a System.map has none).
func (t *Target) SetSymbols(syms []symbols.Symbol) {
	t.syms = symbols.NewSet(symbols.NewTable(t.module, syms))
}

// push pushes v on a thread's stack; false when the stack is not
// writable there.
func (t *Target) push(th *Thread, v uint64) bool {
	sp := th.Regs[rpn.RegRSP] - 8
	r, off, ok := t.region(sp, 8)
	if !ok || !r.Writable {
		return false
	}
	putU64(r.Data[off:], v)
	th.Regs[rpn.RegRSP] = sp
	return true
}

// pop pops a word off a thread's stack.
func (t *Target) pop(th *Thread) (uint64, bool) {
	var b [8]byte
	if !t.read(th.Regs[rpn.RegRSP], b[:]) {
		return 0, false
	}
	th.Regs[rpn.RegRSP] += 8
	return u64(b[:]), true
}

// endIteration: the thread's function returned; it calls it again, or
// exits.
func (t *Target) endIteration(th *Thread) (engine.Event, bool) {
	th.Iter--
	if th.Iter <= 0 {
		th.exited, th.outcome = true, "exited"
		return t.exitEvent(th, "exited 0", 0), true
	}
	th.Regs[rpn.RegRIP] = th.Entry
	if t.Calls && !t.push(th, Home) {
		return t.fault(th), true
	}
	return engine.Event{}, false
}

// Thread is thread tid, nil if there is none: a test sets its registers
// before the engine starts.
func (t *Target) Thread(tid int) *Thread {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.threads[tid]
}

// Outcome says how a thread ended: "exited", "killed by SIGTRAP", ...;
// "" while it runs or is traced.
func (t *Target) Outcome(tid int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.threads[tid].outcome
}

func (t *Target) region(addr uint64, n int) (*Region, int, bool) {
	for _, r := range t.regions {
		if addr >= r.Base && addr+uint64(n) <= r.Base+uint64(len(r.Data)) && addr+uint64(n) >= addr {
			return r, int(addr - r.Base), true
		}
	}
	return nil, 0, false
}

func (t *Target) read(addr uint64, p []byte) bool {
	r, off, ok := t.region(addr, len(p))
	if ok {
		copy(p, r.Data[off:])
	}
	return ok
}

// step runs one instruction of a thread; it reports the event that stops
// it, if any.
func (t *Target) step(th *Thread) (engine.Event, bool) {
	rip := th.Regs[rpn.RegRIP]
	if t.Calls && rip == Home {
		return t.endIteration(th)
	}
	var op [5]byte
	if !t.read(rip, op[:1]) {
		return t.die(th, SIGSEGV), true
	}
	switch op[0] {
	case 0x90:
		th.Regs[rpn.RegRIP]++
	case 0x55:
		if !t.push(th, th.Regs[rpn.RegRBP]) {
			return t.fault(th), true
		}
		t.access(th, th.Regs[rpn.RegRSP], 8, true)
		th.Regs[rpn.RegRIP]++
	case 0x5d:
		at := th.Regs[rpn.RegRSP]
		v, ok := t.pop(th)
		if !ok {
			return t.fault(th), true
		}
		t.access(th, at, 8, false)
		th.Regs[rpn.RegRBP] = v
		th.Regs[rpn.RegRIP]++
	case 0x48:
		if !t.read(rip, op[:3]) || (op[1] != 0x8b && op[1] != 0x89) || op[2] != map[byte]byte{0x8b: 0x00, 0x89: 0x03}[op[1]] {
			return t.die(th, SIGSEGV), true
		}
		var b [8]byte
		if op[1] == 0x89 {
			at := th.Regs[rpn.RegRBX]
			r, off, ok := t.region(at, 8)
			if !ok || !r.Writable {
				return t.fault(th), true
			}
			putU64(r.Data[off:], th.Regs[rpn.RegRAX])
			t.access(th, at, 8, true)
		} else {
			if !t.read(th.Regs[rpn.RegRAX], b[:]) {
				return t.fault(th), true
			}
			t.access(th, th.Regs[rpn.RegRAX], 8, false)
			th.Regs[rpn.RegRAX] = u64(b[:])
		}
		th.Regs[rpn.RegRIP] += 3
	case 0xe8, 0xe9, 0xeb:
		n := 5
		if op[0] == 0xeb {
			n = 2
		}
		if !t.read(rip, op[:n]) {
			return t.die(th, SIGSEGV), true
		}
		rel := int64(int8(op[1]))
		if n == 5 {
			rel = int64(int32(uint32(op[1]) | uint32(op[2])<<8 | uint32(op[3])<<16 | uint32(op[4])<<24))
		}
		next := rip + uint64(n)
		if op[0] == 0xe8 {
			if !t.push(th, next) {
				return t.fault(th), true
			}
			t.access(th, th.Regs[rpn.RegRSP], 8, true)
		}
		th.Regs[rpn.RegRIP] = next + uint64(rel)
	case 0xc3:
		if !t.Calls {
			return t.endIteration(th)
		}
		at := th.Regs[rpn.RegRSP]
		v, ok := t.pop(th)
		if !ok {
			return t.fault(th), true
		}
		t.access(th, at, 8, false)
		th.Regs[rpn.RegRIP] = v
	case 0xcc:
		th.Regs[rpn.RegRIP]++
		if th.detached {
			return t.die(th, SIGTRAP), true
		}
		th.stopped = true
		return engine.Event{Kind: engine.EvTrap, Tid: th.Tid, Space: Pid, Sig: SIGTRAP}, true
	default:
		return t.die(th, SIGSEGV), true
	}
	t.Executed[rip]++
	if th.detached && th.fired != 0 {
		// a debug register left set: nobody handles its trap
		return t.die(th, SIGTRAP), true
	}
	return engine.Event{}, false
}

// fault stops a traced thread for the signal a faulting instruction
// raised (rip stays on it); a detached one dies of it.
func (t *Target) fault(th *Thread) engine.Event {
	if th.detached {
		return t.die(th, SIGSEGV)
	}
	th.stopped = true
	return engine.Event{Kind: engine.EvSignal, Tid: th.Tid, Space: Pid, Sig: SIGSEGV}
}

// die ends the whole process, killed by sig.
func (t *Target) die(th *Thread, sig int) engine.Event {
	name := map[int]string{SIGTRAP: "SIGTRAP", SIGSEGV: "SIGSEGV"}[sig]
	t.clearWatches()
	for _, o := range t.threads {
		if !o.exited {
			o.exited, o.outcome = true, "killed by "+name
		}
	}
	return engine.Event{Kind: engine.EvSpaceExit, Tid: th.Tid, Space: Pid, Exit: "killed by " + name, Code: 128 + sig}
}

func (t *Target) exitEvent(th *Thread, how string, code int) engine.Event {
	for _, o := range t.threads {
		if !o.exited {
			return engine.Event{Kind: engine.EvThreadExit, Tid: th.Tid, Space: Pid}
		}
	}
	t.clearWatches()
	return engine.Event{Kind: engine.EvSpaceExit, Tid: th.Tid, Space: Pid, Exit: how, Code: code}
}

// run runs a thread until it stops or ends.
func (t *Target) run(th *Thread) engine.Event {
	for {
		if th.SignalAt != 0 && th.Regs[rpn.RegRIP] == th.SignalAt {
			th.SignalAt = 0
			th.stopped = true
			return engine.Event{Kind: engine.EvSignal, Tid: th.Tid, Space: Pid, Sig: th.Signal, Async: true}
		}
		stepping := th.stepping
		ev, stop := t.step(th)
		if !stop && th.StopAt != 0 && th.Regs[rpn.RegRIP] == th.StopAt {
			// as if it hit the int3 there while another thread's stop
			// was being handled: its trap waits in the queue
			th.StopAt = 0
			if ev2, stop2 := t.step(th); stop2 {
				return ev2
			}
		}
		if stop {
			return ev
		}
		if th.fired != 0 && !th.detached {
			// a data breakpoint's trap, after the access (and a step's,
			// if the thread was stepping)
			th.firedStep = stepping
			th.stepping = false
			th.stopped = true
			return engine.Event{Kind: engine.EvTrap, Tid: th.Tid, Space: Pid, Sig: SIGTRAP}
		}
		if stepping {
			th.stepping = false
			th.stopped = true
			return engine.Event{Kind: engine.EvTrap, Tid: th.Tid, Space: Pid, Sig: SIGTRAP}
		}
	}
}

// Wait runs the lowest-numbered runnable thread to its next stop.
func (t *Target) Wait() (engine.Event, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.WaitErr != nil {
		if err := t.WaitErr(); err != nil {
			return engine.Event{}, err
		}
	}
	if len(t.queue) > 0 {
		ev := t.queue[0]
		t.queue = t.queue[1:]
		return ev, nil
	}
	for _, tid := range t.tids() {
		th := t.threads[tid]
		if th.exited || th.stopped || th.detached {
			continue
		}
		if t.kicked {
			t.kicked = false
			th.stopped = true
			return engine.Event{Kind: engine.EvKick, Tid: tid, Space: Pid}, nil
		}
		ev := t.run(th)
		// threads told to stop at a breakpoint stop now, before the
		// engine handles this one
		for _, o := range t.tids() {
			if ot := t.threads[o]; o != tid && ot.StopAt != 0 && !ot.stopped && !ot.exited && !ot.detached {
				for !ot.stopped && !ot.exited && ot.Regs[rpn.RegRIP] != ot.StopAt {
					if e2, stop := t.step(ot); stop {
						t.queue = append(t.queue, e2)
					}
				}
				if ot.Regs[rpn.RegRIP] == ot.StopAt && !ot.stopped {
					ot.StopAt = 0
					if e2, stop := t.step(ot); stop {
						t.queue = append(t.queue, e2)
					}
				}
			}
		}
		return ev, nil
	}
	for _, th := range t.threads {
		if !th.exited && !th.detached {
			return engine.Event{}, errors.New("fake: every thread is stopped and nothing resumed one")
		}
	}
	return engine.Event{}, engine.ErrNoTracees
}

func (t *Target) tids() []int {
	var out []int
	for tid := range t.threads {
		out = append(out, tid)
	}
	sort.Ints(out)
	return out
}

// Kick makes the next Wait report a stop of a running thread.
func (t *Target) Kick() bool {
	t.mu.Lock()
	t.kicked = true
	hook := t.OnKick
	t.mu.Unlock()
	if hook != nil {
		hook()
	}
	return true
}

func (t *Target) ReadMem(space int, addr uint64, p []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.read(addr, p) {
		return fmt.Errorf("fake: read %d bytes at %#x: not mapped", len(p), addr)
	}
	return nil
}

func (t *Target) WriteMem(space int, addr uint64, p []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, off, ok := t.region(addr, len(p))
	if !ok {
		return fmt.Errorf("fake: write %d bytes at %#x: not mapped", len(p), addr)
	}
	copy(r.Data[off:], p)
	return nil
}

func (t *Target) thread(tid int) (*Thread, error) {
	th := t.threads[tid]
	if th == nil || th.exited {
		return nil, fmt.Errorf("fake: no thread %d", tid)
	}
	return th, nil
}

func (t *Target) GetRegs(tid int, r *engine.Regs) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	th, err := t.thread(tid)
	if err == nil {
		*r = th.Regs
	}
	return err
}

func (t *Target) SetRegs(tid int, r *engine.Regs) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	th, err := t.thread(tid)
	if err == nil {
		th.Regs = *r
	}
	return err
}

func (t *Target) Step(tid int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	th, err := t.thread(tid)
	if err == nil {
		th.stopped, th.stepping = false, true
	}
	return err
}

// Resume lets a thread run; a signal kills the process (the fake program
// has no handlers) unless the thread blocks its signals. OnResume, if
// set, runs after.
func (t *Target) Resume(tid, sig int) error {
	err := t.resume(tid, sig)
	if t.OnResume != nil && err == nil {
		t.OnResume(tid, sig)
	}
	return err
}

func (t *Target) resume(tid, sig int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	th, err := t.thread(tid)
	if err != nil {
		return err
	}
	if sig != 0 && th.Blocked > 0 {
		th.Pending = append(th.Pending, sig)
		sig = 0
	}
	if sig != 0 {
		t.queue = append(t.queue, t.die(th, sig))
		return nil
	}
	th.stopped, th.stepping = false, false
	return nil
}

func (t *Target) StopThread(tid int) ([]engine.Event, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	th, err := t.thread(tid)
	if err == nil {
		th.stopped = true
	}
	return nil, err
}

func (t *Target) DrainKick(tid int) ([]int, error) { return nil, nil }

// Detach lets a thread go: it runs on natively to its end at once.
func (t *Target) Detach(tid, sig int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	th, err := t.thread(tid)
	if err != nil {
		return err
	}
	th.detached, th.stopped, th.stepping = true, false, false
	if sig != 0 {
		t.die(th, sig)
		return nil
	}
	for !th.exited {
		t.step(th)
	}
	return nil
}

func (t *Target) Threads(space int) []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []int
	for _, tid := range t.tids() {
		if th := t.threads[tid]; !th.exited && !th.detached {
			out = append(out, tid)
		}
	}
	return out
}

func (t *Target) Spaces() []int {
	if len(t.Threads(Pid)) == 0 {
		return nil
	}
	return []int{Pid}
}

func (t *Target) ThreadIndex(tid int) int { return tid }

func (t *Target) IsStopped(tid int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	th := t.threads[tid]
	return th != nil && th.stopped
}

// InsertBreakpoint writes an int3, as a process target does.
func (t *Target) InsertBreakpoint(space int, addr uint64, orig []byte) error {
	if t.orig == nil {
		t.orig = map[uint64]byte{}
	}
	t.orig[addr] = orig[0]
	return t.WriteMem(space, addr, []byte{0xcc})
}

func (t *Target) RemoveBreakpoint(space int, addr uint64, orig []byte) error {
	delete(t.orig, addr)
	return t.WriteMem(space, addr, orig[:1])
}

func (t *Target) TrapPC(tid int, rip uint64) uint64 { return rip - 1 }

func (t *Target) OS() engine.OS {
	if t.StackRefused != nil {
		return stackOS{processOS{t}}
	}
	return processOS{t}
}

// stackOS is processOS taking stacks of one frame (StackRefused).
type stackOS struct{ processOS }

var (
	_ engine.StackUnwinder = stackOS{}
	_ engine.StackRefuser  = stackOS{}
)

func (o stackOS) StackRefused(kernel bool) string { return o.t.StackRefused(kernel) }

func (o stackOS) Unwind(space, tid int, regs *engine.Regs, kernel bool, pcs []uint64) (int, uint64, bool) {
	if o.t.StackRefused(kernel) != "" || len(pcs) == 0 {
		return 0, 0, false
	}
	pcs[0] = regs[rpn.RegRIP]
	return 1, 1, true
}

func (o stackOS) NameFrames(space int, kernel bool, pcs []uint64, exact uint64) []probe.Frame {
	out := make([]probe.Frame, len(pcs))
	for i, pc := range pcs {
		out[i] = probe.Frame{Address: probe.Hex(pc), Function: "f"}
	}
	return out
}

// processOS: one module, the fake's code, always loaded.
type processOS struct{ t *Target }

func (o processOS) Kernel() bool { return o.t.Kernel }

func (o processOS) Check(m *rpn.Module) string {
	switch {
	case o.t.Kernel && m.ModType != rpn.ModKernel:
		return "the fake target is a kernel"
	case !o.t.Kernel && m.ModType != rpn.ModUser:
		return "the fake target is a process"
	}
	return ""
}

func (o processOS) Resolve(space int, name string, modtype rpn.ModType) (*engine.Loaded, bool, error) {
	known := name == o.t.module
	for _, n := range o.t.Names {
		known = known || n == name
	}
	if name == o.t.ModName && o.t.ModLoad != nil {
		n := o.t.ModLoad()
		if n == 0 {
			return nil, false, nil
		}
		lo, hi := o.t.ModExec[0], o.t.ModExec[1]
		return &engine.Loaded{Key: name, Ident: fmt.Sprintf("load %d", n), Symbols: o.t.syms, Exec: func(a uint64) bool { return a >= lo && a < hi }}, true, nil
	}
	if !known {
		return nil, false, nil
	}
	code := o.t.regions[0]
	lo, hi := code.Base, code.Base+uint64(len(code.Data))
	return &engine.Loaded{Key: name, Symbols: o.t.syms, Exec: func(a uint64) bool { return a >= lo && a < hi }, Entries: o.t.Entries}, true, nil
}

func (o processOS) Rendezvous(space int) []uint64 { return o.t.RendezvousAt }

// PendingReason: ModName's probes wait for its load.
func (o processOS) PendingReason(space int, name string, unloaded bool) string {
	if name != o.t.ModName {
		return ""
	}
	if unloaded {
		return name + " was unloaded"
	}
	return name + " is not loaded"
}

func (o processOS) Writable(space int, addr uint64) bool {
	o.t.mu.Lock()
	defer o.t.mu.Unlock()
	r, _, ok := o.t.region(addr, 1)
	return ok && r.Writable
}

func (o processOS) Sys(tid int, regs *engine.Regs, v rpn.SysValue) (uint64, bool) {
	switch v {
	case rpn.SysPID:
		return Pid, true
	case rpn.SysTID:
		return uint64(tid), true
	case rpn.SysProcID:
		return uint64(tid), true
	}
	return 0, false
}

func (o processOS) UserReg(tid int, regs *engine.Regs, r rpn.Reg) (uint64, bool) {
	return regs[r], r < rpn.RegCR0
}

var _ engine.Target = (*Target)(nil)

func putU64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

func u64(b []byte) uint64 {
	var v uint64
	for i := range 8 {
		v |= uint64(b[i]) << (8 * i)
	}
	return v
}
