package xen

import (
	"errors"
	"fmt"
	"time"

	"github.com/gprobes/gprobes/engine"
)

// Wait blocks until a vCPU stops on a breakpoint or a step, Kick is
// called, or the domain goes. Debug traps (debug-register breakpoints,
// steps) and deaths are events; the stops of int3 bytes are found by a
// state check every Poll, the only polling left (see Options).
func (t *Target) Wait() (engine.Event, error) {
	for {
		if len(t.queue) > 0 {
			ev := t.queue[0]
			t.queue = t.queue[1:]
			if ev.Kind == engine.EvTrap {
				t.cur = ev.Tid - 1
			}
			return ev, nil
		}
		if t.dead {
			return engine.Event{}, engine.ErrNoTracees
		}
		t.mu.Lock()
		running := t.run
		t.mu.Unlock()
		if !running {
			// nothing runs: a stop the engine asked for while stopped
			return engine.Event{Kind: engine.EvKick, Tid: 1}, nil
		}
		virq, watch := t.ev.live()
		every := idleCheck
		if len(t.bps) > 0 || !virq {
			every = t.opts.Poll
		} else if !watch {
			every = 250 * time.Millisecond
		}
		fired := t.ev.wait(every)
		t.mu.Lock()
		kicked := t.kicked
		t.mu.Unlock()
		// one hypercall: the domain's state, and after an event every
		// vCPU's context as well when this is the process's only
		// target (the event is then most likely a debug trap of ours,
		// which paused the domain: nothing to pause again). With
		// several, the event may be another domain's: reading the
		// contexts would stop this one's vCPUs for nothing, so they are
		// read once it is found paused (stopPaused)
		info, err := t.look(fired && !kicked && t.ev.alone())
		if !fired {
			// the check and an event may cross: the event's count
			fired = t.ev.pending()
		}
		if err != nil && !errors.Is(err, ErrNoDomain) {
			// the domain may live on (a hypervisor call refused, not
			// a domain gone): the engine takes its probes out of it
			// before it gives the target up
			return engine.Event{}, fmt.Errorf("xen: domain %d: reading its state: %w", t.dom, err)
		}
		if err != nil || info.Dying() {
			t.dead = true
			how := "the domain was destroyed"
			if err == nil {
				how = "the domain shut down"
			}
			if fired {
				how += " (woken by an event)"
			}
			// its frames, the event subscription, the journal: freed now
			t.release(false)
			return engine.Event{Kind: engine.EvSpaceExit, Tid: 1, Exit: how}, nil
		}
		if !fired && !kicked {
			t.stats.checks++
		}
		if !kicked && !info.Paused() {
			clear(t.ctxOK) // read while it ran: of no use
			t.waited = false
			// an int3 event read in the same multicall as a state that
			// still ran: the trap came between the two reads, and has
			// paused the domain since. Xen cleared the event as it told
			// it: dropped, the stop would be no one's and the domain
			// would stay paused (seen once in TestXenNative's int3 phase)
			t.keepInt3 = len(t.int3) > 0
			continue
		}
		if !fired && !kicked && !t.waited && virq && len(t.bps) == 0 && !t.noStatus && !t.more {
			// paused, no int3 event, no int3 byte of ours: a debug
			// trap's pause, whose VIRQ_DEBUGGER this check crossed and
			// which comes in a moment (or someone's xl pause); once
			// more, and a domain still paused without an event is taken
			// all the same
			t.waited = true
			continue
		}
		t.waited = false
		n := len(t.queue)
		if kicked {
			err = t.stopAll()
		} else {
			err = t.stopPaused()
		}
		if err != nil {
			return engine.Event{}, err
		}
		if fired {
			t.stats.byEvent += len(t.queue) - n
		} else if !kicked {
			t.stats.byCheck += len(t.queue) - n
		}
		if kicked {
			t.mu.Lock()
			t.kicked = false
			t.mu.Unlock()
			t.queue = append(t.queue, engine.Event{Kind: engine.EvKick, Tid: 1})
		}
	}
}

// stopAll pauses the domain (synchronously: every vCPU is off the CPUs
// when it returns) and queues a trap event for each vCPU on a breakpoint
// or at the end of a step. Each such vCPU paused the domain once more.
// A stop the engine asks for (a kick, StopThread, the detach); the
// domain's own stops are stopPaused's.
func (t *Target) stopAll() error {
	if err := t.commit(false); err != nil { // what the engine changed
		trace("flush: %v", err)
	}
	if err := t.hv.Pause(t.dom); err != nil {
		return err
	}
	t.pauses++
	t.mu.Lock()
	t.run = false
	t.mu.Unlock()
	// what look read stays: the int3 events it took (cleared in Xen),
	// why the vCPUs of queued stops stopped
	clear(t.ctxOK)
	clear(t.tlb)
	t.more = !t.noStatus // which vCPUs stopped on an int3: gdbsx_domstatus
	if err := t.readStopped(); err != nil {
		return err
	}
	t.classify()
	return nil
}

// stopPaused takes the stops of a domain found paused (by its debug
// traps, as a rule) without pausing it again: each trap paused it, and
// each getvcpucontext waits until its vCPU is off the CPU, after which
// the domain's pause keeps it off. A domain paused by someone else
// (xl pause) with no stop of ours is left alone and waited on.
func (t *Target) stopPaused() error {
	if err := t.readStopped(); err != nil {
		return err
	}
	n, p := len(t.queue), t.pauses
	t.classify()
	if len(t.queue) == n && t.pauses == p {
		clear(t.ctxOK) // not stopped by us: it may run at any time
		clear(t.tlb)
		return nil
	}
	t.mu.Lock()
	t.run = false
	t.mu.Unlock()
	return nil
}

// classify queues a trap event for each vCPU on a breakpoint or at the
// end of a step, from the contexts and int3 events read; each such stop
// paused the domain, a pause to undo when it runs again.
func (t *Target) classify() {
	n := len(t.queue)
	queued := map[int]bool{}
	for _, ev := range t.queue {
		if ev.Kind == engine.EvTrap {
			queued[ev.Tid-1] = true
		}
	}
	for v := 0; v < t.vcpus; v++ {
		// an int3 event is taken once: a detach's look after a stop
		// already handled must not see it again
		int3 := t.int3[v]
		delete(t.int3, v)
		if queued[v] {
			continue // its stop is in the queue already (a detach's look)
		}
		ctx, err := t.context(v)
		if err != nil {
			continue // offline vCPU
		}
		rip, dr6 := ctx.RIP(), ctx.DebugReg(6)
		dr6 = t.takeWatchBits(v, ctx, dr6)
		byteHit := t.bps[rip-1] || t.gone[rip-1]
		switch {
		case t.step[v]:
			delete(t.step, v)
			ctx.SetRFLAGS(ctx.RFLAGS() &^ flagTF)
			ctx.SetDebugReg(6, dr6&^(dr6Step|dr6Hits))
			t.dirty[v] = true
			for o := 0; o < t.vcpus; o++ {
				if o != v { // held for the step: let go with the domain
					t.vcpuOps = append(t.vcpuOps, domCall(domctlGdbsxUnpauseVCPU, t.dom, o))
				}
			}
			t.why[v] = stopStep
		case dr6&dr6Hits != 0 && t.onDR(ctx, rip, dr6):
			ctx.SetDebugReg(6, dr6&^dr6Hits)
			t.dirty[v] = true
			t.why[v] = stopDR
		case byteHit && (int3 || t.noStatus || t.opts.Breakpoints == BreakInt1):
			t.why[v] = stopByte
		case int3:
			// the guest kernel's own int3 (text_poke_bp patching code, a
			// kprobe of its own), which Xen kept from the guest and paused
			// the domain for. Back to the int3: it runs again when we let
			// go, and stops again until the kernel has patched it out.
			ctx.SetRIP(rip - 1)
			t.dirty[v] = true
			t.pauses++
			t.stats.foreign++
			trace("vCPU %d: the guest's own int3 at %#x", v, rip-1)
			continue
		case t.wfired[v] != 0:
			t.why[v] = stopWatch
		default:
			continue
		}
		t.pauses++ // the debug trap's own pause
		t.stats.stops++
		t.queue = append(t.queue, engine.Event{Kind: engine.EvTrap, Tid: v + 1})
	}
	if len(t.queue)-n > 1 {
		t.stats.together++
	}
}

// onDR says whether a vCPU stopped on one of our debug-register
// breakpoints: a B<i> bit of %dr6 for a register holding rip.
func (t *Target) onDR(ctx *Context, rip, dr6 uint64) bool {
	if !t.drGone[rip] && !t.drIn(rip) {
		return false
	}
	for i := 0; i < 4; i++ {
		if dr6&(1<<i) != 0 && ctx.DebugReg(i) == rip {
			return true
		}
	}
	return false
}

func (t *Target) drIn(addr uint64) bool {
	for _, a := range t.dr {
		if a == addr {
			return true
		}
	}
	return false
}

// Kick stops the running domain soon (from any goroutine).
func (t *Target) Kick() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.run || t.dead {
		return false
	}
	t.kicked = true
	if t.ev != nil {
		t.ev.wake()
	}
	return true
}

// Step runs one instruction of a vCPU with the others held. The step's
// #DB raises VIRQ_DEBUGGER.
func (t *Target) Step(tid int) error {
	v, err := t.vcpu(tid)
	if err != nil {
		return err
	}
	ctx, err := t.context(v)
	if err != nil {
		return err
	}
	for o := 0; o < t.vcpus; o++ {
		if o != v {
			if err := t.hv.PauseVCPU(t.dom, o); err != nil {
				return err
			}
		}
	}
	ctx.SetRFLAGS(ctx.RFLAGS() | flagTF)
	t.dirty[v] = true
	t.step[v] = true
	return t.resumeAll()
}

// Resume lets the domain run once every queued stop has been handled.
func (t *Target) Resume(tid, sig int) error {
	if len(t.queue) > 0 {
		return nil // another vCPU's stop is still to handle
	}
	t.dropWritable()
	return t.resumeAll()
}

// resumeAll lets the domain run: the changed contexts written, the
// vCPUs held for a step let go and every pause undone in one hypercall.
func (t *Target) resumeAll() error {
	if err := t.readStopped(); err != nil { // the contexts syncDR compares (read at a stop already)
		return err
	}
	for v := 0; v < t.vcpus; v++ {
		t.syncDR(v)
	}
	clear(t.int3) // the stops they told of are handled
	t.mu.Lock()
	t.run = true
	t.mu.Unlock()
	return t.commit(true)
}

func (t *Target) StopThread(tid int) ([]engine.Event, error) {
	t.mu.Lock()
	running := t.run
	t.mu.Unlock()
	if !running {
		return nil, nil
	}
	if err := t.stopAll(); err != nil {
		return nil, err
	}
	evs := t.queue
	t.queue = nil
	return evs, nil
}

func (t *Target) DrainKick(tid int) ([]int, error) { return nil, nil }

// Detach lets the domain go, out of debugging mode (once). exit 4 (sig
// SIGSTOP) leaves it paused for a debugger.
func (t *Target) Detach(tid, sig int) error {
	if t.detach || t.dead {
		return nil
	}
	t.detach = true
	t.release(sig == engine.SigStop) // stay paused, in debugging mode
	return nil
}

func (t *Target) Threads(space int) []int {
	if t.detach || t.dead {
		return nil
	}
	out := make([]int, t.vcpus)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

func (t *Target) Spaces() []int {
	if t.dead {
		return nil
	}
	return []int{0}
}

func (t *Target) ThreadIndex(tid int) int { return tid - 1 }

func (t *Target) IsStopped(tid int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.run
}
