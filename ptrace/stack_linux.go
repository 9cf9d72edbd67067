package ptrace

import (
	"strings"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/unwind"
)

// Stacks of a process (log ustack): unwound by package unwind with the
// CFI of the files mapped executable, read from /proc/PID/maps. The maps
// are kept per process until its exec or exit, and read again when a
// frame's address is in none of them (a library loaded since).

var _ engine.StackUnwinder = processOS{}

// stackMods are the executable file mappings of a process.
func (tg *Target) stackMods(space int, fresh bool) unwind.Modules {
	if tg.stackMaps == nil {
		tg.stackMaps = map[int]unwind.Modules{}
		tg.unwinder = unwind.New()
	}
	if m, ok := tg.stackMaps[space]; ok && !fresh {
		return m
	}
	maps, err := Maps(space)
	if err != nil {
		return nil
	}
	var mods unwind.Modules
	for _, m := range maps {
		if m.Exec() && strings.HasPrefix(m.Path, "/") {
			mods = append(mods, unwind.Mapping{Start: m.Start, End: m.End, Offset: m.Offset, Path: m.Path, Dev: m.Dev, Inode: m.Inode})
		}
	}
	mods.Sort()
	tg.stackMaps[space] = mods
	return mods
}

// stackForget drops a process's maps (exec, exit).
func (tg *Target) stackForget(space int) { delete(tg.stackMaps, space) }

// dwarfRegs are the engine's registers in DWARF's order.
func dwarfRegs(r *engine.Regs) unwind.Regs {
	return unwind.Regs{
		unwind.RAX: r[rpn.RegRAX], unwind.RDX: r[rpn.RegRDX], unwind.RCX: r[rpn.RegRCX], unwind.RBX: r[rpn.RegRBX],
		unwind.RSI: r[rpn.RegRSI], unwind.RDI: r[rpn.RegRDI], unwind.RBP: r[rpn.RegRBP], unwind.RSP: r[rpn.RegRSP],
		8: r[rpn.RegR8], 9: r[rpn.RegR9], 10: r[rpn.RegR10], 11: r[rpn.RegR11],
		12: r[rpn.RegR12], 13: r[rpn.RegR13], 14: r[rpn.RegR14], 15: r[rpn.RegR15],
		unwind.RIP: r[rpn.RegRIP],
	}
}

// Unwind walks a stopped thread's user stack. A process has no kernel
// stack gprobes can read: log kstack is refused (invalid-operand).
func (o processOS) Unwind(space, tid int, regs *engine.Regs, kernel bool, pcs []uint64) (int, uint64, bool) {
	if kernel {
		return 0, 0, false
	}
	tg := o.tg
	mem := func(addr uint64, p []byte) bool { return tg.ReadMem(space, addr, p) == nil }
	mods := tg.stackMods(space, false)
	if tg.unwinder == nil {
		return 0, 0, true // no maps to read: the process is gone
	}
	n, missing, exact := tg.unwinder.Unwind(dwarfRegs(regs), mem, mods, pcs)
	if missing {
		// an address in no mapping known: a library loaded since the
		// maps were read, or code in no file (then read each time)
		n, _, exact = tg.unwinder.Unwind(dwarfRegs(regs), mem, tg.stackMods(space, true), pcs)
	}
	return n, exact, true
}

// NameFrames names frames of a process's stack from the files mapped
// there.
func (o processOS) NameFrames(space int, kernel bool, pcs []uint64, exact uint64) []probe.Frame {
	out := make([]probe.Frame, len(pcs))
	var named []unwind.Frame
	if !kernel && o.tg.unwinder != nil {
		named = o.tg.unwinder.Name(pcs, exact, o.tg.stackMods(space, false))
	}
	for i, pc := range pcs {
		out[i].Address = probe.Hex(pc)
		if i < len(named) {
			out[i].Function, out[i].Offset, out[i].Module = named[i].Function, named[i].Offset, named[i].Module
		}
	}
	return out
}
