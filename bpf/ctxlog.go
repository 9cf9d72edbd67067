package bpf

import (
	"github.com/cilium/ebpf/asm"

	"github.com/gprobes/gprobes/rpn"
)

// log mrf of a tracepoint's array field, the common way to log a
// fixed-size array of the event (testdata/examples/fork_kill_tp.dpdf's
// comm):
//
//	push d,N
//	push field,ARRAY
//	log mrf
//
// push field of an array pushes its address in the event's record, and
// log mrf reads memory through bpf_probe_read_kernel, a helper call that
// costs more than the rest of such a program (36-39 ns a hit on this
// machine's 6.18: BENCHMARKS.md). When the three instructions are one run
// (neither of the last two a jump target), N is a constant within the
// array and the program runs straight (not in loop mode, whose callback
// has no context), log mrf copies the N bytes with loads from the context
// itself (the kernel allows them: tp_prog_is_valid_access), from the
// context pointer the prologue keeps on the stack. The pushes still run:
// the RPN stack is as the machine leaves it.

// fpCtx is the stack slot of the context pointer (main function).
const fpCtx = -144

// findCtxLogs finds the log mrf instructions logCtx compiles.
func (c *compiler) findCtxLogs() {
	if c.loopMode || c.o.Kind != KindTracepoint || c.o.Format == nil {
		return
	}
	target := map[int]bool{}
	for i := 0; i < c.n; i++ {
		if in := c.insn(i); in.Op.IsJump() || in.Op == rpn.OpCall {
			target[int(in.C)-c.first] = true
		}
	}
	for i := 2; i < c.n; i++ {
		in, f, d := c.insn(i), c.insn(i-1), c.insn(i-2)
		if in.Op != rpn.OpLogMrf || f.Op != rpn.OpPushField || d.Op != rpn.OpPushD || target[i] || target[i-1] {
			continue
		}
		k, ok := c.fieldAt[f.B]
		if !ok {
			continue
		}
		fd := c.fields[k]
		n := int(d.Imm)
		if fd.Kind != FieldArray || n <= 0 || n > fd.Size || n > 256 || fd.Offset < 8 || fd.Offset+n > maxCtxLoad {
			continue
		}
		if c.ctxLog == nil {
			c.ctxLog = map[int]*Field{}
		}
		c.ctxLog[i] = fd
	}
}

// logCtx compiles one of them: n bytes of fd from the context to the log,
// in the widest loads the offsets' alignment allows, then the length cut
// to logmax (truncated), as log mrf does.
func (c *compiler) logCtx(fd *Field, n int) {
	r1, r2, r3 := asm.R1, asm.R2, asm.R3
	c.adjust(-2)
	c.emit(
		asm.LoadMem(r1, asm.R10, fpCtx, asm.DWord),
		asm.Mov.Reg(r3, rScratch), asm.Add.Reg(r3, rLogN),
	)
	for j := 0; j < n; {
		off := fd.Offset + j
		sz, w := asm.Byte, 1
		switch {
		case off%8 == 0 && n-j >= 8:
			sz, w = asm.DWord, 8
		case off%4 == 0 && n-j >= 4:
			sz, w = asm.Word, 4
		case off%2 == 0 && n-j >= 2:
			sz, w = asm.Half, 2
		}
		c.emit(asm.LoadMem(r2, r1, int16(off), sz), asm.StoreMem(r3, int16(offLog+j), r2, sz))
		j += w
	}
	c.emit(asm.Add.Imm(rLogN, int32(n)))
	c.clampLog(true)
}
