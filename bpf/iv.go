package bpf

import (
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gprobes/gprobes/rpn"
)

// Instance variables (docs/kernel.md, "Instance variables"): the
// 8 words a call of a function carries from the probe at its entry to its
// return probe. A call is known by the task, its stack pointer at the
// entry (pointing at the return address) and the function:
//
//	key   {u64 pid_tgid, u64 rsp at the entry, u64 the function's address}
//	value [8]u64
//
// in an LRU hash (Maps.IV, NewIV) shared by the module's probes. The
// entry probe is a kprobe (a fentry program has no stack pointer), whose
// pt_regs hold rsp at the function's first instruction; the kretprobe's
// rsp is the caller's past the return address, 8 above it, which gives
// the same key. Recursion has a key per level, interrupts (another stack)
// and tasks theirs.
//
// While a program runs its instance is in the scratch value (offIV):
// push iv and pop iv are a load and a store there, in straight and loop
// mode alike.
//
//   - IVEntryFirst (the first entry probe of the function with iv): the
//     words start at zero; when the program has run (whatever its end:
//     exit, abort, an exception) they are stored under the key (a call at
//     a key an earlier call never returned from replaces it).
//   - IVEntry (a later entry probe of it): the words are the instance's,
//     as the first left them (zero if there is none), and are stored back.
//   - IVReturn (the function's return probe, when the module has an entry
//     probe with iv on it): the instance is taken out of the map in the
//     prologue, before the switch and the counters (a return probe switched
//     off or skipped still ends its call); the words are its, or zero.
//   - IVNone (any other probe using iv): 8 words of zero of its own.
//
// A call whose return the kernel misses (kretprobe's maxactive) leaves
// its instance in the map until the LRU evicts it.

// IVRole is a probe's part in its function's instances.
type IVRole uint8

const (
	IVNone IVRole = iota
	IVEntryFirst
	IVEntry
	IVReturn
)

// IVOptions are Options.IV.
type IVOptions struct {
	Role IVRole
	// Func is the function's address, part of the key.
	Func uint64
}

// MapIV is the instance map's name in a program compiled without Maps.
const MapIV = "gprobes_iv"

// IVKeySize and IVValueSize are the instance map's key and value sizes;
// IVEntries its size.
const (
	IVKeySize   = 24
	IVValueSize = 64
	IVEntries   = 10240
)

// stack slots of the return probe's prologue (main function)
const (
	fpIVKey = -72  // the key, 24 bytes
	fpIV    = -136 // the words taken out, 64 bytes
)

func (c *compiler) ivMap(dst asm.Register) {
	var m *ebpf.Map
	if c.o.Maps != nil {
		m = c.o.Maps.IV
	}
	c.mapRef(dst, MapIV, m, false, 0)
}

func (c *compiler) ivRole() IVRole {
	if c.o.IV == nil {
		return IVNone
	}
	return c.o.IV.Role
}

// ivReturn is the return probe's prologue part (r9 the context): the
// call's instance out of the map, into fpIV (zero if there is none).
func (c *compiler) ivReturn() {
	a := &c.a
	c.emit(
		asm.FnGetCurrentPidTgid.Call(),
		asm.StoreMem(asm.R10, fpIVKey, asm.R0, asm.DWord),
		asm.LoadMem(asm.R1, rJumps, ptRegs[rpn.RegRSP], asm.DWord),
		asm.Add.Imm(asm.R1, -8),
		asm.StoreMem(asm.R10, fpIVKey+8, asm.R1, asm.DWord),
		movImm64(asm.R1, c.o.IV.Func),
		asm.StoreMem(asm.R10, fpIVKey+16, asm.R1, asm.DWord),
	)
	c.ivMap(asm.R1)
	c.emit(asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, fpIVKey), asm.FnMapLookupElem.Call())
	none, done := a.newLabel(), a.newLabel()
	a.jmpImm(asm.JEq, asm.R0, 0, none, false)
	for k := range 8 {
		c.emit(asm.LoadMem(asm.R1, asm.R0, int16(8*k), asm.DWord), asm.StoreMem(asm.R10, int16(fpIV+8*k), asm.R1, asm.DWord))
	}
	c.ivMap(asm.R1)
	c.emit(asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, fpIVKey), asm.FnMapDeleteElem.Call())
	a.ja(done)
	a.bind(none)
	for k := range 8 {
		c.emit(storeImm64(asm.R10, int16(fpIV+8*k), 0))
	}
	a.bind(done)
}

// ivScratch fills the scratch value's words once it is looked up (r6;
// r9 still the context).
func (c *compiler) ivScratch() {
	a := &c.a
	zero := func() {
		for k := range 8 {
			c.emit(storeImm64(rScratch, int16(offIV+8*k), 0))
		}
	}
	switch c.ivRole() {
	case IVReturn:
		if c.usesIV {
			for k := range 8 {
				c.emit(asm.LoadMem(asm.R1, asm.R10, int16(fpIV+8*k), asm.DWord), asm.StoreMem(rScratch, int16(offIV+8*k), asm.R1, asm.DWord))
			}
		}
	case IVEntryFirst, IVEntry:
		c.emit(
			asm.FnGetCurrentPidTgid.Call(),
			asm.StoreMem(rScratch, offIVKey, asm.R0, asm.DWord),
			asm.LoadMem(asm.R1, rJumps, ptRegs[rpn.RegRSP], asm.DWord),
			asm.StoreMem(rScratch, offIVKey+8, asm.R1, asm.DWord),
			movImm64(asm.R1, c.o.IV.Func),
			asm.StoreMem(rScratch, offIVKey+16, asm.R1, asm.DWord),
		)
		if c.ivRole() == IVEntryFirst {
			zero()
			return
		}
		c.ivMap(asm.R1)
		c.emit(asm.Mov.Reg(asm.R2, rScratch), asm.Add.Imm(asm.R2, offIVKey), asm.FnMapLookupElem.Call())
		none, done := a.newLabel(), a.newLabel()
		a.jmpImm(asm.JEq, asm.R0, 0, none, false)
		for k := range 8 {
			c.emit(asm.LoadMem(asm.R1, asm.R0, int16(8*k), asm.DWord), asm.StoreMem(rScratch, int16(offIV+8*k), asm.R1, asm.DWord))
		}
		a.ja(done)
		a.bind(none)
		zero()
		a.bind(done)
	default:
		if c.usesIV {
			zero()
		}
	}
}

// ivSave is an entry probe's end (lEnd): the words go into the map under
// the call's key.
func (c *compiler) ivSave() {
	c.ivMap(asm.R1)
	c.emit(
		asm.Mov.Reg(asm.R2, rScratch), asm.Add.Imm(asm.R2, offIVKey),
		asm.Mov.Reg(asm.R3, rScratch), asm.Add.Imm(asm.R3, offIV),
		asm.Mov.Imm(asm.R4, 0), // BPF_ANY
		asm.FnMapUpdateElem.Call(),
	)
}
