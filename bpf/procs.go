package bpf

import "github.com/cilium/ebpf/asm"

// Hits by process (MapOptions.Procs): the host target's query shows how
// many hits of each probe each process made. At every hit, once its
// switch lets it in (a hit of the probe, counted or skipped), the program
// adds 1 to the entry of its probe and process, an LRU hash keyed by
// probe<<32 | pid (root PID namespace): a lookup and an atomic add, or
// the entry made when the process hits the probe first. ProcsEntries
// bounds the entries: past it the kernel drops the least recently hit
// (a process gone long ago, most likely), whose hits leave the per-process
// table but not the probe's total.

// ProcsEntries is how many (probe, process) pairs the map holds.
const ProcsEntries = 16384

// MapProcs names the map when Options.Maps does not give it.
const MapProcs = "gprobes_procs"

// Slots of the frame for the count (below fpIV's).
const (
	fpProcKey = -144
	fpProcVal = -152
)

// countProcess adds the hit to its process's count (prologue: r9 the
// context, r6 to r8 not yet set).
func (c *compiler) countProcess() {
	if c.o.Maps == nil || c.o.Maps.Procs == nil {
		return
	}
	a := &c.a
	key := func() {
		c.mapRef(asm.R1, MapProcs, c.o.Maps.Procs, false, 0)
		c.emit(asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, fpProcKey))
	}
	c.emit(
		asm.FnGetCurrentPidTgid.Call(),
		asm.RSh.Imm(asm.R0, 32),
		movImm64(asm.R1, uint64(c.o.Probe)<<32),
		asm.Or.Reg(asm.R0, asm.R1),
		asm.StoreMem(asm.R10, fpProcKey, asm.R0, asm.DWord),
	)
	key()
	c.emit(asm.FnMapLookupElem.Call())
	add, done := a.newLabel(), a.newLabel()
	a.jmpImm(asm.JNE, asm.R0, 0, add, false)
	// the process's first hit: its entry, unless another thread of it
	// made it meanwhile (BPF_NOEXIST fails), then add to that one
	c.emit(storeImm64(asm.R10, fpProcVal, 1))
	key()
	c.emit(asm.Mov.Reg(asm.R3, asm.R10), asm.Add.Imm(asm.R3, fpProcVal), asm.Mov.Imm(asm.R4, 1), asm.FnMapUpdateElem.Call())
	a.jmpImm(asm.JEq, asm.R0, 0, done, false)
	key()
	c.emit(asm.FnMapLookupElem.Call())
	a.jmpImm(asm.JEq, asm.R0, 0, done, false)
	a.bind(add)
	c.emit(asm.Mov.Imm(asm.R1, 1), atomicAdd(asm.R0, asm.R1, asm.DWord, 0))
	a.bind(done)
}
