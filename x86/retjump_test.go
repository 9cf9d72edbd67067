package x86

import (
	"strings"
	"testing"
)

// PlanRetJump and PlanJumpFill on hand-made functions at 0x1000.
func TestPlanRetJump(t *testing.T) {
	const at = 0x1000
	cases := []struct {
		name  string
		fn    []byte
		after []byte
		ret   uint64
		first uint64 // the jump's address; 0: refused
		n     int    // covered instructions
		why   string
	}{
		{"ret and int3 fill", []byte{0xc3}, []byte{0xcc, 0xcc, 0xcc, 0xcc}, at, at, 1, ""},
		{"ret and a nopl", []byte{0xc3}, []byte{0x0f, 0x1f, 0x40, 0x00}, at, at, 1, ""},
		{"ret and too little fill", []byte{0xc3}, []byte{0xcc, 0xcc}, at, 0, 0, "no room"},
		// add $1,%rax; pop %rbx; ret
		{"instructions before", []byte{0x48, 0x83, 0xc0, 0x01, 0x5b, 0xc3}, nil, at + 5, at, 3, ""},
		// call .+0 (to the add); add $1,%rax; ret: a call's return at the first covered is fine
		{"a call returning to the first", []byte{0xe8, 0, 0, 0, 0, 0x48, 0x83, 0xc0, 0x01, 0xc3}, nil, at + 9, at + 5, 2, ""},
		// test; jne to the ret; mov $3,%eax; ret
		{"a branch inside", []byte{0x48, 0x85, 0xff, 0x75, 0x05, 0xb8, 3, 0, 0, 0, 0xc3}, nil, at + 10, 0, 0, "a branch at 0x1003 lands inside the covered bytes (at 0x100a)"},
		// call rel32; ret: the call cannot be covered
		{"a call before", []byte{0xe8, 0, 0, 0, 0, 0xc3}, nil, at + 5, 0, 0, "is a call in the middle of the covered bytes"},
	}
	for _, c := range cases {
		p := PlanRetJump(c.fn, at, c.ret, c.after, 64)
		switch {
		case c.first == 0 && (p.OK() || !strings.Contains(p.Reason, c.why)):
			t.Errorf("%s: %+v, want refused with %q", c.name, p, c.why)
		case c.first != 0 && (!p.OK() || p.Covered[0].Addr != c.first || len(p.Covered) != c.n || !IsRet(p.Covered[len(p.Covered)-1].Bytes)):
			t.Errorf("%s: %+v, want %d instructions from %#x ending with the ret", c.name, p, c.n, c.first)
		}
	}
	// a short function for an offset probe: xor %eax,%eax; ret, then fill
	if p := PlanJumpFill([]byte{0x31, 0xc0, 0xc3}, at, at, []byte{0x90, 0x90}, 64); !p.OK() || p.Len != JumpLen || len(p.Covered) != 2 {
		t.Errorf("xor; ret; 2 nops: %+v", p)
	}
	if p := PlanJumpFill([]byte{0x31, 0xc0, 0xc3}, at, at, []byte{0x90}, 64); p.OK() {
		t.Errorf("xor; ret; 1 nop: %+v, want refused (4 bytes)", p)
	}
}
