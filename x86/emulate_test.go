package x86

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"golang.org/x/arch/x86/x86asm"

	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/rpn"
)

// vec is one differential test vector: an instruction at hX, the state
// before, and what else the run needs.
type vec struct {
	insn      []byte
	regs      Regs
	win       [hWindow]byte
	code      []chunk  // data in the code area (rip-relative targets)
	lands     []uint64 // landings besides hX+len
	want      Class    // the class Decode must give
	ripTarget bool     // patch the rip-relative disp to point at readable data
	fault     bool     // the memory access is meant to fault
	ptr       uint64   // write this address (stack width) where the memory operand points
	redo      bool     // the family could not make a sane vector: generate another
}

const hRIPData = hCode + 0x3000 // rip-relative loads read here

// family generates vectors of one kind of instruction.
type family struct {
	name string
	gen  func(g *gen, v *vec)
}

func (g *gen) size() int {
	if g.mode == 32 {
		return []int{1, 2, 4}[g.r.IntN(3)]
	}
	return []int{1, 2, 4, 8}[g.r.IntN(4)]
}

// rmOperand is a register or (when mem) a memory operand in the window.
func (g *gen) rmOperand(v *vec, size int, mem bool) operand {
	if mem && g.r.IntN(2) == 0 {
		o := g.memOperand(&v.regs, size, true, true)
		if o.base == 16 && g.mode == 64 {
			v.ripTarget = true
		}
		return o
	}
	return operand{isReg: true, reg: g.reg()}
}

// immFor returns an immediate of the encoded size for an operand size:
// iz is 2 or 4 bytes.
func (g *gen) immZ(size int) []byte {
	if size == 2 {
		return g.imm(2)
	}
	if size == 1 {
		return g.imm(1)
	}
	return g.imm(4)
}

func byteOp(size int, op byte) byte {
	if size == 1 {
		return op
	}
	return op + 1
}

var families = []family{
	{"alu r,r/m", func(g *gen, v *vec) {
		op, size := byte(g.r.IntN(8)), g.size()
		dir := byte(g.r.IntN(2)) // 0: r/m,reg  1: reg,r/m (may read memory)
		rm := g.rmOperand(v, size, dir == 1 || op == 7)
		if !rm.isReg && dir == 0 && op != 7 {
			rm = operand{isReg: true, reg: g.reg()}
		}
		v.insn = g.encode(insn{opcode: []byte{byteOp(size, op*8+dir*2)}, size: size, regField: g.reg(), rm: rm,
			forceREX: size == 1 && g.mode == 64 && g.r.IntN(2) == 0})
	}},
	{"alu same reg", func(g *gen, v *vec) {
		op, size := byte(g.r.IntN(8)), g.size()
		r := g.reg()
		v.insn = g.encode(insn{opcode: []byte{byteOp(size, op*8)}, size: size, regField: r, rm: operand{isReg: true, reg: r}})
	}},
	{"alu r/m,imm", func(g *gen, v *vec) {
		op, size := g.r.IntN(8), g.size()
		rm := g.rmOperand(v, size, op == 7)
		in := insn{size: size, regField: op, rm: rm, forceREX: size == 1 && g.mode == 64 && g.r.IntN(2) == 0}
		switch {
		case size == 1:
			in.opcode, in.imm = []byte{0x80}, g.imm(1)
		case g.r.IntN(2) == 0:
			in.opcode, in.imm = []byte{0x83}, g.imm(1)
		default:
			in.opcode, in.imm = []byte{0x81}, g.immZ(size)
		}
		v.insn = g.encode(in)
	}},
	{"alu acc,imm", func(g *gen, v *vec) {
		op, size := byte(g.r.IntN(8)), g.size()
		v.insn = g.encode(insn{opcode: []byte{byteOp(size, op*8+4)}, size: size, noModRM: true, imm: g.immZ(size)})
	}},
	{"test", func(g *gen, v *vec) {
		size := g.size()
		switch g.r.IntN(3) {
		case 0:
			v.insn = g.encode(insn{opcode: []byte{byteOp(size, 0x84)}, size: size, regField: g.reg(), rm: g.rmOperand(v, size, true)})
		case 1:
			v.insn = g.encode(insn{opcode: []byte{byteOp(size, 0xa8)}, size: size, noModRM: true, imm: g.immZ(size)})
		default:
			v.insn = g.encode(insn{opcode: []byte{byteOp(size, 0xf6)}, size: size, regField: 0, rm: g.rmOperand(v, size, true), imm: g.immZ(size)})
		}
	}},
	{"inc dec neg not", func(g *gen, v *vec) {
		size := g.size()
		rm := operand{isReg: true, reg: g.reg()}
		switch k := g.r.IntN(5); {
		case k == 4 && g.mode == 32 && size != 1:
			r := g.reg()
			v.insn = g.encode(insn{opcode: []byte{0x40 + byte(g.r.IntN(2))*8 + byte(r)}, size: size, noModRM: true})
		case k < 2:
			v.insn = g.encode(insn{opcode: []byte{byteOp(size, 0xfe)}, size: size, regField: k, rm: rm})
		default:
			v.insn = g.encode(insn{opcode: []byte{byteOp(size, 0xf6)}, size: size, regField: 2 + g.r.IntN(2), rm: rm})
		}
	}},
	{"mov", func(g *gen, v *vec) {
		size := g.size()
		switch g.r.IntN(4) {
		case 0, 1: // 88-8b: register or load
			dir := byte(g.r.IntN(2))
			rm := g.rmOperand(v, size, dir == 1)
			v.insn = g.encode(insn{opcode: []byte{byteOp(size, 0x88+dir*2)}, size: size, regField: g.reg(), rm: rm,
				forceREX: size == 1 && g.mode == 64 && g.r.IntN(2) == 0})
		case 2: // b0+r, b8+r
			r := g.reg()
			if size == 1 {
				v.insn = g.encode(insn{opcode: []byte{0xb0 + byte(r&7)}, size: 1, noModRM: true, rexB: r, imm: g.imm(1)})
			} else {
				n := size // b8+r takes imm16, imm32 or (REX.W) imm64
				v.insn = g.encode(insn{opcode: []byte{0xb8 + byte(r&7)}, size: size, noModRM: true, rexB: r, imm: g.imm(n)})
			}
		default: // c6/c7 /0 to a register
			v.insn = g.encode(insn{opcode: []byte{byteOp(size, 0xc6)}, size: size, regField: 0,
				rm: operand{isReg: true, reg: g.reg()}, imm: g.immZ(size)})
		}
	}},
	{"mov moffs", func(g *gen, v *vec) {
		size := g.size()
		t := hData + uint64(g.r.IntN(hWindow-size+1))
		var b []byte
		if size == 2 {
			b = append(b, 0x66)
		}
		n := 4
		if g.mode == 64 {
			if g.r.IntN(2) == 0 {
				b = append(b, 0x67)
			} else {
				n = 8
			}
			if size == 8 {
				b = append(b, 0x48)
			}
		}
		b = append(b, byteOp(size, 0xa0))
		b = binary.LittleEndian.AppendUint64(b, t)
		v.insn = b[:len(b)-8+n]
	}},
	{"movzx movsx", func(g *gen, v *vec) {
		ssize := 1 + g.r.IntN(2)
		dsize := []int{2, 4, 8}[g.r.IntN(3)]
		if g.mode == 32 && dsize == 8 {
			dsize = 4
		}
		if ssize == 2 && dsize == 2 {
			dsize = 4
		}
		op := []byte{0x0f, 0xb6 + byte(ssize-1) + byte(g.r.IntN(2))*8}
		v.insn = g.encode(insn{opcode: op, size: dsize, regField: g.reg(), rm: g.rmOperand(v, ssize, true),
			forceREX: ssize == 1 && g.mode == 64 && g.r.IntN(2) == 0})
	}},
	{"movsxd", func(g *gen, v *vec) {
		if g.mode == 32 {
			v.insn = []byte{0x90}
			return
		}
		size := []int{8, 4}[g.r.IntN(2)]
		v.insn = g.encode(insn{opcode: []byte{0x63}, size: size, regField: g.reg(), rm: g.rmOperand(v, 4, true)})
	}},
	{"lea", func(g *gen, v *vec) {
		size := []int{2, 4, 8}[g.r.IntN(3)]
		if g.mode == 32 && size == 8 {
			size = 4
		}
		o := g.memOperand(&v.regs, 1, false, true)
		v.insn = g.encode(insn{opcode: []byte{0x8d}, size: size, regField: g.reg(), rm: o})
	}},
	{"push pop", func(g *gen, v *vec) {
		w := 8
		if g.mode == 32 {
			w = 4
		}
		var pfx []byte
		if g.r.IntN(5) == 0 {
			pfx, w = []byte{0x66}, 2
		}
		for i := range v.win {
			v.win[i] = byte(g.r.Uint32())
		}
		r := g.reg()
		switch g.r.IntN(7) {
		case 0, 1:
			v.insn = g.encode(insn{pfx: pfx, opcode: []byte{0x50 + byte(r&7)}, noModRM: true, rexB: r})
		case 2, 3:
			v.insn = g.encode(insn{pfx: pfx, opcode: []byte{0x58 + byte(r&7)}, noModRM: true, rexB: r})
		case 4:
			if g.r.IntN(2) == 0 {
				v.insn = append(pfx, 0x6a, byte(g.r.Uint32()))
			} else if w == 2 {
				v.insn = append(pfx, append([]byte{0x68}, g.imm(2)...)...)
			} else {
				v.insn = append(pfx, append([]byte{0x68}, g.imm(4)...)...)
			}
		case 5:
			v.insn = append(pfx, 0x9c) // pushf
		default: // push r/m (memory)
			o := g.memOperand(&v.regs, w, true, true)
			if o.base == 16 && g.mode == 64 {
				v.ripTarget = true
			}
			v.insn = g.encode(insn{pfx: pfx, opcode: []byte{0xff}, regField: 6, rm: o})
		}
		if sp := v.regs[rpn.RegRSP]; sp < hData+0x40 || sp > hData+hWindow {
			v.redo = true // the stack pointer was used to address the operand
		}
	}},
	{"leave ret", func(g *gen, v *vec) {
		land := hCode + 0x2000 + uint64(g.r.IntN(16))*0x80
		v.lands = append(v.lands, land)
		for i := range v.win {
			v.win[i] = byte(g.r.Uint32())
		}
		switch g.r.IntN(4) {
		case 0:
			bp := hData + 0x100 + uint64(g.r.IntN(0x100))
			if g.mode == 64 && g.r.IntN(4) == 0 {
				bp = hData + 0x100 // rbp aligned
			}
			v.regs[rpn.RegRBP] = bp
			v.insn = []byte{0xc9}
		case 1:
			v.insn = []byte{0xc3}
		case 2:
			v.insn = []byte{0xf3, 0xc3}
		default:
			v.insn = append([]byte{0xc2}, byte(g.r.IntN(0x40)), 0)
		}
		sp := v.regs[rpn.RegRSP]
		if v.insn[0] == 0xc9 {
			sp = v.regs[rpn.RegRBP]
		} else {
			binary.LittleEndian.PutUint64(v.win[sp-hData:], land)
		}
	}},
	{"call jmp indirect", func(g *gen, v *vec) {
		land := hCode + 0x2000 + uint64(g.r.IntN(16))*0x80
		v.lands = append(v.lands, land)
		w := 8
		if g.mode == 32 {
			w = 4
		}
		ext := byte(2 + 2*g.r.IntN(2))
		if g.r.IntN(2) == 0 {
			r := g.reg()
			for r == 4 {
				r = g.reg()
			}
			v.regs[encReg(r)] = land
			v.insn = g.encode(insn{opcode: []byte{0xff}, regField: int(ext), rm: operand{isReg: true, reg: r}})
			return
		}
		o := g.memOperand(&v.regs, w, true, true)
		if o.base == 16 && g.mode == 64 {
			v.ripTarget = true
		}
		pfx := []byte(nil)
		if ext == 4 && g.r.IntN(3) == 0 {
			pfx = []byte{0xf2} // bnd jmp, as in PLT entries
		}
		v.insn = g.encode(insn{pfx: pfx, opcode: []byte{0xff}, regField: int(ext), rm: o})
		v.ptr = land
		if sp := v.regs[rpn.RegRSP]; ext == 2 && (sp < hData+0x40 || sp > hData+hWindow) {
			v.redo = true // the call must push into the window
		}
	}},
	{"xchg", func(g *gen, v *vec) {
		size := g.size()
		if size > 1 && g.r.IntN(3) == 0 {
			r := g.reg()
			if r == 0 && g.mode == 32 || r == 0 && size != 8 {
				r = 1 // 90 is nop; 66 90 too
			}
			v.insn = g.encode(insn{opcode: []byte{0x90 + byte(r&7)}, size: size, noModRM: true, rexB: r})
			return
		}
		v.insn = g.encode(insn{opcode: []byte{byteOp(size, 0x86)}, size: size, regField: g.reg(), rm: operand{isReg: true, reg: g.reg()}})
	}},
	{"cmov setcc", func(g *gen, v *vec) {
		cc := byte(g.r.IntN(16))
		if g.r.IntN(2) == 0 {
			v.insn = g.encode(insn{opcode: []byte{0x0f, 0x90 + cc}, size: 1, rm: operand{isReg: true, reg: g.reg()},
				forceREX: g.mode == 64 && g.r.IntN(2) == 0})
			return
		}
		size := []int{2, 4, 8}[g.r.IntN(3)]
		if g.mode == 32 && size == 8 {
			size = 4
		}
		v.insn = g.encode(insn{opcode: []byte{0x0f, 0x40 + cc}, size: size, regField: g.reg(), rm: g.rmOperand(v, size, true)})
	}},
	{"cbw cwd flags", func(g *gen, v *vec) {
		ops := [][]byte{{0x66, 0x98}, {0x98}, {0x66, 0x99}, {0x99}, {0xf8}, {0xf9}, {0xf5}, {0xfc}, {0xfd}}
		if g.mode == 64 {
			ops = append(ops, []byte{0x48, 0x98}, []byte{0x48, 0x99})
		}
		v.insn = ops[g.r.IntN(len(ops))]
	}},
	{"nop", func(g *gen, v *vec) {
		ops := [][]byte{{0x90}, {0x66, 0x90}, {0xf3, 0x90}, {0xf3, 0x0f, 0x1e, 0xfa}, {0xf3, 0x0f, 0x1e, 0xfb},
			{0x0f, 0x1f, 0x00}, {0x0f, 0x1f, 0x40, 0x00}, {0x0f, 0x1f, 0x44, 0x00, 0x00},
			{0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00}, {0x0f, 0x1f, 0x80, 0, 0, 0, 0},
			{0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0}, {0x66, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0},
			{0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0}, {0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0}}
		if g.r.IntN(3) == 0 {
			// multi-byte nop and prefetch with a random operand: neither touches memory
			o := g.memOperand(&v.regs, 1, false, true)
			if g.r.IntN(2) == 0 {
				v.insn = g.encode(insn{opcode: []byte{0x0f, 0x1f}, size: []int{2, 4}[g.r.IntN(2)], regField: 0, rm: o})
			} else {
				v.insn = g.encode(insn{opcode: []byte{0x0f, 0x18}, regField: g.r.IntN(4), rm: o})
			}
			return
		}
		v.insn = ops[g.r.IntN(len(ops))]
	}},
}

// branchFamilies produce Branch-class vectors.
var branchFamilies = []family{
	{"jcc", func(g *gen, v *vec) {
		cc := byte(g.r.IntN(16))
		if g.r.IntN(2) == 0 {
			v.insn = []byte{0x70 + cc, 0}
		} else {
			v.insn = []byte{0x0f, 0x80 + cc, 0, 0, 0, 0}
		}
	}},
	{"jmp call", func(g *gen, v *vec) {
		switch g.r.IntN(3) {
		case 0:
			v.insn = []byte{0xeb, 0}
		case 1:
			v.insn = []byte{0xe9, 0, 0, 0, 0}
		default:
			v.insn = []byte{0xe8, 0, 0, 0, 0}
		}
	}},
	{"loop jrcxz", func(g *gen, v *vec) {
		op := 0xe0 + byte(g.r.IntN(4))
		v.regs[rpn.RegRCX] = []uint64{0, 1, 2, 0x100000000, 0x100000001, 0x10000, 0x10001, g.val()}[g.r.IntN(8)]
		if g.mode == 32 {
			v.regs[rpn.RegRCX] &= 0xffffffff
		}
		if g.r.IntN(3) == 0 {
			v.insn = []byte{0x67, op, 0}
		} else {
			v.insn = []byte{op, 0}
		}
	}},
}

// aimBranch sets the displacement of a relative branch (its last 1 or 4
// bytes) so the target is clear of the instruction and its fall-through
// landing, and records the landing.
func (g *gen) aimBranch(v *vec) {
	n := len(v.insn)
	rel8 := v.insn[n-2] >= 0x70 && v.insn[n-2] <= 0x7f || v.insn[n-2] == 0xeb || v.insn[n-2] >= 0xe0 && v.insn[n-2] <= 0xe3
	var rel int64
	for {
		if rel8 {
			rel = int64(g.r.IntN(256) - 128)
		} else {
			rel = int64(g.r.IntN(0x1800)) - 0xc00
		}
		t := int64(hX) + int64(n) + rel
		if t+80 <= int64(hX) || t >= int64(hX)+int64(n)+80 {
			break
		}
	}
	if rel8 {
		v.insn[n-1] = byte(int8(rel))
	} else {
		binary.LittleEndian.PutUint32(v.insn[n-4:], uint32(int32(rel)))
	}
	v.lands = append(v.lands, uint64(int64(hX)+int64(n)+rel))
}

func genVectors(t *testing.T, mode int, seed uint64, perFamily int) []vec {
	g := &gen{r: rand.New(rand.NewPCG(seed, uint64(mode))), mode: mode}
	var out []vec
	for _, f := range families {
		for i := 0; i < perFamily; i++ {
			v := vec{want: Emulate}
			v.regs = g.state()
			f.gen(g, &v)
			if v.redo {
				i--
				continue
			}
			out = append(out, v)
		}
	}
	for _, f := range branchFamilies {
		for i := 0; i < perFamily; i++ {
			v := vec{want: Branch}
			v.regs = g.state()
			f.gen(g, &v)
			g.aimBranch(&v)
			out = append(out, v)
		}
	}
	// Faulting reads: the emulator must give up, the CPU faults.
	for i := 0; i < 50; i++ {
		v := vec{want: Emulate, fault: true}
		v.regs = g.state()
		r := g.reg()
		for r == 4 {
			r = g.reg()
		}
		v.regs[encReg(r)] = []uint64{0, 0x1000, 0xdead0000, 0x7ffffffff000}[g.r.IntN(4)]
		if mode == 32 {
			v.regs[encReg(r)] &= 0xffffffff
		}
		v.insn = g.encode(insn{opcode: []byte{0x8b}, size: 4, regField: g.reg(), rm: operand{base: r, index: -1, scale: 1, dsize: 1, disp: 8}})
		out = append(out, v)
	}
	// Finish rip-relative operands (aim them at readable data) and
	// pointers (store the target where the operand points).
	for i := range out {
		v := &out[i]
		in, err := Decode(v.insn, hX, mode)
		if err != nil {
			t.Fatalf("vector % x: %v", v.insn, err)
		}
		if v.ripTarget {
			if in.RIPDispOff < 0 {
				t.Fatalf("rip-relative vector % x has no rip displacement", v.insn)
			}
			data := make([]byte, 256)
			for j := range data {
				data[j] = byte(g.r.Uint32())
			}
			off := uint64(g.r.IntN(256 - 8))
			binary.LittleEndian.PutUint32(v.insn[in.RIPDispOff:], uint32(hRIPData+off-(hX+uint64(in.Len))))
			v.code = append(v.code, chunk{hRIPData, data})
			in, _ = Decode(v.insn, hX, mode)
		}
		if v.ptr != 0 {
			e := emu{in: &in, r: v.regs}
			var m x86asm.Mem
			for _, a := range in.Inst.Args {
				if mm, ok := a.(x86asm.Mem); ok {
					m = mm
				}
			}
			ea, ok := e.ea(m, false)
			w := uint64(in.stackWidth())
			var dst []byte
			switch {
			case !ok:
			case ea >= hData && ea+w <= hData+hWindow:
				dst = v.win[ea-hData:]
			case v.ripTarget && ea >= hRIPData && ea+w <= hRIPData+256:
				dst = v.code[len(v.code)-1].b[ea-hRIPData:]
			}
			if dst == nil {
				t.Fatalf("`%s`: pointer operand at %#x is outside the window", in.String(), ea)
			}
			var p [8]byte
			binary.LittleEndian.PutUint64(p[:], v.ptr)
			copy(dst[:w], p[:])
		}
	}
	return out
}

// TestEmulateAgainstCPU runs every emulated instruction form on the CPU
// (testdata/harness.c) and in the emulator from the same random state,
// and compares registers, rflags and memory.
func TestEmulateAgainstCPU(t *testing.T) {
	for _, mode := range []int{64, 32} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			h := newHarness(t)
			if mode == 32 && !h.compat32(t) {
				testkit.SkipOrFail(t, "no 32-bit compatibility mode (a kernel without IA32 emulation)")
			}
			per := 400
			if testing.Short() {
				per = 60
			}
			vecs := genVectors(t, mode, 1, per)
			checkVectors(t, h, mode, vecs)
		})
	}
}

func checkVectors(t *testing.T, h *harness, mode int, vecs []vec) {
	t.Helper()
	reqs := make([]request, len(vecs))
	insns := make([]Insn, len(vecs))
	scen := make([]scenario, len(vecs))
	for i := range vecs {
		v := &vecs[i]
		in, err := Decode(v.insn, hX, mode)
		if err != nil {
			t.Fatalf("vector %d % x: %v", i, v.insn, err)
		}
		insns[i] = in
		s := &scen[i]
		*s = scenario{mode: mode, entry: hX, regs: v.regs, window: v.win,
			landings: append([]uint64{hX + uint64(in.Len)}, v.lands...)}
		s.code = append([]chunk{{hX, v.insn}}, v.code...)
		reqs[i] = h.request(s)
	}
	replies := h.runAll(t, reqs)
	fails, counts := 0, map[string]int{}
	for i := range vecs {
		v, in, rep := &vecs[i], &insns[i], &replies[i]
		counts[strings.Fields(in.String())[0]]++
		if in.Class != v.want {
			t.Errorf("`%s` (% x): class %v (%s), want %v", in, v.insn, in.Class, in.Why, v.want)
			fails++
			continue
		}
		regs := v.regs
		regs[rpn.RegRIP] = hX
		win := v.win
		mem := &testMem{window: &win}
		for _, c := range reqs[i].chunks[1:] {
			if c.addr >= hCode && c.addr < hFar+0x1000 {
				mem.code = append(mem.code, c)
			}
		}
		var ok bool
		if in.Class == Branch {
			ok = EmulateBranch(in, &regs, mem)
		} else {
			ok = EmulateInsn(in, &regs, mem)
		}
		native := rep.signo == 0
		if ok != native {
			t.Errorf("`%s` (% x): emulator ok=%v, cpu signal %d at %#x\n  regs in: %s", in, v.insn, ok, rep.signo, rep.faultRIP, fmtRegs(mode, &v.regs))
			fails++
		} else if ok {
			if d := diffRegs(mode, &rep.regs, &regs); d != "" {
				t.Errorf("`%s` (% x):%s\n  regs in: %s", in, v.insn, d, fmtRegs(mode, &v.regs))
				fails++
			} else if win != [hWindow]byte(rep.data[:hWindow]) {
				t.Errorf("`%s` (% x): memory differs", in, v.insn)
				fails++
			}
			if regs[rpn.RegRIP] == 0 && v.fault {
				t.Errorf("fault vector did not fault")
			}
		}
		if fails > 20 {
			t.Fatal("too many failures")
		}
	}
	t.Logf("%d vectors on the CPU in %d-bit mode, %d mnemonics", len(vecs), mode, len(counts))
}

func fmtRegs(mode int, r *Regs) string {
	var b strings.Builder
	for i := 0; i < 18; i++ {
		if mode == 32 && i >= 8 && i < 16 {
			continue
		}
		fmt.Fprintf(&b, "%s=%#x ", regNames[i], r[i])
	}
	return b.String()
}
