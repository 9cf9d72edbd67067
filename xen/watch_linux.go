package xen

import (
	"fmt"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/rpn"
)

// Watch probes on a PV guest kernel: data breakpoints in the vCPUs' own
// debug registers, the ones the backend already uses for its
// debug-register breakpoints (code probes, breakpoints = auto or dr). The
// four registers are shared: a watch takes a register no code breakpoint
// holds (the engine names those when it refuses a watch: DebugRegs), and
// a code probe inserted later takes a free one or, in auto mode, falls
// back to int3 as it did for the fifth code address. A watch never falls
// back to anything. DR7 gets the register's R/W (01 writes, 11 reads and
// writes) and LEN bits with its global enable, written into every vCPU's
// context before the domain runs (syncDR), as for code breakpoints.
//
// A hit is a #DB trap taken in guest kernel mode: Xen pauses the debugged
// domain and raises VIRQ_DEBUGGER as for a code breakpoint, the vCPU's
// %dr6 names the register, and rip is the next instruction (a trap, after
// the access). stopAll takes the register's bit out of %dr6 and queues the
// stop; WatchHit hands the bits over. Only the guest kernel's accesses are
// seen: a kernel address is never accessed in user mode (the engine
// refuses a user address on a kernel target: Xen would hand a user-mode
// #DB to the guest, which would signal the process), and an access Xen
// makes itself on the guest's behalf (copying to guest memory in a
// hypercall) raises #DB in Xen's context, which Xen ignores. A guest
// kernel's own use of its debug registers (perf hardware breakpoints,
// kgdb) is lost while gprobes holds them, for watches as for code
// breakpoints.

var _ engine.Watcher = (*Target)(nil)

// DebugRegs names the registers the debug-register breakpoints of code
// probes hold.
func (t *Target) DebugRegs() [engine.NumWatch]string {
	var out [engine.NumWatch]string
	hint := false
	for i, a := range t.dr {
		if a == 0 {
			continue
		}
		out[i] = fmt.Sprintf("debug-register breakpoint of the code probe at %#x", a)
		if !hint && t.opts.Breakpoints == BreakAuto {
			out[i] += " (GPROBES_XEN_BREAKPOINTS=int3 puts code probes on int3 bytes and leaves the registers to watches)"
			hint = true
		}
	}
	return out
}

// SetWatch puts a watch into debug register slot; every vCPU gets it
// before the domain runs again.
func (t *Target) SetWatch(space, slot int, w engine.Watch) error {
	if slot < 0 || slot >= engine.NumWatch {
		return fmt.Errorf("no debug register DR%d", slot)
	}
	if a := t.dr[slot]; a != 0 {
		return fmt.Errorf("DR%d holds the breakpoint of the code probe at %#x", slot, a)
	}
	old := t.wdr[slot]
	t.wdr[slot] = &w
	if err := t.writeJournal(); err != nil {
		t.wdr[slot] = old
		return err
	}
	return nil
}

// ClearWatch takes a watch out of its register (every vCPU, before the
// domain runs again).
func (t *Target) ClearWatch(space, slot int) error {
	if slot < 0 || slot >= engine.NumWatch || t.wdr[slot] == nil {
		return nil
	}
	t.wdr[slot] = nil
	return t.writeJournal()
}

// WatchThread: vCPUs are all there from the start.
func (t *Target) WatchThread(tid, space int) error { return nil }

// WatchHit hands over the watch registers a vCPU's last stop found in its
// %dr6; the stop is something else too when it was also a step or a code
// breakpoint.
func (t *Target) WatchHit(tid int) (uint8, bool, error) {
	v, err := t.vcpu(tid)
	if err != nil {
		return 0, false, err
	}
	fired := t.wfired[v]
	t.wfired[v] = 0
	return fired, t.why[v] != stopWatch, nil
}

// hwSlot says which hardware register holds the watch of each engine
// slot: the registers holding watches, in order, take the w watches
// first, then the rw ones. A CPU sets the %dr6 bit of every register whose
// condition an access met; QEMU's emulation of x86 (TCG, as in the lab)
// sets only the first one's that matched, in register order, so a write
// into bytes a w and an rw watch both cover must meet the w one first:
// the engine then counts the covering rw watch too (engine/watch.go,
// watchImplied). Code breakpoints keep their registers.
func (t *Target) hwSlot() (hw [engine.NumWatch]int) {
	var used []int
	for i, w := range t.wdr {
		hw[i] = i
		if w != nil {
			used = append(used, i)
		}
	}
	k := 0
	for _, mode := range []rpn.WatchMode{rpn.WatchWrite, rpn.WatchReadWrite} {
		for _, i := range used {
			if t.wdr[i].Mode == mode {
				hw[i] = used[k]
				k++
			}
		}
	}
	return hw
}

// takeWatchBits moves the watch bits of a stopped vCPU's %dr6 to wfired
// (as engine slots), returning %dr6 without them.
func (t *Target) takeWatchBits(v int, ctx *Context, dr6 uint64) uint64 {
	hw := t.hwSlot()
	var fired uint8
	var bits uint64
	for i, w := range t.wdr {
		if w != nil && dr6&(1<<hw[i]) != 0 {
			fired |= 1 << i
			bits |= 1 << hw[i]
		}
	}
	t.wfired[v] = fired
	if bits != 0 {
		dr6 &^= bits
		ctx.SetDebugReg(6, dr6)
		t.dirty[v] = true
	}
	return dr6
}

// drWant is what the four address registers and DR7's slot bits should
// hold: code breakpoints (instruction breakpoints: R/W and LEN 0) and
// watches, each with its global enable.
func (t *Target) drWant() (addr [4]uint64, dr7 uint64) {
	hw := t.hwSlot()
	for i := range addr {
		switch w := t.wdr[i]; {
		case w != nil:
			h := hw[i]
			addr[h] = w.Addr
			dr7 |= 2<<(2*h) | w.DR7(h)
		case t.dr[i] != 0:
			addr[i] = t.dr[i]
			dr7 |= 2 << (2 * i)
		}
	}
	return addr, dr7
}

// journalDR is the registers as the journal keeps them: every address in
// use, code breakpoint or watch (recovery clears them all).
func (t *Target) journalDR() [4]uint64 {
	a, _ := t.drWant()
	return a
}
