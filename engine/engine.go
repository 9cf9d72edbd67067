package engine

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/gprobes/gprobes/internal/shm"
	pb "github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/x86"
)

// Options configure an engine.
type Options struct {
	Sink    Sink
	DumpDir string      // where exit 3 writes core dumps
	GV      []uint64    // the global variables, shared by every engine of a daemon
	GVLock  sync.Locker // guards GV across engines (nil: none needed)
	// OnGone is called (on the loop goroutine) when the target has no
	// thread left.
	OnGone func(reason string)
	// OnExit is called (on the loop goroutine) when an address space
	// ends, with how and its shell-style status.
	OnExit func(space int, how string, code int)
	// Warn receives problems that concern no single command (a step the
	// engine could not fix up); nil drops them.
	Warn func(msg string)
	// Route is RouteAuto (jump pads where safe) or RouteInt3.
	Route string
	// RingSize is the bytes of each process's ring of jump-pad records
	// (0: pad.DefaultRingSize; a power of two, pad.MinRingSize to
	// pad.MaxRingSize)
	RingSize int
	// GVMem is the shared memory behind GV (shm.Mem.Words), so that
	// jump pads share the global variables with every other target: nil
	// when GV is nil (the engine makes its own) or plain memory (then
	// no pads).
	GVMem *shm.Mem
}

// Engine drives one Target.
type Engine struct {
	opts    Options
	sw      *switchMem // the modules' switches (switch.go)
	tgt     Target
	os      OS // tgt.OS()
	ab      abilities
	cmds    chan func()
	done    chan struct{}
	err     error
	gone    string
	spaces  map[int]*space
	threads map[int]*thread
	book    *pb.Book // the modules and their logical probes (module.go)
	gv      []uint64
	gvLock  sync.Locker
	gvShm   *shm.Mem
	js      *jumpShared
	watch   watchBooks // the debug registers of watch probes (watch.go)
	// commitMu orders the Sink's calls from the loop and from the
	// drain of the jump pads' rings
	commitMu sync.Mutex
	closing  bool
	// events a target reported while the engine stopped a thread for its
	// own purposes: handled before waiting for new ones
	pendingEvents []Event
	held          atomic.Bool // the target is held stopped until Go
	pid           int         // the first address space: the process started or attached
	detachedTid   map[int]bool
	goneCh        chan struct{}
	ended         chan struct{} // goneCh or done, whichever first
	// cur is the thread whose stop the engine is handling (0: none, or a
	// signal stop): it is stopped until handle resumes it
	cur int
}

// The life of an engine: Start (the target is held stopped), Insert,
// Release (it runs), then Ended and EndReason while it runs, and Close
// (every probe out, the target let go, the last look at variables and
// probes). Query, Vars and Modules answer throughout, until Close.

// Ended is closed when the target has ended (its last thread is gone) or
// the engine stopped (Close, or a target that failed). The engine still
// answers Query and Vars after the target ended, until Close.
func (e *Engine) Ended() <-chan struct{} { return e.ended }

// Pid is the process the engine started or attached to.
func (e *Engine) Pid() int { return e.pid }

type nopLock struct{}

func (nopLock) Lock()   {}
func (nopLock) Unlock() {}

// Start runs a new engine. open runs on the engine's locked OS thread and
// returns the target (it starts or attaches to the process there, as
// ptrace requires).
func Start(open func() (Target, error), opts Options) (*Engine, error) {
	e := &Engine{opts: opts, cmds: make(chan func(), 16), done: make(chan struct{}), goneCh: make(chan struct{}), ended: make(chan struct{}), detachedTid: map[int]bool{},
		spaces: map[int]*space{}, threads: map[int]*thread{}, gv: opts.GV, gvLock: opts.GVLock}
	e.book = pb.NewBook(mech{e})
	e.js = &jumpShared{regions: map[*region]bool{}, threads: map[int][2]int{}, exited: map[int]exitedThread{}, stop: make(chan struct{}), done: make(chan struct{})}
	if e.gv == nil {
		if m, err := shm.Create("gprobes-gv", rpn.MaxGVars*8); err == nil {
			e.gvShm = m
			e.gv = m.Words(0, rpn.MaxGVars)
		} else {
			e.gv = make([]uint64, rpn.MaxGVars)
		}
	} else if opts.GVMem != nil {
		e.gvShm = opts.GVMem
	}
	if e.gvLock == nil {
		e.gvLock = nopLock{}
	}
	if runtime.GOMAXPROCS(0) < 2 {
		// Pinned to one CPU, Go runs with one P; the loop's thread, blocked
		// in wait4 between hits, then has its P taken and must get one back
		// on every hit. Two Ps cost nothing and saved 1.2-1.6 us a hit
		// (17.9 -> 16.8 us, scripts/bench-process pinned).
		runtime.GOMAXPROCS(2)
	}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the target's thread, for good: never unlocked
		tgt, err := open()
		if err != nil {
			started <- err
			close(e.done)
			return
		}
		e.tgt = tgt
		e.os = tgt.OS()
		e.ab = findAbilities(tgt, e.os)
		if e.ab.ownerAware != nil {
			e.ab.ownerAware.SetOwner(owner{e})
		}
		if e.ab.warner != nil {
			e.ab.warner.SetWarn(e.warn)
		}
		if sps := tgt.Spaces(); len(sps) > 0 {
			e.pid = sps[0]
		}
		for _, sp := range tgt.Spaces() {
			e.newSpace(sp)
			for _, tid := range tgt.Threads(sp) {
				if tgt.IsStopped(tid) {
					e.thread(tid, sp).held = true
				}
			}
		}
		e.held.Store(true)
		started <- nil
		e.loop()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	go func() {
		select {
		case <-e.goneCh:
		case <-e.done:
		}
		close(e.ended)
	}()
	return e, nil
}

// WithTarget runs f with the target on the engine's loop, where every
// Target method must run (to give a guest target more symbols, say).
func (e *Engine) WithTarget(f func(Target) error) error {
	var err error
	if derr := e.do(func() { err = f(e.tgt) }); derr != nil {
		return derr
	}
	return err
}

// Describe is what the target's OS says it is (Describer), or "".
func (e *Engine) Describe() string {
	if e.ab.describer != nil {
		return e.ab.describer.Describe()
	}
	return ""
}

// Release lets the target run: until then it is held stopped where Start
// left it (after exec, or where it was attached), so probes can go in
// first.
func (e *Engine) Release() error {
	return e.do(func() {
		for _, th := range e.threads {
			if th.held {
				th.held = false
				e.fail(e.tgt.Resume(th.tid, 0), "let thread %d go", th.tid)
			}
		}
		e.held.Store(false)
	})
}

// do runs f on the loop goroutine and waits for it.
func (e *Engine) do(f func()) error {
	ran := make(chan struct{})
	select {
	case e.cmds <- func() { f(); close(ran) }:
	case <-e.done:
		return errors.New("engine: stopped")
	}
	if !e.held.Load() {
		e.tgt.Kick()
	}
	select {
	case <-ran:
		return nil
	case <-e.done:
		select {
		case <-ran:
			return nil
		default:
		}
		return errors.New("engine: stopped")
	}
}

// EndReason says why the target ended ("" while it runs).
func (e *Engine) EndReason() string {
	select {
	case <-e.goneCh:
		var g string
		if e.do(func() { g = e.gone }) != nil {
			// the loop has ended (after a failed wait): what it wrote
			// is read safely once done is closed
			return e.gone
		}
		return g
	default:
	}
	select {
	case <-e.done:
		return "engine stopped"
	default:
		return ""
	}
}

func (e *Engine) loop() {
	defer func() {
		// what the target has of its own goes before Close returns
		if c := e.ab.closer; c != nil {
			c.CloseTarget()
		}
		close(e.done)
	}()
	for {
		// commands first: they may change breakpoints before the next hit
		if e.closing {
			return
		}
		if len(e.pendingEvents) > 0 {
			ev := e.pendingEvents[0]
			e.pendingEvents = e.pendingEvents[1:]
			e.handle(ev)
			continue
		}
		if e.held.Load() {
			// nothing runs until Go: serve commands only
			f := <-e.cmds
			f()
			continue
		}
		ev, err := e.tgt.Wait()
		if errors.Is(err, ErrNoTracees) {
			e.targetGone("no thread left")
			// serve commands (queries) until closed
			for !e.closing {
				f, ok := <-e.cmds
				if !ok {
					return
				}
				f()
			}
			return
		}
		if err != nil {
			e.err = err
			// the target may live on with the probes' code in it (a
			// hypervisor call refused once): take out what can be taken
			// out, as a close does, before giving it up
			if derr := e.detachAll(); derr != nil {
				e.warn("the wait failed (" + err.Error() + "); taking the probes out: " + derr.Error())
			}
			e.targetGone(err.Error())
			return
		}
		e.handle(ev)
	}
}

func (e *Engine) targetGone(reason string) {
	if e.gone != "" {
		return
	}
	e.gone = reason
	close(e.goneCh)
	for _, p := range e.book.Probes() {
		if p.State == StateActive || p.State == StatePending {
			p.State, p.Reason = StateGone, reason
		}
	}
	if e.opts.OnGone != nil {
		e.opts.OnGone(reason)
	}
}

// handle dispatches one event.
func (e *Engine) handle(ev Event) {
	if ev.Kind != EvSignal && ev.Kind != EvThreadExit && ev.Kind != EvSpaceExit {
		e.cur = ev.Tid
		defer func() { e.cur = 0 }()
	}
	switch ev.Kind {
	case EvTrap:
		th := e.thread(ev.Tid, ev.Space)
		if e.watchTrap(th) {
			return
		}
		if th.step != nil {
			e.stepDone(th)
			return
		}
		e.trap(th)
	case EvSignal:
		th := e.thread(ev.Tid, ev.Space)
		if th.step == nil && e.padSignal(th, ev) {
			return
		}
		if th.step != nil {
			if ev.Async && e.inert(ev) {
				// delivered or not, nothing comes of it: the step goes on
				e.resume(ev.Tid, 0)
				return
			}
			if ev.Async && th.heldSigs < maxHeldSigs && e.holdSignal(th) {
				// the instruction has not run yet: step it, then let
				// the signal in
				e.resume(ev.Tid, 0)
				return
			}
			e.stepFault(th, ev.Sig)
			return
		}
		e.resume(ev.Tid, ev.Sig)
	case EvKick:
		if ev.Tid == 0 {
			// a kick that stopped no thread: the commands only
			e.runCommands()
			return
		}
		e.resumeQuiet(ev.Tid)
	case EvSyscall:
		e.padSyscall(e.thread(ev.Tid, ev.Space))
	case EvNewThread:
		e.thread(ev.Tid, ev.Space)
		e.jumpThread(ev.Tid, ev.Space)
		e.watchThread(ev.Tid, ev.Space)
		e.resume(ev.Tid, 0)
	case EvNewSpace:
		e.forked(ev.Space, ev.Parent)
		e.thread(ev.Tid, ev.Space)
		e.jumpThread(ev.Tid, ev.Space)
		e.resume(ev.Tid, 0)
	case EvExec:
		// the exec'ing thread is the only one left, with the process's
		// id: what the engine knew of the others, and of this one before
		// exec (a step in flight in the old image), is gone with the image
		for tid, th := range e.threads {
			if th.space == ev.Space || tid == ev.Tid {
				delete(e.threads, tid)
				e.jumpThreadGone(tid)
			}
		}
		e.thread(ev.Tid, ev.Space)
		e.execed(ev.Space)
		e.jumpThread(ev.Tid, ev.Space)
		e.resume(ev.Tid, 0)
	case EvThreadExit:
		delete(e.threads, ev.Tid)
		e.padHoldGone(ev.Tid, ev.Space)
		e.jumpThreadGone(ev.Tid)
		e.callsThreadGone(ev.Tid)
	case EvSpaceExit:
		delete(e.threads, ev.Tid)
		e.jumpThreadGone(ev.Tid)
		if e.opts.OnExit != nil {
			e.opts.OnExit(ev.Space, ev.Exit, ev.Code)
		}
		e.spaceExit(ev.Space, ev.Exit)
	}
}

// runCommands runs the commands handed to the loop. It is called while a
// thread is stopped, right before it is resumed: a GDB stub takes requests
// only while the guest is stopped, and on a process a stopped thread is
// what the engine needs for its own work (mapping slots).
func (e *Engine) runCommands() {
	for {
		select {
		case f := <-e.cmds:
			f()
		default:
			return
		}
	}
}

// resume lets a thread go on after the engine handled its stop, first
// running the commands waiting for a stopped target. A command may have
// detached the thread (closed the engine, exit 4): then it stays put.
func (e *Engine) resume(tid, sig int) {
	e.runCommands()
	if e.closing || e.detachedTid[tid] {
		return
	}
	if th := e.threads[tid]; th != nil && th.step != nil && sig == 0 {
		e.fail(e.tgt.Step(tid), "step thread %d", tid)
		return
	}
	e.fail(e.tgt.Resume(tid, sig), "resume thread %d", tid)
	if len(e.cmds) > 0 {
		// a command came after runCommands, and its Kick found the
		// target not running yet (a stub's or a hypervisor's Kick does
		// nothing then): it would wait for the next hit, forever when
		// none comes. Kick now that it runs.
		e.tgt.Kick()
	}
}

// resumeQuiet lets a thread go on after a stop of the engine's own
// making (a kick): stepping again if it was in the middle of an
// out-of-line step, which the stop interrupted before it executed.
func (e *Engine) resumeQuiet(tid int) { e.resume(tid, 0) }

// thread returns the engine's state of a thread, creating it.
func (e *Engine) thread(tid, sp int) *thread {
	th := e.threads[tid]
	if th == nil {
		delete(e.detachedTid, tid) // the id is in use again
		th = &thread{tid: tid, space: sp}
		th.env.e = e
		th.env.th = th
		e.threads[tid] = th
	} else {
		th.space = sp
	}
	return th
}

// Query lists every probe of every module, in insertion order.
func (e *Engine) Query() []ProbeInfo {
	var out []ProbeInfo
	if err := e.do(func() { out = e.book.Query() }); err != nil {
		return nil // stopped: no probe
	}
	return out
}

// Vars returns a copy of a module's local variables and of the global ones
// it uses, resetting them to zero when reset is set.
func (e *Engine) Vars(name string, reset bool) (lv, gv []uint64, err error) {
	if derr := e.do(func() { lv, gv, err = e.book.Vars(name, reset) }); derr != nil {
		return nil, nil, derr
	}
	return lv, gv, err
}

// Modules lists the names of the inserted modules.
func (e *Engine) Modules() []string {
	var out []string
	if err := e.do(func() { out = e.book.Names() }); err != nil {
		return nil // stopped: no module
	}
	return out
}

// Close takes the last look — every module's variables, every probe —
// removes every probe, restores the original code, lets every thread go
// and ends the loop, all in one command: on a target that only a hit can
// stop (gdbsx ignores ^C), one hit ends it instead of one per query. The
// target keeps running. Closing an engine that stopped already returns
// an empty Final.
func (e *Engine) Close() (Final, error) {
	var f Final
	var err error
	if e.do(func() { f, err = e.closeNow() }) != nil {
		return Final{}, nil // already stopped
	}
	<-e.done
	return f, err
}

// closeNow is Close's command, run on the loop: the last look, every
// probe out, every thread let go; the loop ends after it.
func (e *Engine) closeNow() (Final, error) {
	// the states and spaces as they were; the counts and variables
	// once the jump pads are out and their rings drained
	probes := e.probes()
	spaces := make([]int, len(probes))
	for i, p := range probes {
		spaces[i] = len(p.in)
	}
	err := e.detachAll()
	e.stopJump()
	f := e.book.Final()
	for i, p := range probes {
		f.Probes[i].Spaces = spaces[i]
		if p.State == StateActive || p.State == StatePending {
			p.State = StateRemoved
		}
	}
	e.closeJump()
	e.closeSwitches()
	e.closing = true
	return f, err
}

// RemoveClose removes the modules match selects (the probes of minors, or
// all, as Remove does) and, when no module is left, closes the engine as
// Close does, in one command: a target that only a hit or a pause can
// stop (gdbsx ignores ^C) then needs one stop for a whole remove, where
// Modules, a Remove per module, Modules again and Close took one each.
// It returns the probes removed, whether a module matched, and whether
// the engine closed (an engine stopped already is: nothing matches);
// err joins the removes' errors and the close's.
func (e *Engine) RemoveClose(match func(name string) bool, minors []uint16) (n int, found, closed bool, err error) {
	derr := e.do(func() {
		var errs []error
		for _, name := range e.book.Names() {
			if !match(name) {
				continue
			}
			found = true
			k, rerr := e.book.Remove(name, minors)
			n += k
			errs = append(errs, rerr)
		}
		if len(e.book.Names()) == 0 {
			_, cerr := e.closeNow()
			errs = append(errs, cerr)
			closed = true
		}
		err = errors.Join(errs...)
	})
	if derr != nil {
		// stopped already (the target gone): nothing is in it, and
		// it is closed, as Close finds it
		return 0, false, true, nil
	}
	if closed {
		<-e.done
	}
	return n, found, closed, err
}

// detachAll brings every thread to a stop, restores the code, finishes or
// rewinds what was in flight, and detaches. The probes keep their states
// for the last look (Close).
func (e *Engine) detachAll() error {
	var errs []error
	for _, sp := range e.tgt.Spaces() {
		if err := e.detachSpace(sp, 0); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// detachSpace stops every thread of a space, takes the breakpoints out,
// puts threads that are at a breakpoint or in a slot back on the original
// code, and detaches them, delivering sig to the space (SIGSTOP leaves it
// stopped for a debugger).
func (e *Engine) detachSpace(spID int, sig int) error {
	sigOf := map[int][]Event{}
	// threads stopped at an int3 whose trap the engine has not handled:
	// they go back to the original instruction
	trapped := map[int]bool{}
	for _, ev := range e.pendingEvents {
		switch {
		case ev.Kind == EvTrap && ev.Space == spID:
			trapped[ev.Tid] = true
		case ev.Kind == EvSignal && ev.Space == spID:
			// a signal not delivered yet: it goes with the detach
			sigOf[ev.Tid] = append(sigOf[ev.Tid], ev)
		}
	}
	for _, tid := range e.tgt.Threads(spID) {
		evs, err := e.tgt.StopThread(tid)
		if err != nil {
			continue // it exited
		}
		for _, ev := range evs {
			switch {
			case ev.Kind == EvSignal && ev.Tid == tid:
				sigOf[tid] = append(sigOf[tid], ev)
			case ev.Kind == EvTrap && ev.Tid == tid:
				trapped[tid] = true
			}
		}
	}
	// the events of this space are dealt with here
	keep := e.pendingEvents[:0]
	for _, ev := range e.pendingEvents {
		if ev.Space != spID {
			keep = append(keep, ev)
		}
	}
	e.pendingEvents = keep
	sp := e.spaces[spID]
	var errs []error
	// restore the code first, so nothing hits an int3 or enters a pad
	// from now on
	if sp != nil {
		errs = append(errs, e.takeOutPlanted(sp)...)
	}
	for _, tid := range e.tgt.Threads(spID) {
		th := e.threads[tid]
		var r Regs
		if e.tgt.GetRegs(tid, &r) == nil && sp != nil {
			changed := false
			if th != nil && th.step != nil {
				changed = e.detachStep(th, &r, sigOf)
			} else if pc := e.tgt.TrapPC(tid, r[rpn.RegRIP]); trapped[tid] && sp.ours(pc) && pc != r[rpn.RegRIP] {
				// stopped right after an int3 that is gone now
				r[rpn.RegRIP] = pc
				changed = true
			}
			if changed {
				if err := e.tgt.SetRegs(tid, &r); err != nil {
					errs = append(errs, fmt.Errorf("put thread %d back on the original code: %w", tid, err))
				}
			}
		}
	}
	// every thread settled and stopped: what gprobes mapped goes, when
	// no thread can be in it (a thread with a signal to deliver makes no
	// system call)
	if sp != nil {
		e.unmapAreas(sp, sigOf)
	}
	for _, tid := range e.tgt.Threads(spID) {
		// a thread that stopped for something else still has the
		// engine's SIGSTOP pending: take it, or the process would stop
		more, err := e.tgt.DrainKick(tid)
		if err != nil {
			continue // it exited
		}
		var sigs []int
		for _, ev := range sigOf[tid] {
			sigs = append(sigs, ev.Sig)
		}
		sigs = append(sigs, more...)
		s := 0
		if len(sigs) > 0 {
			s = sigs[0]
		}
		// the signal to detach with (SIGSTOP for exit 4) goes to a
		// process's main thread; a guest has no such thread (its space
		// is 0, its vCPUs 1...): every vCPU gets it, and the backend
		// detaches once, staying stopped
		if sig != 0 && (tid == spID || e.os.Kernel()) {
			s = sig
		}
		if err := e.tgt.Detach(tid, s); err != nil {
			errs = append(errs, err)
		}
		delete(e.threads, tid)
		e.detachedTid[tid] = true
	}
	if sp != nil {
		sp.detached = true
	}
	return errors.Join(errs...)
}

// detachStep settles a thread caught in an out-of-line step at detach,
// where its slot must no longer be needed. The stop that caught it says
// how far it got: still at the slot, the displaced instruction has not
// run and goes back to run in place (a rep string instruction part done
// resumes where it is); anywhere else it has run, so the step is finished
// as stepDone would (rip and a call's return address taken back to the
// original code) and its records committed. Rewinding a thread that had
// run its instruction made it run twice: a lock add on a counter counted
// 1-3 too many after remove, SIGTERM or Ctrl-C. It reports
// whether the registers changed.
func (e *Engine) detachStep(th *thread, r *Regs, sigOf map[int][]Event) bool {
	st := th.step
	th.step = nil
	e.unblockSignals(th)
	e.releaseSignals(th)
	if r[rpn.RegRIP] == st.bp.slot {
		r[rpn.RegRIP] = st.bp.addr
		// a fault the instruction raised in the slot is raised again in
		// place, with its own siginfo: delivering this one too would
		// make two
		kept := sigOf[th.tid][:0]
		for _, ev := range sigOf[th.tid] {
			if ev.Async {
				kept = append(kept, ev)
			}
		}
		sigOf[th.tid] = kept
		// the probe ran and its instruction runs next, in place: commit
		e.commitDetaching(st.recs)
		return true
	}
	th.regs = *r
	if err := x86.FixupAfterStep(&st.bp.insn, st.bp.slot, &th.regs, mem{e, th.space}); err != nil {
		e.warn(fmt.Sprintf("detach after the out-of-line step of %#x: %v", st.bp.addr, err))
	}
	*r = th.regs
	e.commitDetaching(st.recs)
	return true
}

// commitDetaching commits the records of a hit settled while its space is
// detached: a dump or a hand-off to a debugger (exit 3, 4) is not taken
// then, and the record says so.
func (e *Engine) commitDetaching(recs []Record) {
	for i := range recs {
		r := &recs[i]
		switch r.Exit {
		case rpn.ExitDump:
			r.Dump = "not taken: the process was being detached"
		case rpn.ExitDebugger:
			r.Debugger = "not handed over: the process was being detached"
		}
		e.commit(r)
	}
}

// Remove takes probes out: all of a module's, or those with the given
// minor codes. The original bytes are restored where no probe is left.
// The module goes with its last probe.
func (e *Engine) Remove(name string, minors []uint16) (n int, err error) {
	if derr := e.do(func() { n, err = e.book.Remove(name, minors) }); derr != nil {
		return 0, derr
	}
	return n, err
}

// sortedSpaces returns the ids of the address spaces in order.
func (e *Engine) sortedSpaces() []int {
	var ids []int
	for id := range e.spaces {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}
