package linuxkernel

import (
	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/rpn"
)

// Guest is the engine's OS knowledge of a Linux guest kernel seen from
// outside, the same for every backend that reaches one (a GDB stub, the
// Xen hypervisor): the backend gives the facts only it knows.
type Guest struct {
	K      *Kernel
	Target string // the target kind, for messages: "gdb:", "xen:"
	NoIO   string // why the guest's IO space is out of reach; "" when the backend reaches it (engine.PortIO)
	// VCPU is a vCPU thread's index (push procid).
	VCPU func(tid int) int
	// WritableAt says whether the guest may write addr (vfy_rw); nil:
	// readable kernel memory is taken as writable.
	WritableAt func(addr uint64) bool
}

var (
	_ engine.OS              = (*Guest)(nil)
	_ engine.SymbolLoader    = (*Guest)(nil)
	_ engine.UserRegWriter   = (*Guest)(nil)
	_ engine.PendingReasoner = (*Guest)(nil)
	_ engine.Describer       = (*Guest)(nil)
)

// Describe says what the guest kernel is and where its symbols and types
// came from (Kernel.Describe).
func (g *Guest) Describe() string { return g.K.Describe() }

func (g *Guest) Kernel() bool { return true }

func (g *Guest) Check(m *rpn.Module) string { return g.K.Check(m, g.Target, g.NoIO) }

// Resolve: the kernel image is always loaded (Kernel.Resolve).
func (g *Guest) Resolve(space int, name string, modtype rpn.ModType) (*engine.Loaded, bool, error) {
	return g.K.Resolve(name)
}

// Rendezvous: where the guest's module list changes (do_init_module and
// free_module), once a kernel module was asked for; none while only the
// image is probed (it never changes under the engine).
func (g *Guest) Rendezvous(space int) []uint64 { return g.K.rendezvous() }

// PendingReason: a kernel module not loaded, or unloaded.
func (g *Guest) PendingReason(space int, name string, unloaded bool) string {
	return g.K.PendingReason(name, unloaded)
}

func (g *Guest) Writable(space int, addr uint64) bool {
	return g.WritableAt == nil || g.WritableAt(addr)
}

func (g *Guest) Sys(tid int, regs *engine.Regs, v rpn.SysValue) (uint64, bool) {
	if v == rpn.SysProcID {
		return uint64(g.VCPU(tid)), true
	}
	return g.K.Sys(regs, v)
}

func (g *Guest) UserReg(tid int, regs *engine.Regs, r rpn.Reg) (uint64, bool) {
	return g.K.UserReg(regs, r)
}

// SetUserReg writes a user-mode register of the current task (pop u): the
// pt_regs at the top of its kernel stack.
func (g *Guest) SetUserReg(tid int, regs *engine.Regs, r rpn.Reg, v uint64) bool {
	return g.K.SetUserReg(regs, r, v)
}

// AddSymbols loads more symbol files for the kernel (repeated inserts may
// bring their own).
func (g *Guest) AddSymbols(paths []string) error { return g.K.AddSymbols(paths) }
