//go:build linux && amd64

package jit_test

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/jit"
	"github.com/gprobes/gprobes/rpn"
)

// gen writes random programs that verify: a sequence of groups of
// instructions, jumps and calls landing only on group starts. A group
// that accesses memory pushes its address (and length, value) itself,
// right before the access: so every address a program touches is one it
// chose from the memory region (or a few unmapped ones), whatever the
// stack held, and the test process's own memory is never written.
type gen struct {
	rng    *rand.Rand
	base   uint64 // the memory region
	arch   rpn.Arch
	kernel bool
	vars   int
	gvars  int
	code   []byte
	starts []int
	jumps  []struct{ pos, group int }
	ngroup int
	push   []rpn.Reg
	pop    []rpn.Reg
	minor  uint16 // the probe's
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
	g.code = append(g.code, byte(op))
	g.jumps = append(g.jumps, struct{ pos, group int }{len(g.code), g.rng.IntN(g.ngroup + 1)})
	g.code = append(g.code, 0, 0, 0, 0)
}

func (g *gen) word() uint64 {
	switch g.rng.IntN(8) {
	case 0:
		return uint64(g.rng.IntN(4))
	case 7: // shift counts and widths
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

// addr is an address to access n bytes at: in the region, often at a
// page boundary, now and then an unmapped one.
func (g *gen) addr() uint64 {
	switch g.rng.IntN(10) {
	case 0:
		return [...]uint64{0, 8, 0xfff, 0x10000, 1 << 63, 0xffffffff}[g.rng.IntN(6)]
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

// group writes one group.
func (g *gen) group() {
	r := g.rng
	width := uint8(rpn.Arch.WordSize(g.arch) * 8)
	switch r.IntN(28) {
	case 24, 25, 26, 27: // look at the TOS: the values must flow somewhere
		g.op(rpn.OpDup)
		g.u8(rpn.OpLogN, 1)
	case 0, 1, 2:
		g.pushD(g.word())
	case 3:
		g.u16(rpn.OpPushR, uint16(g.push[r.IntN(len(g.push))]))
	case 4:
		g.u16(rpn.OpPopR, uint16(g.pop[r.IntN(len(g.pop))]))
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
		g.target(ops[r.IntN(len(ops))])
	case 15:
		if r.IntN(3) == 0 {
			g.op(rpn.OpRet)
		} else {
			g.pushD(g.word())
			g.pushD(g.word())
		}
	case 16, 17, 18:
		g.memory()
	case 19:
		ops := []rpn.Opcode{rpn.OpPushPID, rpn.OpPushTID, rpn.OpPushProcID, rpn.OpPushTS}
		g.op(ops[r.IntN(len(ops))])
	case 20:
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
		g.pushD(g.word())
		g.u8(rpn.OpLogN, 1)
	}
}

func (g *gen) variable() {
	r := g.rng
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
			g.pushD(g.word())
		case 2: // move: x i
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
	switch r.IntN(6) {
	case 0:
		g.pushD(g.addr())
		g.u8(rpn.OpPushMrf, g.size())
	case 1:
		g.pushD(g.addr())
		g.pushD(g.word())
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
		g.op(rpn.OpVfyR + rpn.Opcode(r.IntN(2)))
	}
}

// module writes a random one-probe module.
func (g *gen) module() *rpn.Module {
	r := g.rng
	g.arch = rpn.Arch(r.IntN(4) / 3) // one in four i386
	g.kernel = r.IntN(8) == 0
	g.vars, g.gvars = r.IntN(7), r.IntN(7)
	g.code, g.starts, g.jumps = nil, nil, nil
	g.ngroup = 1 + r.IntN(25)
	g.push, g.pop = nil, nil
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
	for i := 0; i < g.ngroup; i++ {
		g.starts = append(g.starts, len(g.code))
		g.group()
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
		JmpMax:  uint32(1 + r.IntN(40)),
		LogMax:  logmax,
		Vars:    uint16(g.vars),
		GVars:   uint16(g.gvars),
		Arch:    g.arch,
	}
	if g.kernel {
		h.ModType = rpn.ModKernel
	}
	return &rpn.Module{
		Header: h,
		Probes: []rpn.Probe{{
			Loc:       rpn.Location{Text: "0", Kind: rpn.LocAbsolute},
			Minor:     g.minor,
			PassCount: uint64(r.IntN(4) / 2),
			MaxHits:   uint64(r.IntN(12) / 9 * (1 + r.IntN(3))),
			Entry:     0,
			End:       uint32(len(g.code)),
		}},
		Code:  g.code,
		Files: []string{"random"},
	}
}

// runRandom generates a program from seed, and runs hits hits of it on
// both sides. It reports whether the program verified.
func runRandom(t testing.TB, h *harness, seed uint64, hits int) bool {
	g := &gen{rng: rand.New(rand.NewPCG(seed, 0x6a17)), base: h.base}
	m := g.module()
	p, err := rpn.Load(m)
	if err != nil {
		if h.refused != nil {
			h.refused[refusal(err)]++
		}
		return false
	}
	h.fsgsbase = hasFSGSBase() && g.rng.IntN(2) == 0
	r, err := h.start(p)
	if err != nil {
		t.Fatalf("seed %d: compile: %v\n%s", seed, err, p.Listing(0))
	}
	defer r.close()
	*h.clock() = jit.Clock{TSC0: g.rng.Uint64(), NS0: g.rng.Uint64(), Mult: g.rng.Uint64(), Shift: uint64(g.rng.IntN(128))}
	if g.rng.IntN(2) == 0 {
		h.setThread(uint32(h.tid), g.rng.Uint32())
	}
	for i := 0; i < hits; i++ {
		s := h.randomSetup()
		if d := r.hit(s); d != "" {
			t.Fatalf("seed %d, hit %d: %s\n%s", seed, i+1, d, p.Listing(0))
		}
	}
	return true
}

// TestRandom: random programs of every instruction, on both sides, hit
// after hit (pass count, max hits, rem and faults carry over).
func TestRandom(t *testing.T) {
	h := newHarness(t, 8)
	h.stats, h.refused = map[string]int{}, map[string]int{}
	n := 20000
	if testing.Short() {
		n = 2000
	}
	verified := 0
	for seed := uint64(0); seed < uint64(n); seed++ {
		if runRandom(t, h, seed, 4) {
			verified++
		}
	}
	// the generator makes only programs the verifier takes and the jump
	// route compiles (a compile error fails the test in runRandom): every
	// seed runs
	if verified != n {
		t.Errorf("%d of %d programs verified; the verifier refused, by kind: %v", verified, n, h.refused)
	}
	t.Logf("%d programs of %d verified and ran; hits: %v", verified, n, h.stats)
}

var digits = regexp.MustCompile(`[0-9]+`)

// refusal is the kind of a verifier's error: its message with the numbers
// (offsets, values) taken out.
func refusal(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, ": "); i >= 0 && strings.Contains(msg[:i], "offset") {
		msg = msg[i+2:]
	}
	return digits.ReplaceAllString(msg, "N")
}

// FuzzCompile: the random programs from any seed.
func FuzzCompile(f *testing.F) {
	for s := uint64(0); s < 8; s++ {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		h := newHarness(t, seed)
		runRandom(t, h, seed, 4)
	})
}

// The compiler never fails on a verified program for anything but an
// Unsupported reason, whatever the bytes (no execution).
func FuzzCompileBytes(f *testing.F) {
	f.Add([]byte{byte(rpn.OpPushD), 1, 0, 0, 0, 0, 0, 0, 0, byte(rpn.OpLogN), 1, byte(rpn.OpExit), 1}, uint8(0))
	f.Fuzz(func(t *testing.T, code []byte, hdr uint8) {
		m := &rpn.Module{
			Header: rpn.Header{Name: "f", JmpMax: 5, LogMax: 1 + uint32(hdr&63), Vars: uint16(hdr >> 6), GVars: 2,
				Arch: rpn.Arch(hdr >> 7), ModType: rpn.ModType(hdr >> 6 & 1)},
			Probes: []rpn.Probe{{Loc: rpn.Location{Text: "0", Kind: rpn.LocAbsolute}, End: uint32(len(code))}},
			Code:   code,
		}
		p, err := rpn.Load(m)
		if err != nil {
			return
		}
		_, err = jit.Compile(p, 0, jit.Layout{})
		var u *jit.Unsupported
		if err != nil && !errors.As(err, &u) {
			t.Fatal(err)
		}
	})
}
