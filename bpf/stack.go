package bpf

import (
	"github.com/cilium/ebpf/asm"

	"github.com/gprobes/gprobes/rpn"
)

// log kstack,N and log ustack,N. The prologue, where the context is at
// hand (rJumps holds it until the registers are copied), takes each stack
// the program may log once with bpf_get_stack, as many frames as its
// largest N, into the scratch value after the log (offStacks): the kernel
// stack with the kernel's unwinder (ORC on x86_64), the user stack with
// BPF_F_USER_STACK, which walks the task's frame pointers only. The
// helper zeroes what it did not fill (and all of it on an error: a
// kernel thread has no user stack), so N words copied to the log are the
// frames and zeros after them, as the machine logs them. A hit takes its
// stacks whether or not its path reaches the log instruction.

// bpfFUserStack is BPF_F_USER_STACK.
const bpfFUserStack = 1 << 8

// getStacks fills the stack areas (prologue, scratch looked up, context
// in rJumps).
func (c *compiler) getStacks() {
	for k, n := range c.stackN {
		if n == 0 {
			continue
		}
		flags := int32(0)
		if k == 1 {
			flags = bpfFUserStack
		}
		c.emit(
			asm.Mov.Reg(asm.R1, rJumps),
			asm.Mov.Reg(asm.R2, rScratch),
			asm.Add.Imm(asm.R2, int32(offStacks(int(c.logmax))+k*stackArea/2)),
			asm.Mov.Imm(asm.R3, int32(n*8)),
			asm.Mov.Imm(asm.R4, flags),
			asm.FnGetStack.Call(),
		)
	}
}

// logStack copies N frames of a stack from its area to the log, then
// cuts the length to logmax as log N does.
func (c *compiler) logStack(user bool, n int) {
	r1, r2, r3 := asm.R1, asm.R2, asm.R3
	k := 0
	if user {
		k = 1
	}
	c.emit(
		asm.Mov.Reg(r2, rScratch), asm.Add.Imm(r2, int32(offStacks(int(c.logmax))+k*stackArea/2)),
		asm.Mov.Reg(r3, rScratch), asm.Add.Reg(r3, rLogN),
	)
	for j := 0; j < n; j++ {
		c.emit(asm.LoadMem(r1, r2, int16(j*8), asm.DWord), asm.StoreMem(r3, int16(offLog+j*8), r1, asm.DWord))
	}
	c.emit(asm.Add.Imm(rLogN, int32(n*8)))
	c.clampLog(true)
}

// autoStackLog is the exception tail's copy of the kernel stack the
// prologue took into the exception record's log (autostacktrace = yes):
// DefaultStackFrames words, fewer when logmax is smaller (logmax/8), the
// log empty before it.
func (c *compiler) autoStackLog() {
	n := min(rpn.DefaultStackFrames, int(c.logmax)/8)
	r1, r2 := asm.R1, asm.R2
	c.emit(asm.Mov.Reg(r2, rScratch), asm.Add.Imm(r2, int32(offStacks(int(c.logmax)))))
	for j := 0; j < n; j++ {
		c.emit(asm.LoadMem(r1, r2, int16(j*8), asm.DWord), asm.StoreMem(rScratch, int16(offLog+j*8), r1, asm.DWord))
	}
	c.emit(asm.Mov.Imm(rLogN, int32(n*8)))
}
