package engine

import (
	"sync/atomic"
	"unsafe"

	"github.com/gprobes/gprobes/internal/shm"
	"github.com/gprobes/gprobes/rpn"
)

// Switching (docs/engine.md, "Switching"): enabled = no, enable
// MINOR and disable MINOR in programs, gprobes enable and disable.
//
// A switch belongs to a minor of a module: every probe of the module with
// that minor is on or off together (rpn.SwitchConflict keeps the probes
// of a minor of one file in one state at insert, and a merge replaces a
// minor's probes all at once). The state is one byte per minor, 0 on and
// 1 off, in a block of SwitchBlock bytes per module: byte m of the block
// is minor m, so the address of any minor's switch is known before a
// probe of it is placed (a pad compiled now switches a probe that a
// pending module places later).
//
// The blocks live in one memfd per engine (the switch memory), which
// every probed process image maps beside its region (ensureRegion): a
// pad's enable, an int3 hit's, a gprobes enable from the daemon and the
// pads of every process of the target (a fork child, an exec'd program
// with a region of its own) all read and write the same bytes. A
// target without jump pads (a guest kernel, Xen) uses the same memory
// from gprobes alone.
//
// A probe switched off is no hit at all: its program does not run and
// nothing is counted (hits, skipped), on the int3 route (runProbe) and in
// a pad (its compiled prologue, jit). It is apart from rpn.ProbeState's
// Disabled (max hits, rem), which a switch does not change.

// SwitchBlock is the bytes of a module's switches: one per minor.
const SwitchBlock = 1 << 16

// switchBlocks is how many modules' blocks the switch memory holds at
// once (the regions' local variables serve 32 modules a process image
// too). A module beyond them switches on the int3 route only (its
// block is gprobes' own memory, which no pad reaches).
const switchBlocks = 32

// switchMem is the engine's switch memory.
type switchMem struct {
	mem   *shm.Mem  // nil: none could be made (no pads switch then)
	owner []*Module // by block
}

// switches gives module m its block of switches, all on.
func (e *Engine) switches(m *Module) {
	if m.sw != nil {
		return
	}
	if e.sw == nil {
		e.sw = &switchMem{owner: make([]*Module, switchBlocks)}
		if mem, err := shm.Create("gprobes-switches", switchBlocks*SwitchBlock); err == nil {
			e.sw.mem = mem
		}
	}
	m.swBlock = -1
	if e.sw.mem != nil {
		for i, o := range e.sw.owner {
			if o == nil {
				e.sw.owner[i] = m
				m.swBlock = i
				m.sw = e.sw.mem.Bytes[i*SwitchBlock : (i+1)*SwitchBlock]
				clear(m.sw) // a block used before: every minor on
				return
			}
		}
	}
	w := make([]uint32, SwitchBlock/4) // 4-byte aligned, for switchWord
	m.sw = unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), SwitchBlock)
}

// freeSwitches gives a module's block back (the module is gone).
func (e *Engine) freeSwitches(m *Module) {
	if e.sw != nil && m.swBlock >= 0 && m.swBlock < len(e.sw.owner) && e.sw.owner[m.swBlock] == m {
		e.sw.owner[m.swBlock] = nil
	}
}

// closeSwitches unmaps the switch memory (Close: no pad runs any more).
func (e *Engine) closeSwitches() {
	if e.sw != nil && e.sw.mem != nil {
		for _, m := range e.sw.owner {
			if m != nil {
				m.sw = append([]byte(nil), m.sw...)
				m.swBlock = -1
			}
		}
		e.sw.mem.Close()
		e.sw.mem = nil
	}
}

// switchWord is the aligned 4-byte word that holds minor's byte: pads
// store the byte itself, gprobes changes it with a compare-and-swap of
// its word (Go has no atomic byte).
func switchWord(sw []byte, minor uint16) (*uint32, uint) {
	return (*uint32)(unsafe.Pointer(&sw[minor&^3])), uint(minor&3) * 8
}

// off reports whether minor is switched off in block sw.
func switchedOff(sw []byte, minor uint16) bool {
	w, sh := switchWord(sw, minor)
	return atomic.LoadUint32(w)>>sh&0xff != 0
}

// setSwitch switches minor on or off in block sw.
func setSwitch(sw []byte, minor uint16, on bool) {
	w, sh := switchWord(sw, minor)
	for {
		old := atomic.LoadUint32(w)
		v := old &^ (0xff << sh)
		if !on {
			v |= 1 << sh
		}
		if old == v || atomic.CompareAndSwapUint32(w, old, v) {
			return
		}
	}
}

// off reports whether the probe is switched off.
func (p *eprobe) off() bool {
	return p.mod.sw != nil && switchedOff(p.mod.sw, p.def().Minor)
}

// runProbe runs probe p's program for a hit of thread th, or returns nil
// when the probe is switched off: that is no hit (nothing counted).
func (e *Engine) runProbe(th *thread, inst *instance, p *eprobe) *rpn.Result {
	if p.off() {
		return nil
	}
	th.env.mod = p.mod
	return th.mach.Run(inst.prog, p.Index, &p.st, p.mod.lv, e.gv, &th.env)
}

// Switch is rpn.Switcher: enable and disable of the running probe's
// module.
func (h *hitEnv) Switch(minor uint16, on bool) bool {
	if h.mod == nil || h.mod.sw == nil {
		return false
	}
	setSwitch(h.mod.sw, minor, on)
	return true
}

var _ rpn.Switcher = (*hitEnv)(nil)

// Switch switches a module's probes on or off from outside (gprobes
// enable and disable): those with the given minors, or all of them. It
// returns how many probes that concerns; a minor no probe of the module
// has is an error (ErrNoMinor) and switches nothing (probe.Book.Switch).
func (e *Engine) Switch(name string, minors []uint16, on bool) (n int, err error) {
	if derr := e.do(func() { n, err = e.book.Switch(name, minors, on) }); derr != nil {
		return 0, derr
	}
	return n, err
}

// padSwitches is the address, in a region's process, of module m's
// switch block, for a pad (jit.Layout.Switch), or why there is none.
func (e *Engine) padSwitches(rg *region, m *Module) (uint64, string) {
	if rg.sw == 0 || m.swBlock < 0 {
		return 0, "the switches of the module are not in shared memory"
	}
	return rg.sw + uint64(m.swBlock)*SwitchBlock, ""
}

// mapSwitches maps the switch memory into a space (a new region), using
// stopped thread tid; 0 when there is none.
func (e *Engine) mapSwitches(host JumpHost, spID, tid int) (uint64, error) {
	if e.sw == nil || e.sw.mem == nil {
		return 0, nil
	}
	return host.MapShared(spID, tid, e.sw.mem.FD, uint64(len(e.sw.mem.Bytes)))
}
