package unwind

import (
	"encoding/binary"
	"testing"
)

// eval on the expressions CFI has: a PLT entry's CFA (rsp+8, 8 more once
// rip is past the push in the entry), a signal frame's (the saved rsp in
// the ucontext: breg7 160, deref), and constants and arithmetic; an
// operation it does not take, or a register it has no value of, is an
// error, never a wrong value.
func TestEval(t *testing.T) {
	var regs Regs
	var valid [NumRegs]bool
	for i := range valid {
		valid[i] = true
	}
	mem := func(addr uint64, p []byte) bool {
		if addr != 0x7000+160 || len(p) != 8 {
			return false
		}
		binary.LittleEndian.PutUint64(p, 0x7ffd1234)
		return true
	}
	plt := []byte{0x77, 8, 0x80, 0, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22} // breg7 8; breg16 0; lit15; and; lit11; ge; lit3; shl; plus
	for rip, want := range map[uint64]uint64{0x401030: 0x1008, 0x40103a: 0x1008, 0x40103b: 0x1010, 0x40103f: 0x1010} {
		regs[RSP], regs[RIP] = 0x1000, rip
		if v, err := eval(plt, &regs, &valid, mem); err != nil || v != want {
			t.Errorf("PLT CFA at rip %#x: %#x %v, want %#x", rip, v, err, want)
		}
	}
	regs[RSP] = 0x7000
	if v, err := eval([]byte{0x77, 0xa0, 0x01, 0x06}, &regs, &valid, mem); err != nil || v != 0x7ffd1234 {
		t.Errorf("signal frame CFA: %#x %v", v, err)
	}
	// DW_CFA_expression's address: the CFA pushed first
	if v, err := eval([]byte{0x23, 16}, &regs, &valid, mem, 0x9000); err != nil || v != 0x9010 {
		t.Errorf("plus_uconst on the CFA: %#x %v", v, err)
	}
	for _, c := range []struct {
		expr []byte
		want uint64
	}{
		{[]byte{0x08, 0xff}, 0xff},                            // const1u
		{[]byte{0x09, 0xff}, ^uint64(0)},                      // const1s -1
		{[]byte{0x0b, 0xfe, 0xff}, ^uint64(1)},                // const2s -2
		{[]byte{0x0c, 1, 0, 0, 0x80}, 0x80000001},             // const4u
		{[]byte{0x11, 0x7f}, ^uint64(0)},                      // consts -1
		{[]byte{0x10, 0x80, 0x01}, 128},                       // constu
		{[]byte{0x35, 0x32, 0x1c}, 3},                         // 5 - 2
		{[]byte{0x35, 0x12, 0x1e}, 25},                        // 5 dup mul
		{[]byte{0x31, 0x32, 0x16, 0x1c}, 1},                   // 1 2 swap minus
		{[]byte{0x31, 0x32, 0x13}, 1},                         // drop
		{[]byte{0x09, 0xf0, 0x32, 0x26}, ^uint64(3)},          // -16 >> 2 arithmetic
		{[]byte{0x31, 0x32, 0x2d, 0x31, 0x32, 0x2b, 0x21}, 1}, // 1<2 | 1>2
	} {
		if v, err := eval(c.expr, &regs, &valid, mem); err != nil || v != c.want {
			t.Errorf("% x: %#x %v, want %#x", c.expr, v, err, c.want)
		}
	}
	valid[RBX] = false
	for _, bad := range [][]byte{
		{0x73, 0},    // breg3: rbx unknown in this frame
		{0x90, 1},    // DW_OP_regx: not CFI's
		{0x22},       // plus on an empty stack
		{0x0c, 1, 2}, // const4u cut short
		{},           // nothing on the stack
		{0x30, 0x06}, // deref of an address it cannot read
	} {
		if v, err := eval(bad, &regs, &valid, mem); err == nil {
			t.Errorf("% x: %#x, want an error", bad, v)
		}
	}
}
