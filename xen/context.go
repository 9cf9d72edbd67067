package xen

import (
	"encoding/binary"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/rpn"
)

// Context is a vCPU's struct vcpu_guest_context (x86_64 layout of Xen 4.17,
// offsets checked against its public headers).
type Context [ctxSize]byte

const ctxSize = 5168 // struct vcpu_guest_context, x86_64

// Offsets in struct vcpu_guest_context.
const (
	offUserRegs = 520 // struct cpu_user_regs
	offRIP      = 648
	offCS       = 656
	offRFLAGS   = 664
	offRSP      = 672
	offSS       = 680
	offES       = 688
	offDS       = 696
	offFS       = 704
	offGS       = 712
	offCtrlReg  = 4984 // ctrlreg[8]
	offDebugReg = 5048 // debugreg[8]
	offFSBase   = 5144
	offGSKernel = 5152
	offGSUser   = 5160
)

// gprOffsets are the general registers' offsets in cpu_user_regs order.
var gprOffsets = map[rpn.Reg]int{
	rpn.RegR15: 520, rpn.RegR14: 528, rpn.RegR13: 536, rpn.RegR12: 544,
	rpn.RegRBP: 552, rpn.RegRBX: 560, rpn.RegR11: 568, rpn.RegR10: 576,
	rpn.RegR9: 584, rpn.RegR8: 592, rpn.RegRAX: 600, rpn.RegRCX: 608,
	rpn.RegRDX: 616, rpn.RegRSI: 624, rpn.RegRDI: 632,
	rpn.RegRIP: offRIP, rpn.RegRSP: offRSP, rpn.RegRFLAGS: offRFLAGS,
}

func (c *Context) u64(off int) uint64      { return binary.LittleEndian.Uint64(c[off:]) }
func (c *Context) put64(off int, v uint64) { binary.LittleEndian.PutUint64(c[off:], v) }
func (c *Context) u16(off int) uint64      { return uint64(binary.LittleEndian.Uint16(c[off:])) }

// RIP, RFLAGS, CR3 and CR4 of the context.
func (c *Context) RIP() uint64        { return c.u64(offRIP) }
func (c *Context) SetRIP(v uint64)    { c.put64(offRIP, v) }
func (c *Context) RFLAGS() uint64     { return c.u64(offRFLAGS) }
func (c *Context) SetRFLAGS(v uint64) { c.put64(offRFLAGS, v) }
func (c *Context) CR(n int) uint64    { return c.u64(offCtrlReg + 8*n) }

// DebugReg and SetDebugReg: %dr0-%dr7 (4 and 5 unused).
func (c *Context) DebugReg(n int) uint64       { return c.u64(offDebugReg + 8*n) }
func (c *Context) SetDebugReg(n int, v uint64) { c.put64(offDebugReg+8*n, v) }

// Regs fills the engine's registers. A PV kernel runs with the kernel's
// GS base loaded: that is gs_base_kernel at a probe in kernel code.
func (c *Context) Regs(r *engine.Regs) {
	*r = engine.Regs{}
	for reg, off := range gprOffsets {
		r[reg] = c.u64(off)
	}
	r[rpn.RegCS], r[rpn.RegSS] = c.u16(offCS), c.u16(offSS)
	r[rpn.RegDS], r[rpn.RegES] = c.u16(offDS), c.u16(offES)
	r[rpn.RegFS], r[rpn.RegGS] = c.u16(offFS), c.u16(offGS)
	r[rpn.RegFSBase] = c.u64(offFSBase)
	r[rpn.RegGSBase] = c.u64(offGSKernel)
	for i, reg := range []rpn.Reg{rpn.RegCR0, rpn.RegCR2, rpn.RegCR3, rpn.RegCR4} {
		n := []int{0, 2, 3, 4}[i]
		r[reg] = c.CR(n)
	}
}

// SetRegs writes back what a probe or the engine may change: the general
// registers, rip, rflags and the FS/GS bases.
func (c *Context) SetRegs(r *engine.Regs) {
	for reg, off := range gprOffsets {
		c.put64(off, r[reg])
	}
	c.put64(offFSBase, r[rpn.RegFSBase])
	c.put64(offGSKernel, r[rpn.RegGSBase])
}
