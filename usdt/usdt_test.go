package usdt

import (
	"encoding/binary"
	"testing"

	"github.com/gprobes/gprobes/rpn"
)

// TestRead: each operand form's value at a hit, from the registers and
// memory given, sign- or zero-extended from the note's size.
func TestRead(t *testing.T) {
	args, err := ParseArgs("-4@%eax -2@%dx 2@%dx -8@8(%rsp) 4@-4(%rbp) 1@%sil 4@$-5")
	if err != nil {
		t.Fatal(err)
	}
	regs := map[rpn.Reg]uint64{rpn.RegRAX: 0xdead_beef_ffff_fffe, rpn.RegRDX: 0x1234_fff0, rpn.RegRSP: 0x1000, rpn.RegRBP: 0x2004, rpn.RegRSI: 0x1ff}
	mem := map[uint64][]byte{0x1008: le(^uint64(6)), 0x2000: le(0xffff_fff9)}
	reg := func(r rpn.Reg) (uint64, bool) { v, ok := regs[r]; return v, ok }
	read := func(a uint64, p []byte) bool {
		b, ok := mem[a]
		if !ok || len(p) > len(b) {
			return false
		}
		copy(p, b)
		return true
	}
	want := []int64{-2, -16, 0xfff0, -7, 0xffff_fff9, 0xff, -5}
	for i, a := range args {
		v, ok := a.Read(reg, read)
		if !ok || int64(v) != want[i] {
			t.Errorf("argument %d %+v: %#x %v, want %#x", i+1, a, v, ok, uint64(want[i]))
		}
	}
	// memory that cannot be read, a register not there: false
	if _, ok := args[3].Read(reg, func(uint64, []byte) bool { return false }); ok {
		t.Error("unreadable memory read")
	}
	if _, ok := args[0].Read(func(rpn.Reg) (uint64, bool) { return 0, false }, read); ok {
		t.Error("a missing register read")
	}
}

func le(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
