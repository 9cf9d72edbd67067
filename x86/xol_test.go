package x86

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/rpn"
)

func mustDecode(t testing.TB, b []byte, addr uint64, mode int) Insn {
	t.Helper()
	in, err := Decode(b, addr, mode)
	if err != nil {
		t.Fatalf("decode % x: %v", b, err)
	}
	return in
}

func TestPrepareXOLRebase(t *testing.T) {
	const addr = 0x555555554000
	cases := []struct {
		name string
		code []byte
	}{
		{"mov 0x100(%rip),%rax", []byte{0x48, 0x8b, 0x05, 0x00, 0x01, 0x00, 0x00}},
		{"lea -0x10(%rip),%rdi", []byte{0x48, 0x8d, 0x3d, 0xf0, 0xff, 0xff, 0xff}},
		{"cmpb $0x7f,0x40(%rip) (imm after disp)", []byte{0x80, 0x3d, 0x40, 0x00, 0x00, 0x00, 0x7f}},
		{"movl $0x12345678,0x40(%rip)", []byte{0xc7, 0x05, 0x40, 0x00, 0x00, 0x00, 0x78, 0x56, 0x34, 0x12}},
		{"vmovdqu 0x200(%rip),%ymm0 (VEX)", []byte{0xc5, 0xfe, 0x6f, 0x05, 0x00, 0x02, 0x00, 0x00}},
		{"vmovdqu64 0x200(%rip),%zmm1 (EVEX)", []byte{0x62, 0xe1, 0xfe, 0x48, 0x6f, 0x0d, 0x00, 0x02, 0x00, 0x00}},
		{"jmp *0x2fe2(%rip) (plt)", []byte{0xff, 0x25, 0xe2, 0x2f, 0x00, 0x00}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := mustDecode(t, c.code, addr, 64)
			if in.RIPDispOff < 0 {
				t.Fatalf("`%s`: no rip-relative displacement found", in.String())
			}
			old := int64(int32(binary.LittleEndian.Uint32(c.code[in.RIPDispOff:])))
			target := addr + uint64(in.Len) + uint64(old)
			for _, slot := range []uint64{addr + 0x1000, addr - 0x7fff0000, addr + 0x7fff0000} {
				out, err := PrepareXOL(&in, slot, true)
				if err != nil {
					t.Fatalf("slot %#x: %v", slot, err)
				}
				if len(out) != SlotSize {
					t.Fatalf("slot is %d bytes, want %d", len(out), SlotSize)
				}
				nd := int64(int32(binary.LittleEndian.Uint32(out[in.RIPDispOff:])))
				if got := slot + uint64(in.Len) + uint64(nd); got != target {
					t.Errorf("slot %#x: operand addresses %#x, want %#x", slot, got, target)
				}
				// everything but the displacement is the original instruction
				cp := append([]byte(nil), out[:in.Len]...)
				copy(cp[in.RIPDispOff:], c.code[in.RIPDispOff:in.RIPDispOff+4])
				if !bytes.Equal(cp, c.code) {
					t.Errorf("slot bytes % x, instruction % x", out[:in.Len], c.code)
				}
				// the slot re-decodes to the same instruction with the new displacement
				again := mustDecode(t, out, slot, 64)
				if again.Len != in.Len || again.RIPDispOff != in.RIPDispOff {
					t.Errorf("slot re-decodes as `%s` (%d bytes)", again.String(), again.Len)
				}
			}
			// out of reach: 3 GiB away
			_, err := PrepareXOL(&in, addr+3<<30, true)
			if err == nil || !strings.Contains(err.Error(), "2 GiB") {
				t.Errorf("far slot: error %v, want a ±2 GiB error", err)
			}
		})
	}
}

func TestPrepareXOLJumpBack(t *testing.T) {
	in := mustDecode(t, []byte{0x48, 0x0f, 0xc8}, 0x401000, 64) // bswap %rax
	if in.Class != Boost {
		t.Fatalf("bswap: class %v, want boost", in.Class)
	}
	// near: e9 rel32 to Addr+Len
	slot := uint64(0x7f0000000000)
	in.Addr = slot - 0x10000000
	out, err := PrepareXOL(&in, slot, true)
	if err != nil {
		t.Fatal(err)
	}
	if out[3] != 0xe9 {
		t.Fatalf("near jump back: % x", out)
	}
	rel := int64(int32(binary.LittleEndian.Uint32(out[4:])))
	if got := slot + 3 + 5 + uint64(rel); got != in.Addr+3 {
		t.Errorf("near jump back lands at %#x, want %#x", got, in.Addr+3)
	}
	// far: jmp *0(%rip); .quad Addr+Len
	in.Addr = 0x401000
	out, err = PrepareXOL(&in, slot, true)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out[3:9], []byte{0xff, 0x25, 0, 0, 0, 0}) || binary.LittleEndian.Uint64(out[9:]) != 0x401003 {
		t.Errorf("far jump back: % x", out)
	}
	for _, b := range out[17:] {
		if b != 0xcc {
			t.Errorf("padding is not int3: % x", out)
			break
		}
	}
	// the longest instruction plus the absolute jump fits
	long := mustDecode(t, []byte{0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0}, 0x401000, 64)
	if long.Len != 15 {
		t.Fatalf("15-byte nop decodes as %d bytes", long.Len)
	}
	long.Class = Step
	if out, err := PrepareXOL(&long, slot, false); err != nil || out[15] != 0xff {
		t.Errorf("15-byte instruction with far jump: % x, %v", out, err)
	}
	// 32-bit: absolute operands are not rebased, jump back is rel32 (wraps)
	in32 := mustDecode(t, []byte{0xa1, 0x00, 0x01, 0x00, 0x10}, 0x8048000, 32) // mov 0x10000100,%eax
	out, err = PrepareXOL(&in32, 0xf7000000, false)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out[:5], in32.Bytes) || out[5] != 0xe9 {
		t.Errorf("32-bit slot: % x", out)
	}
	if got := uint32(0xf7000000+5+5) + binary.LittleEndian.Uint32(out[6:]); got != 0x8048005 {
		t.Errorf("32-bit jump back lands at %#x", got)
	}
}

func TestPrepareXOLRefuses(t *testing.T) {
	for _, code := range [][]byte{{0xeb, 0x10}, {0xe8, 0, 0, 0, 0}, {0x74, 0x02}, {0xcc}, {0x0f, 0x0b}} {
		in := mustDecode(t, code, 0x401000, 64)
		if _, err := PrepareXOL(&in, 0x402000, false); err == nil {
			t.Errorf("`%s` (%v): no error", in.String(), in.Class)
		}
	}
}

// mapMem is a sparse memory for fixup tests.
type mapMem map[uint64]byte

func (m mapMem) Read(a uint64, p []byte) bool {
	for i := range p {
		v, ok := m[a+uint64(i)]
		if !ok {
			return false
		}
		p[i] = v
	}
	return true
}

func (m mapMem) Write(a uint64, p []byte) bool {
	for i := range p {
		if _, ok := m[a+uint64(i)]; !ok {
			return false
		}
		m[a+uint64(i)] = p[i]
	}
	return true
}

func (m mapMem) put(a, v uint64, n int) {
	for i := 0; i < n; i++ {
		m[a+uint64(i)] = byte(v >> (8 * i))
	}
}

func (m mapMem) get(a uint64, n int) uint64 {
	var v uint64
	for i := 0; i < n; i++ {
		v |= uint64(m[a+uint64(i)]) << (8 * i)
	}
	return v
}

func TestFixupAfterStep(t *testing.T) {
	const addr, slot, sp = 0x401000, 0x7f0000001000, 0x7ffc0000
	t.Run("plain", func(t *testing.T) {
		in := mustDecode(t, []byte{0x48, 0x01, 0x07}, addr, 64) // add %rax,(%rdi)
		var r Regs
		r[rpn.RegRIP] = slot + 3
		if err := FixupAfterStep(&in, slot, &r, mapMem{}); err != nil || r[rpn.RegRIP] != addr+3 {
			t.Errorf("rip %#x, %v", r[rpn.RegRIP], err)
		}
		r[rpn.RegRIP] = slot + 1
		if err := FixupAfterStep(&in, slot, &r, mapMem{}); err == nil {
			t.Errorf("rip in the middle of the slot: no error")
		}
	})
	t.Run("call indirect", func(t *testing.T) {
		for _, code := range [][]byte{{0xff, 0xd0}, {0xff, 0x50, 0x08}, {0x41, 0xff, 0xd3}} {
			in := mustDecode(t, code, addr, 64)
			m := mapMem{}
			m.put(sp, slot+uint64(in.Len), 8)
			var r Regs
			r[rpn.RegRSP], r[rpn.RegRIP] = sp, 0x12345678
			if err := FixupAfterStep(&in, slot, &r, m); err != nil {
				t.Fatalf("`%s`: %v", in.String(), err)
			}
			if got := m.get(sp, 8); got != addr+uint64(in.Len) || r[rpn.RegRIP] != 0x12345678 {
				t.Errorf("`%s`: return address %#x, rip %#x", in.String(), got, r[rpn.RegRIP])
			}
			m.put(sp, 0x999, 8)
			if err := FixupAfterStep(&in, slot, &r, m); err == nil {
				t.Errorf("`%s`: wrong word on the stack accepted", in.String())
			}
		}
	})
	t.Run("ret and jmp leave rip", func(t *testing.T) {
		for _, code := range [][]byte{{0xc3}, {0xc2, 0x08, 0x00}, {0xff, 0xe0}, {0xff, 0x25, 0, 0, 0, 0}} {
			in := mustDecode(t, code, addr, 64)
			var r Regs
			r[rpn.RegRIP] = 0xabcdef
			if err := FixupAfterStep(&in, slot, &r, mapMem{}); err != nil || r[rpn.RegRIP] != 0xabcdef {
				t.Errorf("`%s`: rip %#x, %v", in.String(), r[rpn.RegRIP], err)
			}
		}
	})
	t.Run("pushf clears TF", func(t *testing.T) {
		in := mustDecode(t, []byte{0x9c}, addr, 64)
		m := mapMem{}
		m.put(sp, 0x246|FlagTF, 8)
		var r Regs
		r[rpn.RegRSP], r[rpn.RegRIP] = sp, slot+1
		if err := FixupAfterStep(&in, slot, &r, m); err != nil || m.get(sp, 8) != 0x246 {
			t.Errorf("pushed flags %#x, %v", m.get(sp, 8), err)
		}
	})
	t.Run("syscall", func(t *testing.T) {
		in := mustDecode(t, []byte{0x0f, 0x05}, addr, 64)
		var r Regs
		r[rpn.RegRIP], r[rpn.RegRCX], r[rpn.RegR11] = slot+2, slot+2, 0x246|FlagTF
		if err := FixupAfterStep(&in, slot, &r, mapMem{}); err != nil || r[rpn.RegRCX] != addr+2 || r[rpn.RegR11] != 0x246 || r[rpn.RegRIP] != addr+2 {
			t.Errorf("rcx %#x r11 %#x rip %#x, %v", r[rpn.RegRCX], r[rpn.RegR11], r[rpn.RegRIP], err)
		}
		r[rpn.RegRIP] = 0x7000 // rt_sigreturn, execve
		if err := FixupAfterStep(&in, slot, &r, mapMem{}); err != nil || r[rpn.RegRIP] != 0x7000 {
			t.Errorf("syscall returning elsewhere: rip %#x, %v", r[rpn.RegRIP], err)
		}
	})
	t.Run("rep string", func(t *testing.T) {
		in := mustDecode(t, []byte{0xf3, 0xaa}, addr, 64) // rep stos
		var r Regs
		r[rpn.RegRIP], r[rpn.RegRCX] = slot, 5
		if err := FixupAfterStep(&in, slot, &r, mapMem{}); !errors.Is(err, ErrStepAgain) {
			t.Errorf("iterations left: %v, want ErrStepAgain", err)
		}
		r[rpn.RegRIP], r[rpn.RegRCX] = slot+2, 0
		if err := FixupAfterStep(&in, slot, &r, mapMem{}); err != nil || r[rpn.RegRIP] != addr+2 {
			t.Errorf("done: rip %#x, %v", r[rpn.RegRIP], err)
		}
	})
}

func TestSlotPC(t *testing.T) {
	in := mustDecode(t, []byte{0x48, 0x01, 0x07}, 0x401000, 64)
	for _, c := range []struct {
		pc, want uint64
		ok       bool
	}{{0x9000, 0x401000, true}, {0x9003, 0x401003, true}, {0x9010, 0x401003, true}, {0x9001, 0, false}, {0x9020, 0, false}, {0x8fff, 0, false}} {
		got, ok := SlotPC(&in, 0x9000, c.pc)
		if got != c.want || ok != c.ok {
			t.Errorf("SlotPC(%#x) = %#x, %v; want %#x, %v", c.pc, got, ok, c.want, c.ok)
		}
	}
}

// xolCase is an instruction run both in place and from a slot.
type xolCase struct {
	code []byte
	mode int
	far  bool                // put the slot more than 2 GiB away
	prep func(r *Regs)       // adjust registers
	rip  func(in *Insn) bool // the operand is rip-relative: aim it into the window
}

const (
	hSlot    = hCode + 0x5000
	hXOLLand = hCode + 0x6000 // where indirect calls and jumps go
)

// TestXOLNative runs each instruction natively at its address and,
// prepared by PrepareXOL, from a slot (which the harness enters directly:
// the slot's jump back brings it to the same landing), then applies
// FixupAfterStep to the slot run and compares registers and memory. The
// CPU runs the slot without a single-step; ptrace_test.go does the same
// under a real PTRACE_SINGLESTEP.
func TestXOLNative(t *testing.T) {
	h := newHarness(t)
	r := rand.New(rand.NewPCG(7, 7))
	setRSPRDI := func(regs *Regs) {
		regs[rpn.RegRSP] = hData + 0x300
		regs[rpn.RegRDI] = hData + 0x40
		regs[rpn.RegRAX] = hXOLLand
		regs[rpn.RegRDX] = 0
		regs[rpn.RegRCX] = 7
	}
	cases := []xolCase{
		{code: []byte{0x48, 0x8b, 0x05, 0, 0, 0, 0}},                                      // mov rel(%rip),%rax
		{code: []byte{0x48, 0x8d, 0x05, 0, 0, 0, 0}},                                      // lea rel(%rip),%rax
		{code: []byte{0x03, 0x0d, 0, 0, 0, 0}},                                            // add rel(%rip),%ecx
		{code: []byte{0x48, 0x89, 0x05, 0, 0, 0, 0}},                                      // mov %rax,rel(%rip)
		{code: []byte{0xff, 0x05, 0, 0, 0, 0}},                                            // incl rel(%rip)
		{code: []byte{0x80, 0x3d, 0, 0, 0, 0, 0x7f}},                                      // cmpb $0x7f,rel(%rip)
		{code: []byte{0xc7, 0x05, 0, 0, 0, 0, 0x78, 0x56, 0x34, 0x12}},                    // movl $imm,rel(%rip)
		{code: []byte{0x6b, 0x05, 0, 0, 0, 0, 0x03}},                                      // imul $3,rel(%rip),%eax
		{code: []byte{0xf0, 0x0f, 0xc1, 0x05, 0, 0, 0, 0}},                                // lock xadd %eax,rel(%rip)
		{code: []byte{0xc1, 0x25, 0, 0, 0, 0, 0x03}},                                      // shll $3,rel(%rip)
		{code: []byte{0xff, 0x35, 0, 0, 0, 0}},                                            // push rel(%rip)
		{code: []byte{0xff, 0x15, 0, 0, 0, 0}},                                            // call *rel(%rip)
		{code: []byte{0xff, 0x25, 0, 0, 0, 0}},                                            // jmp *rel(%rip)
		{code: []byte{0xc5, 0xfa, 0x6f, 0x05, 0, 0, 0, 0}},                                // vmovdqu rel(%rip),%xmm0 (VEX)
		{code: []byte{0xff, 0xd0}},                                                        // call *%rax
		{code: []byte{0xff, 0x57, 0x08}},                                                  // call *0x8(%rdi)
		{code: []byte{0x48, 0x0f, 0xc8}},                                                  // bswap %rax
		{code: []byte{0x48, 0x0f, 0xc8}, far: true},                                       // bswap %rax, absolute jump back
		{code: []byte{0x48, 0xf7, 0xf1}},                                                  // div %rcx
		{code: []byte{0x48, 0x87, 0x04, 0x24}},                                            // xchg %rax,(%rsp)
		{code: []byte{0x48, 0x01, 0x07}, far: true},                                       // add %rax,(%rdi)
		{code: []byte{0xf3, 0xaa}},                                                        // rep stos
		{code: []byte{0x9c}},                                                              // pushf
		{code: []byte{0x0f, 0x05}, prep: func(r *Regs) { r[rpn.RegRAX] = 39 }},            // syscall getpid
		{code: []byte{0x0f, 0x05}, far: true, prep: func(r *Regs) { r[rpn.RegRAX] = 39 }}, // from far away
		{code: []byte{0xa1, 0x00, 0x01, 0x00, 0x10}, mode: 32},                            // mov 0x10000100,%eax
		{code: []byte{0xff, 0xd0}, mode: 32},                                              // call *%eax
		{code: []byte{0x53}, mode: 32},                                                    // push %ebx
		{code: []byte{0x0f, 0xaf, 0xc1}, mode: 32},                                        // imul %ecx,%eax
	}
	var reqs []request
	var insns []Insn
	var slots []uint64
	var states []Regs
	has32 := h.compat32(t)
	for _, c := range cases {
		mode := c.mode
		if mode == 0 {
			mode = 64
		}
		if mode == 32 && !has32 {
			continue
		}
		code := append([]byte(nil), c.code...)
		in := mustDecode(t, code, hX, mode)
		if in.RIPDispOff >= 0 {
			// aim the operand into the window, 8-aligned
			target := hData + 0x80 + uint64(r.IntN(16))*8
			binary.LittleEndian.PutUint32(code[in.RIPDispOff:], uint32(target-(hX+uint64(in.Len))))
			in = mustDecode(t, code, hX, mode)
		}
		if in.Class == Branch || in.Class == Refuse {
			t.Fatalf("`%s`: class %v", in.String(), in.Class)
		}
		slot := uint64(hSlot)
		if c.far {
			slot = hFar + 0x100
		}
		sb, err := PrepareXOL(&in, slot, in.Class == Boost)
		if err != nil {
			t.Fatalf("`%s`: %v", in.String(), err)
		}
		g := &gen{r: r, mode: mode}
		regs := g.state()
		setRSPRDI(&regs)
		if c.prep != nil {
			c.prep(&regs)
		}
		var win [hWindow]byte
		for i := range win {
			win[i] = byte(r.Uint32())
		}
		for i := 0x40; i < 0x100; i += 8 { // pointers for indirect calls and jumps
			binary.LittleEndian.PutUint64(win[i:], hXOLLand)
		}
		lands := []uint64{hX + uint64(in.Len), hXOLLand}
		orig := scenario{mode: mode, entry: hX, regs: regs, window: win, code: []chunk{{hX, code}}, landings: lands}
		inSlot := orig
		inSlot.entry = slot
		inSlot.code = []chunk{{slot, sb}}
		reqs = append(reqs, h.request(&orig), h.request(&inSlot))
		insns = append(insns, in)
		slots = append(slots, slot)
		states = append(states, regs)
	}
	rep := h.runAll(t, reqs)
	for i := range insns {
		in, slot := &insns[i], slots[i]
		a, b := rep[2*i], rep[2*i+1]
		if a.signo != 0 || b.signo != 0 {
			t.Errorf("`%s`: signal %d at %#x in place, %d at %#x in the slot", in.String(), a.signo, a.faultRIP, b.signo, b.faultRIP)
			continue
		}
		regs := b.regs
		var win [hWindow]byte
		copy(win[:], b.data[:])
		// The slot ran on through its jump back; a single-step would have
		// stopped at slot+Len with the same registers.
		if regs[rpn.RegRIP] == hX+uint64(in.Len) {
			regs[rpn.RegRIP] = in.truncIP(slot + uint64(in.Len))
		}
		if err := FixupAfterStep(in, slot, &regs, &testMem{window: &win}); err != nil {
			t.Errorf("`%s`: %v", in.String(), err)
			continue
		}
		if d := diffRegs(in.Mode, &a.regs, &regs); d != "" {
			t.Errorf("`%s` (%v) from slot %#x:%s", in.String(), in.Class, slot, d)
		}
		if !bytes.Equal(a.data[:hWindow], win[:]) {
			t.Errorf("`%s` from slot %#x: memory differs", in.String(), slot)
		}
	}
	t.Logf("%d instructions run in place and out of line", len(insns))
}
