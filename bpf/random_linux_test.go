//go:build linux

package bpf_test

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/gprobes/gprobes/rpn"
)

// gen writes random kernel-module programs that verify (jit's generator,
// less what the kernel target refuses or what the harness cannot predict:
// pop r/u/mrf, port IO, vfy_rw, push r (a tracepoint has no registers),
// push task, and push procid/ts, whose values the machine learns from the
// record, which an exit 0 does not write). A group that accesses memory
// pushes its address itself, in the harness's region or at an address
// nobody maps.
type gen struct {
	rng    *rand.Rand
	base   uint64
	arch   rpn.Arch
	vars   int
	gvars  int
	code   []byte
	starts []int
	jumps  []struct{ pos, group int }
	ngroup int
	push   []rpn.Reg
	// branchy: many groups, a third of them jumps, most of them
	// conditional and near (branchyModule)
	branchy bool
	forward bool // branchy, jumps forward only, no call or ret: no cycle (straight mode)
	cur     int  // the group being written
}

func (g *gen) op(op rpn.Opcode) { g.code = append(g.code, byte(op)) }
func (g *gen) u8(op rpn.Opcode, v uint8) {
	g.code = append(g.code, byte(op), v)
}
func (g *gen) u16(op rpn.Opcode, v uint16) {
	g.code = binary.LittleEndian.AppendUint16(append(g.code, byte(op)), v)
}
func (g *gen) u16u16(op rpn.Opcode, a, b uint16) {
	g.code = binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint16(append(g.code, byte(op)), a), b)
}
func (g *gen) pushD(v uint64) {
	if g.arch == rpn.ArchI386 {
		v &= 0xffffffff
	}
	g.code = binary.LittleEndian.AppendUint64(append(g.code, byte(rpn.OpPushD)), v)
}
func (g *gen) target(op rpn.Opcode) {
	g.targetTo(op, g.rng.IntN(g.ngroup+1))
}

// targetTo writes a jump to the start of group k (the last: the final log
// and exit).
func (g *gen) targetTo(op rpn.Opcode, k int) {
	k = max(0, min(k, g.ngroup))
	g.code = append(g.code, byte(op))
	g.jumps = append(g.jumps, struct{ pos, group int }{len(g.code), k})
	g.code = append(g.code, 0, 0, 0, 0)
}

// branch writes a jump of a branchy program: a diamond (a condition on an
// argument's bit or the stack, over the next few groups), a loop or a
// jump back a few groups, a call, a jump ahead, a ret.
func (g *gen) branch() {
	r := g.rng
	conds := []rpn.Opcode{rpn.OpJz, rpn.OpJnz, rpn.OpJlt, rpn.OpJle, rpn.OpJgt, rpn.OpJge}
	k := r.IntN(12)
	if g.forward && k >= 7 && k != 10 {
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

func (g *gen) word() uint64 {
	switch g.rng.IntN(8) {
	case 0:
		return uint64(g.rng.IntN(4))
	case 7:
		return [...]uint64{31, 32, 33, 63, 64, 65, 0xffffffff, ^uint64(0)}[g.rng.IntN(8)]
	case 1:
		return uint64(g.rng.IntN(70))
	case 2:
		return -uint64(g.rng.IntN(3))
	case 3:
		return 1 << (31 + 32*uint(g.rng.IntN(2)))
	case 4:
		return uint64(g.rng.Uint32())
	}
	return g.rng.Uint64()
}

// addr: in the region, often near a page boundary, now and then one
// nobody maps (0, the first page, a non-canonical one, the kernel's top
// page).
func (g *gen) addr() uint64 {
	switch g.rng.IntN(10) {
	case 0:
		return [...]uint64{0, 8, 0xfff, 1 << 63, 0xfffffffffffff000}[g.rng.IntN(5)]
	case 1, 2, 3, 4:
		return g.base + uint64(g.rng.IntN(memPages+1)*pageSize-24+g.rng.IntN(32))
	}
	return g.base + uint64(g.rng.IntN(memPages*pageSize))
}

func (g *gen) size() uint8 {
	if g.arch == rpn.ArchI386 {
		return []uint8{1, 2, 4}[g.rng.IntN(3)]
	}
	return []uint8{1, 2, 4, 8}[g.rng.IntN(4)]
}

func (g *gen) length() uint64 {
	switch g.rng.IntN(8) {
	case 0:
		return 0
	case 1:
		return ^uint64(0)
	case 2:
		return 1000
	}
	return uint64(g.rng.IntN(40))
}

func (g *gen) group() {
	r := g.rng
	width := uint8(g.arch.WordSize() * 8)
	switch r.IntN(26) {
	case 22, 23, 24, 25:
		g.op(rpn.OpDup)
		g.u8(rpn.OpLogN, 1)
	case 0, 1, 2:
		g.pushD(g.word())
	case 3, 4:
		g.u16(rpn.OpPushU, uint16(g.push[r.IntN(len(g.push))]))
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
		if g.forward {
			if op == rpn.OpCall {
				op = rpn.OpJmp
			}
			g.targetTo(op, g.cur+1+r.IntN(g.ngroup-g.cur))
			break
		}
		g.target(op)
	case 15:
		if r.IntN(3) == 0 && !g.forward {
			g.op(rpn.OpRet)
		} else {
			g.pushD(g.word())
			g.pushD(g.word())
		}
	case 16, 17, 18:
		g.memory()
	case 19:
		g.op([]rpn.Opcode{rpn.OpPushPID, rpn.OpPushTID, rpn.OpNop}[r.IntN(3)])
	case 20:
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
		g.pushD(g.word())
		g.u8(rpn.OpLogN, 1)
	}
}

func (g *gen) variable() {
	r := g.rng
	type space struct {
		n    int
		base rpn.Opcode
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
	case 0:
		g.u16(sp.base+rpn.Opcode(r.IntN(5)), uint16(r.IntN(sp.n)))
	case 1:
		op := sp.base + 5 + rpn.Opcode(r.IntN(5))
		idx := uint64(r.IntN(sp.n + 2))
		switch op - sp.base - 5 {
		case 0, 3, 4:
			g.pushD(idx)
		case 1:
			g.pushD(idx)
			g.pushD(g.word())
		case 2:
			g.pushD(g.word())
			g.pushD(idx)
		}
		g.op(op)
	default:
		i := r.IntN(sp.n)
		g.u16u16(sp.log, uint16(i), uint16(1+r.IntN(sp.n-i)))
	}
}

func (g *gen) memory() {
	r := g.rng
	switch r.IntN(5) {
	case 0:
		g.pushD(g.addr())
		g.u8(rpn.OpPushMrf, g.size())
	case 1, 2:
		g.pushD(g.length())
		g.pushD(g.addr())
		g.op(rpn.OpLogStr)
	case 3:
		g.pushD(g.length())
		g.pushD(g.addr())
		g.op(rpn.OpLogMrf)
	default:
		g.pushD(g.addr())
		g.op(rpn.OpVfyR)
	}
}

func (g *gen) jmpmax() uint32 {
	if g.branchy {
		return []uint32{1 + uint32(g.rng.IntN(40)), 300, 5000, 65535}[g.rng.IntN(4)]
	}
	return uint32(1 + g.rng.IntN(40))
}

func (g *gen) module() *rpn.Module {
	r := g.rng
	g.arch = rpn.Arch(r.IntN(4) / 3)
	g.vars, g.gvars = r.IntN(7), r.IntN(7)
	g.code, g.starts, g.jumps = nil, nil, nil
	g.ngroup = 1 + r.IntN(25)
	if g.branchy {
		g.ngroup = 40 + r.IntN(360)
	}
	g.push = nil
	for _, name := range []string{"rdi", "rsi", "rdx", "r10", "r8", "r9", "rax", "edi", "esi", "edx", "r10d", "r8d", "r9d", "eax"} {
		if reg, ok := rpn.LookupReg(g.arch, name); ok {
			g.push = append(g.push, reg)
		}
	}
	for i := 0; i < g.ngroup; i++ {
		g.cur = i
		g.starts = append(g.starts, len(g.code))
		if g.branchy && r.IntN(3) == 0 {
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
	return &rpn.Module{
		Header: rpn.Header{
			Name:    "vmlinux",
			ModType: rpn.ModKernel,
			Major:   uint16(r.Uint32()),
			JmpMax:  g.jmpmax(),
			LogMax:  logmax,
			Vars:    uint16(g.vars),
			GVars:   uint16(g.gvars),
			Arch:    g.arch,
		},
		Probes: []rpn.Probe{{
			Loc:       rpn.Location{Text: "0", Kind: rpn.LocAbsolute},
			Minor:     uint16(r.Uint32()),
			PassCount: uint64(r.IntN(4) / 2),
			MaxHits:   uint64(r.IntN(12) / 9 * (1 + r.IntN(3))),
			Entry:     0,
			End:       uint32(len(g.code)),
		}},
		Code:  g.code,
		Files: []string{"random"},
	}
}

// TestRandom: random programs of every instruction the kernel target
// compiles, in the kernel and in the machine, hit after hit.
func TestRandom(t *testing.T) {
	needBPF(t)
	r := newRegion(t, 3)
	n := 120
	if testing.Short() {
		n = 40
	}
	if s := os.Getenv("GPROBES_BPF_RANDOM"); s != "" {
		n, _ = strconv.Atoi(s) // more programs, for a longer search
	}
	verified, loops := 0, 0
	for seed := uint64(0); seed < uint64(n); seed++ {
		g := &gen{rng: rand.New(rand.NewPCG(seed, 0xb9f)), base: r.base}
		p, err := rpn.Load(g.module())
		if err != nil {
			continue
		}
		verified++
		ok := t.Run("", func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			k := startRun(t, p, r, g.rng, seed%3 == 0) // a third forced into loop mode
			if k.compiled.Loop {
				loops++
			}
			for i := 0; i < 4; i++ {
				var args [6]uint64
				for j := range args {
					args[j] = randWord(g.rng, 8)
				}
				if d := k.hit(args); d != "" {
					t.Fatalf("seed %d, hit %d (args %#x): %s\n%s", seed, i+1, args, d, p.Listing(0))
				}
			}
		})
		if !ok {
			break
		}
	}
	if verified < n/2 {
		t.Errorf("only %d of %d programs verified", verified, n)
	}
	t.Logf("%d programs of %d verified and ran in the kernel (%d in loop mode), 4 hits each", verified, n, loops)
}
