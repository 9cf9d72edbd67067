package x86

// Instruction generators for the differential tests: they encode
// instructions with random registers, addressing forms and immediates,
// and pick register values so memory operands land in the harness's test
// window.

import (
	"encoding/binary"
	"math/rand/v2"

	"github.com/gprobes/gprobes/rpn"
)

// hX is where the instruction under test sits.
const hX = hCode + 0x1000

// encReg maps an x86 register number (0 = ax ... 15 = r15) to the
// canonical register index.
func encReg(n int) rpn.Reg { return encToReg[n] }

// edge values that break flags: zero, ones, sign boundaries at every width.
var edges = []uint64{
	0, 1, 2, 0x7f, 0x80, 0xff, 0x100, 0x7fff, 0x8000, 0xffff, 0x10000,
	0x7fffffff, 0x80000000, 0xffffffff, 0x100000000, 0x7fffffffffffffff,
	0x8000000000000000, 0xffffffffffffffff, 0xfffffffffffffffe, 0x8000000000000001,
	0x0f, 0x10, 0xf0, 0x0fff, 0x1000,
}

type gen struct {
	r    *rand.Rand
	mode int
}

func (g *gen) val() uint64 {
	switch g.r.IntN(4) {
	case 0:
		return edges[g.r.IntN(len(edges))]
	case 1:
		return edges[g.r.IntN(len(edges))] + uint64(g.r.IntN(3)) - 1
	case 2:
		return uint64(g.r.IntN(256))
	}
	return g.r.Uint64()
}

// state returns random registers and flags (the arithmetic flags and DF
// random, IF and bit 1 set as in user mode).
func (g *gen) state() Regs {
	var r Regs
	for i := 0; i < 16; i++ {
		r[i] = g.val()
		if g.mode == 32 {
			r[i] &= 0xffffffff
		}
	}
	r[rpn.RegRSP] = g.stackPtr()
	r[rpn.RegRFLAGS] = 0x202 | g.r.Uint64()&(ArithFlags|FlagDF)
	return r
}

// stackPtr is a stack pointer inside the window, any alignment.
func (g *gen) stackPtr() uint64 { return hData + 0x200 + uint64(g.r.IntN(0x100)) }

func (g *gen) reg() int {
	if g.mode == 32 {
		return g.r.IntN(8)
	}
	return g.r.IntN(16)
}

func (g *gen) imm(size int) []byte {
	v := g.val()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return b[:size]
}

// operand is a ModRM r/m operand: a register, or memory.
type operand struct {
	isReg  bool
	reg    int
	base   int // -1 none, 16 rip
	index  int // -1 none
	scale  int
	disp   int32
	dsize  int // 0, 1 or 4
	addr32 bool
}

// insn encodes prefixes, REX, opcode, ModRM (reg field and r/m operand)
// and an immediate. size is the operand size (1, 2, 4, 8): 2 adds 66, 8
// sets REX.W. byteRegs: the reg and r/m registers are 8-bit, where 4-7
// mean ah..bh without REX and spl..dil with it; forceREX picks the latter.
type insn struct {
	pfx      []byte
	opcode   []byte
	size     int
	regField int
	rm       operand
	imm      []byte
	byteRegs bool
	forceREX bool
	noModRM  bool
	rexB     int // for opcode+reg forms: the register's high bit goes to REX.B
}

func (g *gen) encode(in insn) []byte {
	var b []byte
	b = append(b, in.pfx...)
	if in.size == 2 {
		b = append(b, 0x66)
	}
	if in.rm.addr32 {
		b = append(b, 0x67)
	}
	rex := byte(0)
	if in.size == 8 {
		rex |= 8
	}
	if in.regField >= 8 {
		rex |= 4
	}
	if !in.noModRM {
		if in.rm.isReg && in.rm.reg >= 8 || !in.rm.isReg && in.rm.base >= 8 && in.rm.base < 16 {
			rex |= 1
		}
		if !in.rm.isReg && in.rm.index >= 8 {
			rex |= 2
		}
	}
	if in.rexB >= 8 {
		rex |= 1
	}
	if rex != 0 || in.forceREX {
		b = append(b, 0x40|rex)
	}
	b = append(b, in.opcode...)
	if !in.noModRM {
		b = append(b, modrm(in.regField, in.rm)...)
	}
	return append(b, in.imm...)
}

func modrm(reg int, o operand) []byte {
	r := byte(reg&7) << 3
	if o.isReg {
		return []byte{0xc0 | r | byte(o.reg&7)}
	}
	var b []byte
	dispBytes := func(mod byte) {
		switch mod {
		case 1:
			b = append(b, byte(int8(o.disp)))
		case 2, 0x10:
			b = binary.LittleEndian.AppendUint32(b, uint32(o.disp))
		}
	}
	if o.base == 16 { // rip
		b = append(b, r|5)
		dispBytes(0x10)
		return b
	}
	mod := byte(0)
	switch o.dsize {
	case 1:
		mod = 1
	case 4:
		mod = 2
	}
	if o.base >= 0 && o.base&7 == 5 && mod == 0 {
		mod = 1 // [rbp] needs a disp8
	}
	if o.base < 0 {
		// no base: SIB with base=101, mod=00, disp32
		idx := byte(4)
		sc := byte(0)
		if o.index >= 0 {
			idx, sc = byte(o.index&7), scaleBits(o.scale)
		}
		b = append(b, r|4, sc<<6|idx<<3|5)
		dispBytes(0x10)
		return b
	}
	if o.index >= 0 || o.base&7 == 4 {
		idx := byte(4)
		sc := byte(0)
		if o.index >= 0 {
			idx, sc = byte(o.index&7), scaleBits(o.scale)
		}
		b = append(b, mod<<6|r|4, sc<<6|idx<<3|byte(o.base&7))
	} else {
		b = append(b, mod<<6|r|byte(o.base&7))
	}
	dispBytes(mod)
	return b
}

func scaleBits(s int) byte {
	switch s {
	case 2:
		return 1
	case 4:
		return 2
	case 8:
		return 3
	}
	return 0
}

// effective disp after encoding (a [rbp] without disp gets disp8 0).
func (o *operand) normalize() {
	if o.base >= 0 && o.base < 16 && o.base&7 == 5 && o.dsize == 0 {
		o.dsize = 1
	}
	switch o.dsize {
	case 0:
		o.disp = 0
	case 1:
		o.disp = int32(int8(o.disp))
	}
	if o.base < 0 || o.base == 16 {
		o.dsize = 4
	}
}

// memOperand picks an addressing form. When target is true the register
// values in regs are set so the effective address is in the window with
// room for size bytes; otherwise (lea, nop) registers stay random.
func (g *gen) memOperand(regs *Regs, size int, target bool, allowRIP bool) operand {
	o := operand{base: -1, index: -1, scale: 1}
	if g.mode == 64 && g.r.IntN(6) == 0 {
		o.addr32 = true
	}
	switch k := g.r.IntN(10); {
	case k == 0 && allowRIP:
		o.base = 16 // rip-relative; in 32-bit mode the same encoding is absolute
	case k == 1:
		// absolute: no base
		if g.r.IntN(2) == 0 {
			o.index = g.indexReg()
			o.scale = 1 << g.r.IntN(4)
		}
	default:
		o.base = g.reg()
		if g.r.IntN(2) == 0 {
			o.index = g.indexReg()
			o.scale = 1 << g.r.IntN(4)
		}
	}
	switch g.r.IntN(3) {
	case 0:
		o.dsize = 0
	case 1:
		o.dsize, o.disp = 1, int32(int8(g.r.IntN(256)))
	case 2:
		o.dsize, o.disp = 4, int32(g.r.Uint32())
		if g.r.IntN(2) == 0 {
			o.disp = int32(g.r.IntN(0x2000)) - 0x1000
		}
	}
	o.normalize()
	if o.base == 16 {
		o.addr32 = false // eip-relative is refused: tested elsewhere
	}
	if !target || o.base == 16 && g.mode == 64 {
		return o
	}
	t := hData + uint64(g.r.IntN(hWindow-size+1))
	if o.base == 16 {
		o.disp = int32(t)
		return o
	}
	mask := ^uint64(0)
	if o.addr32 || g.mode == 32 {
		mask = 0xffffffff
	}
	disp := uint64(int64(o.disp))
	switch {
	case o.base < 0 && o.index < 0:
		o.disp = int32(t)
		if g.mode == 64 && !o.addr32 && t >= 0x80000000 {
			panic("window above 2 GiB")
		}
	case o.base < 0:
		// index*scale + disp32 = t
		iv := uint64(g.r.IntN(64))
		o.disp = int32(t - iv*uint64(o.scale))
		g.setAddrReg(regs, o.index, iv, o.addr32)
	case o.index < 0:
		g.setAddrReg(regs, o.base, (t-disp)&mask, o.addr32)
	case o.base == o.index:
		// v*(1+scale) + disp = t: move t down to a multiple
		k := uint64(1 + o.scale)
		t -= (t - disp) % k
		if t < hData {
			t += k
		}
		g.setAddrReg(regs, o.base, ((t-disp)/k)&mask, o.addr32)
	default:
		iv := g.val()
		if g.r.IntN(2) == 0 {
			iv = uint64(g.r.IntN(64))
		}
		if o.addr32 || g.mode == 32 {
			iv &= 0xffffffff
		}
		g.setAddrReg(regs, o.index, iv, o.addr32)
		g.setAddrReg(regs, o.base, (t-disp-iv*uint64(o.scale))&mask, o.addr32)
	}
	return o
}

// setAddrReg sets an address register; with a 32-bit address size the
// upper half is garbage the CPU must ignore.
func (g *gen) setAddrReg(regs *Regs, n int, v uint64, addr32 bool) {
	if addr32 {
		v = v&0xffffffff | g.r.Uint64()<<32
	}
	regs[encReg(n)] = v
}

func (g *gen) indexReg() int {
	for {
		n := g.reg()
		if n != 4 {
			return n
		}
	}
}
