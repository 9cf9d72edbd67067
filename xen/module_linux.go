package xen

import "github.com/gprobes/gprobes/engine"

var _ engine.BreakpointForgetter = (*Target)(nil)

// ForgetBreakpoint: the guest unloaded the kernel module whose code held
// a breakpoint at addr, and is about to free that memory. A debug
// register is cleared (it would fire on whatever is mapped there next);
// an int3 byte is dropped from the books and the journal without its
// original byte written back, so that neither gprobes nor a recovery
// writes into memory the guest frees or reuses; its frame's writable
// mapping goes at the next Resume (dropWritable), before the guest frees
// the memory and perhaps makes a page table of it.
func (t *Target) ForgetBreakpoint(space int, addr uint64) error {
	for i, a := range t.dr {
		if a == addr {
			t.dr[i] = 0
			t.drGone[addr] = true
			return t.writeJournal()
		}
	}
	if !t.bps[addr] {
		return nil
	}
	delete(t.bps, addr)
	t.unframe(addr)
	delete(t.orig, addr)
	return t.writeJournal()
}
