package linuxkernel

import (
	"encoding/binary"
	"fmt"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/symbols"
)

// kernelInfo is what the target knows of the guest Linux: where the
// current task is and the layouts of task_struct and pt_regs.
//
// The current task of a vCPU is the per-CPU variable current_task: its
// symbol is an offset in the per-CPU area, whose base is the vCPU's
// gs_base while it runs kernel code (a probe hit in the kernel). The
// user-mode registers of the task are the struct pt_regs at the top of its
// kernel stack: task->stack + THREAD_SIZE - sizeof(struct pt_regs) on
// x86_64, where THREAD_SIZE is sizeof(union thread_union) (16 KiB without
// KASAN).
type kernelInfo struct {
	mem        Memory
	why        string // empty when everything below is known
	curOff     uint64
	pid, tgid  field
	stack      field
	threadSize uint64
	ptSize     uint64
	pt         map[rpn.Reg]uint64 // offsets in pt_regs
}

type field struct{ off, size uint64 }

// ptRegs names the fields of struct pt_regs (x86_64) for each register.
var ptRegs = map[rpn.Reg]string{
	rpn.RegRAX: "ax", rpn.RegRBX: "bx", rpn.RegRCX: "cx", rpn.RegRDX: "dx", rpn.RegRSI: "si", rpn.RegRDI: "di",
	rpn.RegRBP: "bp", rpn.RegRSP: "sp", rpn.RegR8: "r8", rpn.RegR9: "r9", rpn.RegR10: "r10", rpn.RegR11: "r11",
	rpn.RegR12: "r12", rpn.RegR13: "r13", rpn.RegR14: "r14", rpn.RegR15: "r15", rpn.RegRIP: "ip",
	rpn.RegRFLAGS: "flags", rpn.RegCS: "cs", rpn.RegSS: "ss",
}

func newKernelInfo(mem Memory, s *symbols.Set) *kernelInfo {
	k := &kernelInfo{mem: mem, pt: map[rpn.Reg]uint64{}}
	if s == nil {
		k.why = "no symbols for the kernel: give System.map (or a kallsyms copy) and a vmlinux with BTF or DWARF with --symbols"
		return k
	}
	cur, err := s.Lookup("current_task")
	if err != nil {
		k.why = fmt.Sprintf("no current_task symbol (%v): give System.map or a kallsyms copy with --symbols", err)
		return k
	}
	k.curOff = cur.Addr
	get := func(f *field, typ, name string) bool {
		off, size, err := s.Field(typ, name)
		if err != nil {
			k.why = fmt.Sprintf("no type information for %s.%s (%v): give a vmlinux with BTF (/sys/kernel/btf/vmlinux, or the .BTF section of vmlinux) or DWARF with --symbols", typ, name, err)
			return false
		}
		f.off, f.size = off, size
		return true
	}
	if !get(&k.pid, "struct task_struct", "pid") || !get(&k.tgid, "struct task_struct", "tgid") || !get(&k.stack, "struct task_struct", "stack") {
		return k
	}
	k.threadSize = 16 << 10
	if n, err := s.Sizeof("union thread_union"); err == nil && n > 0 {
		k.threadSize = n
	}
	if n, err := s.Sizeof("struct pt_regs"); err == nil {
		k.ptSize = n
		for r, name := range ptRegs {
			if off, _, err := s.Field("struct pt_regs", name); err == nil {
				k.pt[r] = off
			}
		}
	}
	return k
}

// missing says why the current task cannot be known, or "".
func (k *kernelInfo) missing() string {
	if k == nil {
		return "no symbols for the kernel: give System.map and a vmlinux with BTF with --symbols"
	}
	return k.why
}

func (k *kernelInfo) read(addr, size uint64) (uint64, bool) {
	var b [8]byte
	if size == 0 || size > 8 {
		size = 8
	}
	if k.mem.ReadMem(addr, b[:size]) != nil {
		return 0, false
	}
	return binary.LittleEndian.Uint64(b[:]), true
}

// current is the address of the current task of the vCPU at a hit.
func (k *kernelInfo) current(regs *engine.Regs) (uint64, bool) {
	if k == nil || k.why != "" {
		return 0, false
	}
	gs := regs[rpn.RegGSBase]
	if gs == 0 {
		return 0, false
	}
	return k.read(gs+k.curOff, 8)
}

func (k *kernelInfo) taskField(regs *engine.Regs, name string) (uint64, bool) {
	task, ok := k.current(regs)
	if !ok {
		return 0, false
	}
	f := k.pid
	if name == "tgid" {
		f = k.tgid
	}
	return k.read(task+f.off, f.size)
}

// userReg reads a user-mode register of the current task from the
// pt_regs at the top of its kernel stack.
func (k *kernelInfo) userReg(regs *engine.Regs, r rpn.Reg) (uint64, bool) {
	off, ok := k.pt[r]
	if !ok || k.ptSize == 0 {
		return 0, false
	}
	base, ok := k.ptRegsAddr(regs)
	if !ok {
		return 0, false
	}
	return k.read(base+off, 8)
}

// userFlags are the rflags bits a user-mode task may change itself, the
// bits ptrace lets a debugger write (arch/x86/kernel/ptrace.c FLAG_MASK):
// CF PF AF ZF SF TF DF OF RF AC. pop u,rflags writes these and keeps the
// others (IOPL, IF, VM, NT...), which the kernel would load on the way
// back to user mode.
const userFlags = 1<<0 | 1<<2 | 1<<4 | 1<<6 | 1<<7 | 1<<8 | 1<<10 | 1<<11 | 1<<16 | 1<<18

// ptRegsAddr is the address of the current task's user-mode pt_regs.
func (k *kernelInfo) ptRegsAddr(regs *engine.Regs) (uint64, bool) {
	if k == nil || k.ptSize == 0 {
		return 0, false
	}
	task, ok := k.current(regs)
	if !ok {
		return 0, false
	}
	stack, ok := k.read(task+k.stack.off, 8)
	if !ok || stack == 0 {
		return 0, false
	}
	return stack + k.threadSize - k.ptSize, true
}

// setUserReg writes a user-mode register of the current task (pop u) into
// the pt_regs at the top of its kernel stack, which the kernel loads on
// its way back to user mode (sysret or iret). Only a frame saved from user
// mode (cs with RPL 3) is written: a kernel thread has no user registers.
func (k *kernelInfo) setUserReg(mem MemoryWriter, regs *engine.Regs, r rpn.Reg, v uint64) bool {
	off, ok := k.pt[r]
	if !ok || mem == nil {
		return false
	}
	csOff, ok := k.pt[rpn.RegCS]
	if !ok {
		return false
	}
	base, ok := k.ptRegsAddr(regs)
	if !ok {
		return false
	}
	cs, ok := k.read(base+csOff, 8)
	if !ok || cs&3 != 3 {
		return false
	}
	if r == rpn.RegRFLAGS {
		old, ok := k.read(base+off, 8)
		if !ok {
			return false
		}
		v = old&^userFlags | v&userFlags
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return mem.WriteMem(base+off, b[:]) == nil
}
