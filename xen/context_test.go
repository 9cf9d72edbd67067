package xen

import (
	"encoding/binary"
	"testing"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/rpn"
)

// The offsets are Xen 4.17's struct vcpu_guest_context (x86_64), as its
// public headers compile them (gcc offsetof).
func TestContextLayout(t *testing.T) {
	var c Context
	put := func(off int, v uint64) { binary.LittleEndian.PutUint64(c[off:], v) }
	put(520, 0x15)                                 // r15, first in cpu_user_regs
	put(600, 0xa)                                  // rax
	put(632, 0xd1)                                 // rdi, last general register
	put(648, 0xffffffff81000010)                   // rip
	binary.LittleEndian.PutUint16(c[656:], 0xe033) // cs of a 64-bit PV kernel
	put(664, 0x246)                                // rflags
	put(672, 0xffffc90000013f00)                   // rsp
	put(4984+3*8, 0x1234000)                       // ctrlreg[3]
	put(4984+4*8, 0x2660)                          // ctrlreg[4]
	put(5152, 0xffff888007a00000)                  // gs_base_kernel
	put(5160, 0x7f0000001000)                      // gs_base_user
	var r engine.Regs
	c.Regs(&r)
	for reg, want := range map[rpn.Reg]uint64{
		rpn.RegR15: 0x15, rpn.RegRAX: 0xa, rpn.RegRDI: 0xd1, rpn.RegRIP: 0xffffffff81000010,
		rpn.RegCS: 0xe033, rpn.RegRFLAGS: 0x246, rpn.RegRSP: 0xffffc90000013f00,
		rpn.RegCR3: 0x1234000, rpn.RegCR4: 0x2660, rpn.RegGSBase: 0xffff888007a00000,
	} {
		if r[reg] != want {
			t.Errorf("%v = %#x, want %#x", reg, r[reg], want)
		}
	}
	if c.CR(3) != 0x1234000 || PagingOf(c.CR(4), 64) != Paging4 {
		t.Errorf("cr3 %#x cr4 paging %v", c.CR(3), PagingOf(c.CR(4), 64))
	}
	r[rpn.RegRIP]++
	r[rpn.RegRSI] = 0x51
	c.SetRegs(&r)
	if c.RIP() != 0xffffffff81000011 || binary.LittleEndian.Uint64(c[624:]) != 0x51 || binary.LittleEndian.Uint64(c[5160:]) != 0x7f0000001000 {
		t.Errorf("SetRegs: rip %#x rsi %#x gs_user %#x", c.RIP(), binary.LittleEndian.Uint64(c[624:]), binary.LittleEndian.Uint64(c[5160:]))
	}
}
