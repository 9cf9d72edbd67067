// Package rpntest is what the differential tests of the bytecode's code
// generators share: one generator of random programs that verify, and
// the comparison of what a generated program did with what rpn.Machine
// did over the same values. The machine (package rpn), the jump pads'
// compiler (package jit) and the eBPF compiler (package bpf) are each
// tested against rpn.Machine with it. Only tests import it.
package rpntest

import (
	"encoding/binary"
	"math/rand/v2"

	"github.com/gprobes/gprobes/rpn"
)

// Target is the kind of program a Gen writes: what the code generator
// under test runs and what its harness can predict.
type Target uint8

const (
	// Process: a user module (one in eight a kernel module) for a jump
	// pad in a process: every instruction but those of tracepoint and
	// usdt probes, instance variables and stacks (push r and pop r of
	// any register the pad has, pop mrf, port IO, enable and disable,
	// push procid and push ts).
	Process Target = iota
	// Kernel: a kernel module for the eBPF compiler at a system call's
	// tracepoint: less what the kernel target refuses or the harness
	// cannot predict (pop r/u/mrf, port IO, vfy_rw, push r, push task,
	// push procid and push ts, whose values the machine learns from the
	// record, which an exit 0 does not write); push u reads the system
	// call's arguments.
	Kernel
)

// Gen writes random programs that verify: a sequence of groups of
// instructions, jumps and calls landing only on group starts. A group
// that accesses memory pushes its address (and length, value) itself,
// right before the access: so every address a program touches is one it
// chose from the memory region at Base (or a few unmapped ones),
// whatever the stack held, and the test process's own memory is never
// written. The same Rng and fields write the same program.
type Gen struct {
	Rng    *rand.Rand
	Base   uint64 // the memory region: Pages pages of 4 KiB
	Pages  int
	Target Target
	// Branchy (Kernel): many groups, a third of them jumps, most of them
	// conditional and near.
	Branchy bool
	// Forward (Branchy): jumps forward only, no call or ret: no cycle.
	Forward bool

	arch   rpn.Arch
	kernel bool // a kernel module
	vars   int
	gvars  int
	code   []byte
	starts []int
	jumps  []struct{ pos, group int }
	ngroup int
	cur    int // the group being written
	push   []rpn.Reg
	pop    []rpn.Reg
	minor  uint16 // the probe's (Process)
}

const pageSize = 4096

func (g *Gen) op(op rpn.Opcode) { g.code = append(g.code, byte(op)) }
func (g *Gen) u8(op rpn.Opcode, v uint8) {
	g.code = append(g.code, byte(op), v)
}
func (g *Gen) u16(op rpn.Opcode, v uint16) {
	g.code = binary.LittleEndian.AppendUint16(append(g.code, byte(op)), v)
}
func (g *Gen) u16u16(op rpn.Opcode, a, b uint16) {
	g.code = binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint16(append(g.code, byte(op)), a), b)
}
func (g *Gen) pushD(v uint64) {
	if g.arch == rpn.ArchI386 {
		v &= 0xffffffff
	}
	g.code = binary.LittleEndian.AppendUint64(append(g.code, byte(rpn.OpPushD)), v)
}

// target writes a jump to the start of a random group.
func (g *Gen) target(op rpn.Opcode) {
	g.targetTo(op, g.Rng.IntN(g.ngroup+1))
}

// targetTo writes a jump to the start of group k (the last: the final log
// and exit).
func (g *Gen) targetTo(op rpn.Opcode, k int) {
	k = max(0, min(k, g.ngroup))
	g.code = append(g.code, byte(op))
	g.jumps = append(g.jumps, struct{ pos, group int }{len(g.code), k})
	g.code = append(g.code, 0, 0, 0, 0)
}

// branch writes a jump of a branchy program: a diamond (a condition on an
// argument's bit or the stack, over the next few groups), a loop or a
// jump back a few groups, a call, a jump ahead, a ret.
func (g *Gen) branch() {
	r := g.Rng
	conds := []rpn.Opcode{rpn.OpJz, rpn.OpJnz, rpn.OpJlt, rpn.OpJle, rpn.OpJgt, rpn.OpJge}
	k := r.IntN(12)
	if g.Forward && k >= 7 && k != 10 {
		k = 0
	}
	switch k {
	case 0, 1, 2, 3, 4, 5, 6:
		if r.IntN(3) > 0 {
			g.u16(rpn.OpPushU, uint16(g.push[r.IntN(len(g.push))]))
			if r.IntN(2) == 0 {
				g.u8(rpn.OpShrI, uint8(r.IntN(g.arch.WordSize()*8)))
				g.pushD(1)
				g.op(rpn.OpAnd)
			}
		}
		g.targetTo(conds[r.IntN(len(conds))], g.cur+1+r.IntN(6))
	case 7:
		g.targetTo(rpn.OpLoop, g.cur-r.IntN(4))
	case 8:
		g.targetTo(conds[r.IntN(len(conds))], g.cur-r.IntN(8))
	case 9:
		g.targetTo(rpn.OpCall, r.IntN(g.ngroup+1))
	case 10:
		g.targetTo(rpn.OpJmp, g.cur+1+r.IntN(4))
	default:
		g.op(rpn.OpRet)
	}
}

// Word is a random word, often one at an edge (shift counts and widths,
// 0, -1, the sign bits).
func (g *Gen) Word() uint64 {
	switch g.Rng.IntN(8) {
	case 0:
		return uint64(g.Rng.IntN(4))
	case 7: // shift counts and widths
		return [...]uint64{31, 32, 33, 63, 64, 65, 0xffffffff, ^uint64(0)}[g.Rng.IntN(8)]
	case 1:
		return uint64(g.Rng.IntN(70))
	case 2:
		return -uint64(g.Rng.IntN(3))
	case 3:
		return 1 << (31 + 32*uint(g.Rng.IntN(2)))
	case 4:
		return uint64(g.Rng.Uint32())
	}
	return g.Rng.Uint64()
}

// addr is an address to access n bytes at: in the region, often at a
// page boundary, now and then one nobody maps (0, the first page, a
// non-canonical one; Process: 4 GiB's last byte, Kernel: the kernel's top
// page).
func (g *Gen) addr() uint64 {
	switch g.Rng.IntN(10) {
	case 0:
		if g.Target == Kernel {
			return [...]uint64{0, 8, 0xfff, 1 << 63, 0xfffffffffffff000}[g.Rng.IntN(5)]
		}
		return [...]uint64{0, 8, 0xfff, 0x10000, 1 << 63, 0xffffffff}[g.Rng.IntN(6)]
	case 1, 2, 3, 4:
		return g.Base + uint64(g.Rng.IntN(g.Pages+1)*pageSize-24+g.Rng.IntN(32))
	}
	return g.Base + uint64(g.Rng.IntN(g.Pages*pageSize))
}

func (g *Gen) size() uint8 {
	if g.arch == rpn.ArchI386 {
		return []uint8{1, 2, 4}[g.Rng.IntN(3)]
	}
	return []uint8{1, 2, 4, 8}[g.Rng.IntN(4)]
}

func (g *Gen) length() uint64 {
	switch g.Rng.IntN(8) {
	case 0:
		return 0
	case 1:
		return ^uint64(0)
	case 2:
		return 1000
	}
	return uint64(g.Rng.IntN(40))
}

// group writes one group.
func (g *Gen) group() {
	r := g.Rng
	width := uint8(g.arch.WordSize() * 8)
	var k int
	if g.Target == Kernel {
		// no group 20 (switches, push task, port IO) nor 23
		k = r.IntN(26)
		switch {
		case k >= 22:
			k += 2
		case k >= 20:
			k++
		}
	} else {
		k = r.IntN(28)
	}
	switch k {
	case 24, 25, 26, 27: // look at the TOS: the values must flow somewhere
		g.op(rpn.OpDup)
		g.u8(rpn.OpLogN, 1)
	case 0, 1, 2:
		g.pushD(g.Word())
	case 3:
		if g.Target == Kernel {
			g.u16(rpn.OpPushU, uint16(g.push[r.IntN(len(g.push))]))
		} else {
			g.u16(rpn.OpPushR, uint16(g.push[r.IntN(len(g.push))]))
		}
	case 4:
		if g.Target == Kernel {
			g.u16(rpn.OpPushU, uint16(g.push[r.IntN(len(g.push))]))
		} else {
			g.u16(rpn.OpPopR, uint16(g.pop[r.IntN(len(g.pop))]))
		}
	case 5, 6:
		ops := []rpn.Opcode{rpn.OpAdd, rpn.OpSub, rpn.OpMul, rpn.OpDiv, rpn.OpIDiv, rpn.OpAnd, rpn.OpOr, rpn.OpXor,
			rpn.OpNot, rpn.OpNeg, rpn.OpShl, rpn.OpShr, rpn.OpSar, rpn.OpRol, rpn.OpRor}
		g.op(ops[r.IntN(len(ops))])
	case 7:
		g.u8(rpn.OpShlI+rpn.Opcode(r.IntN(5)), uint8(r.IntN(int(width))))
	case 8:
		switch r.IntN(4) {
		case 0:
			g.op(rpn.OpPop)
		case 1:
			g.op(rpn.OpDup)
		case 2:
			g.op(rpn.OpXchg)
		default:
			g.u8(rpn.OpRos, uint8(1+r.IntN(32)))
		}
	case 9:
		g.u8(rpn.OpLogN, uint8(1+r.IntN(6)*r.IntN(7)))
	case 10:
		switch r.IntN(6) {
		case 0:
			g.op(rpn.OpPushLP)
		case 1:
			g.op(rpn.OpPopLP)
		case 2:
			g.u16(rpn.OpSetMajI, uint16(r.Uint32()))
		case 3:
			g.u16(rpn.OpSetMinI, uint16(r.Uint32()))
		case 4:
			if r.IntN(2) == 0 {
				g.pushD(uint64(r.IntN(0x10002)))
			}
			g.op(rpn.OpSetMaj)
		default:
			g.op(rpn.OpSetMin)
		}
	case 11, 12:
		g.variable()
	case 13, 14:
		ops := []rpn.Opcode{rpn.OpJmp, rpn.OpJz, rpn.OpJnz, rpn.OpJlt, rpn.OpJle, rpn.OpJgt, rpn.OpJge, rpn.OpLoop, rpn.OpCall}
		op := ops[r.IntN(len(ops))]
		if g.Forward {
			if op == rpn.OpCall {
				op = rpn.OpJmp
			}
			g.targetTo(op, g.cur+1+r.IntN(g.ngroup-g.cur))
			break
		}
		g.target(op)
	case 15:
		if r.IntN(3) == 0 && !g.Forward {
			g.op(rpn.OpRet)
		} else {
			g.pushD(g.Word())
			g.pushD(g.Word())
		}
	case 16, 17, 18:
		g.memory()
	case 19:
		if g.Target == Kernel {
			g.op([]rpn.Opcode{rpn.OpPushPID, rpn.OpPushTID, rpn.OpNop}[r.IntN(3)])
		} else {
			ops := []rpn.Opcode{rpn.OpPushPID, rpn.OpPushTID, rpn.OpPushProcID, rpn.OpPushTS}
			g.op(ops[r.IntN(len(ops))])
		}
	case 20: // Process only
		switch r.IntN(5) {
		case 3, 4:
			// enable or disable: the probe's own minor (its later hits
			// are off), a neighbour's, any
			m := [...]uint16{g.minor, g.minor, g.minor + 1, uint16(r.Uint32())}[r.IntN(4)]
			op := rpn.OpEnable
			if r.IntN(2) == 0 {
				op = rpn.OpDisable
			}
			g.u16(op, m)
		case 0:
			if g.kernel {
				g.op(rpn.OpPushTask)
			} else {
				g.op(rpn.OpNop)
			}
		case 1:
			g.pushD(0x80)
			g.u8(rpn.OpPushIO, 1)
		default:
			g.pushD(0x80)
			g.pushD(1)
			g.u8(rpn.OpPopIO, 2)
		}
	case 21:
		switch r.IntN(5) {
		case 0:
			g.u8(rpn.OpExit, 0)
		case 1:
			g.u8(rpn.OpExit, 1)
		case 2:
			g.u8(rpn.OpExit, 2)
		case 3:
			g.op(rpn.OpAbort)
		default:
			g.op(rpn.OpRem)
		}
	default:
		g.pushD(g.Word())
		g.u8(rpn.OpLogN, 1)
	}
}

func (g *Gen) variable() {
	r := g.Rng
	type space struct {
		n    int
		base rpn.Opcode // push lv,i .. dec lv
		log  rpn.Opcode
	}
	var sps []space
	if g.vars > 0 {
		sps = append(sps, space{g.vars, rpn.OpPushLVI, rpn.OpLogLV})
	}
	if g.gvars > 0 {
		sps = append(sps, space{g.gvars, rpn.OpPushGVI, rpn.OpLogGV})
	}
	if len(sps) == 0 {
		g.op(rpn.OpNop)
		return
	}
	sp := sps[r.IntN(len(sps))]
	switch r.IntN(3) {
	case 0: // immediate index
		g.u16(sp.base+rpn.Opcode(r.IntN(5)), uint16(r.IntN(sp.n)))
	case 1: // index on the stack, sometimes out of range
		op := sp.base + 5 + rpn.Opcode(r.IntN(5))
		idx := uint64(r.IntN(sp.n + 2))
		switch op - sp.base - 5 {
		case 0, 3, 4: // push, inc, dec: i
			g.pushD(idx)
		case 1: // pop: i x
			g.pushD(idx)
			g.pushD(g.Word())
		case 2: // move: x i
			g.pushD(g.Word())
			g.pushD(idx)
		}
		g.op(op)
	default:
		i := r.IntN(sp.n)
		g.u16u16(sp.log, uint16(i), uint16(1+r.IntN(sp.n-i)))
	}
}

func (g *Gen) memory() {
	r := g.Rng
	var k int
	if g.Target == Kernel {
		// no pop mrf (1)
		if k = r.IntN(5); k >= 1 {
			k++
		}
	} else {
		k = r.IntN(6)
	}
	switch k {
	case 0:
		g.pushD(g.addr())
		g.u8(rpn.OpPushMrf, g.size())
	case 1:
		g.pushD(g.addr())
		g.pushD(g.Word())
		g.u8(rpn.OpPopMrf, g.size())
	case 2, 3:
		g.pushD(g.length())
		g.pushD(g.addr())
		g.op(rpn.OpLogStr)
	case 4:
		g.pushD(g.length())
		g.pushD(g.addr())
		g.op(rpn.OpLogMrf)
	default:
		g.pushD(g.addr())
		if g.Target == Kernel {
			g.op(rpn.OpVfyR)
		} else {
			g.op(rpn.OpVfyR + rpn.Opcode(r.IntN(2)))
		}
	}
}

func (g *Gen) jmpmax() uint32 {
	if g.Branchy {
		return []uint32{1 + uint32(g.Rng.IntN(40)), 300, 5000, 65535}[g.Rng.IntN(4)]
	}
	return uint32(1 + g.Rng.IntN(40))
}

// Module writes a random one-probe module. Most verify; those that do
// not are refused by rpn.Load for a reason of the verifier.
func (g *Gen) Module() *rpn.Module {
	r := g.Rng
	g.arch = rpn.Arch(r.IntN(4) / 3) // one in four i386
	g.kernel = g.Target == Kernel
	if g.Target == Process {
		g.kernel = r.IntN(8) == 0
	}
	g.vars, g.gvars = r.IntN(7), r.IntN(7)
	g.code, g.starts, g.jumps = nil, nil, nil
	g.ngroup = 1 + r.IntN(25)
	if g.Branchy {
		g.ngroup = 40 + r.IntN(360)
	}
	g.push, g.pop = nil, nil
	if g.Target == Kernel {
		// the system call's arguments, and its number
		for _, name := range []string{"rdi", "rsi", "rdx", "r10", "r8", "r9", "rax", "edi", "esi", "edx", "r10d", "r8d", "r9d", "eax"} {
			if reg, ok := rpn.LookupReg(g.arch, name); ok {
				g.push = append(g.push, reg)
			}
		}
	} else {
		g.minor = uint16(r.Uint32())
		for _, name := range rpn.RegNames(g.arch) {
			reg, _ := rpn.LookupReg(g.arch, name)
			c := reg.Canonical()
			if c >= rpn.RegCR0 && !g.kernel {
				continue
			}
			g.push = append(g.push, reg)
			if c <= rpn.RegRFLAGS && c != rpn.RegRIP && c != rpn.RegRSP {
				g.pop = append(g.pop, reg)
			}
		}
	}
	for i := 0; i < g.ngroup; i++ {
		g.cur = i
		g.starts = append(g.starts, len(g.code))
		if g.Branchy && r.IntN(3) == 0 {
			g.branch()
		} else {
			g.group()
		}
	}
	g.starts = append(g.starts, len(g.code))
	g.u8(rpn.OpLogN, 4)
	g.u8(rpn.OpExit, 1)
	for _, j := range g.jumps {
		binary.LittleEndian.PutUint32(g.code[j.pos:], uint32(g.starts[j.group]))
	}
	logmax := []uint32{1, 8, 16, 40, 64, 200, 1000}[r.IntN(7)] + uint32(r.IntN(3))
	h := rpn.Header{
		Name:    "random",
		ModType: rpn.ModUser,
		Major:   uint16(r.Uint32()),
		JmpMax:  g.jmpmax(),
		LogMax:  logmax,
		Vars:    uint16(g.vars),
		GVars:   uint16(g.gvars),
		Arch:    g.arch,
	}
	if g.kernel {
		h.ModType = rpn.ModKernel
	}
	minor := g.minor
	if g.Target == Kernel {
		h.Name = "vmlinux"
		minor = uint16(r.Uint32())
	}
	return &rpn.Module{
		Header: h,
		Probes: []rpn.Probe{{
			Loc:       rpn.Location{Text: "0", Kind: rpn.LocAbsolute},
			Minor:     minor,
			PassCount: uint64(r.IntN(4) / 2),
			MaxHits:   uint64(r.IntN(12) / 9 * (1 + r.IntN(3))),
			Entry:     0,
			End:       uint32(len(g.code)),
		}},
		Code:  g.code,
		Files: []string{"random"},
	}
}
