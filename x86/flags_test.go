package x86

import (
	"testing"

	"github.com/gprobes/gprobes/rpn"
)

// Flag results worked out by hand from the SDM's definitions (the
// differential test checks the same functions against the CPU on random
// operands). C=CF P=PF A=AF Z=ZF S=SF O=OF.
const (
	C = FlagCF
	P = FlagPF
	A = FlagAF
	Z = FlagZF
	S = FlagSF
	O = FlagOF
)

func TestFlagTable(t *testing.T) {
	for _, c := range []struct {
		op          string
		size        int
		a, b, carry uint64
		r, f        uint64
	}{
		{"add", 1, 0x7f, 0x01, 0, 0x80, O | S | A},
		{"add", 1, 0xff, 0x01, 0, 0x00, C | P | A | Z},
		{"add", 1, 0x80, 0x80, 0, 0x00, C | P | Z | O},
		{"add", 1, 0x0f, 0x01, 0, 0x10, A},
		{"add", 2, 0x8000, 0xffff, 0, 0x7fff, C | P | O},
		{"add", 4, 0x7fffffff, 1, 0, 0x80000000, O | S | A | P},
		{"add", 8, 0xffffffffffffffff, 1, 0, 0, C | P | A | Z},
		{"add", 8, 0x8000000000000000, 0x8000000000000000, 0, 0, C | P | Z | O},
		{"adc", 1, 0xff, 0x00, 1, 0x00, C | P | A | Z},
		{"adc", 8, 0x7fffffffffffffff, 0, 1, 0x8000000000000000, O | S | A | P},
		{"adc", 4, 0xffffffff, 0xffffffff, 1, 0xffffffff, C | P | A | S},
		{"sub", 1, 0x00, 0x01, 0, 0xff, C | P | A | S},
		{"sub", 1, 0x80, 0x01, 0, 0x7f, O | A},
		{"sub", 4, 5, 5, 0, 0, Z | P},
		{"sub", 2, 0x0000, 0x8000, 0, 0x8000, C | P | S | O},
		{"sub", 8, 0, 1, 0, 0xffffffffffffffff, C | P | A | S},
		{"sub", 8, 0x8000000000000000, 1, 0, 0x7fffffffffffffff, O | A | P},
		{"sbb", 1, 0x00, 0x00, 1, 0xff, C | P | A | S},
		{"sbb", 4, 0x80000000, 0, 1, 0x7fffffff, O | A | P},
		{"sbb", 8, 5, 5, 1, 0xffffffffffffffff, C | P | A | S},
		{"and", 1, 0xf0, 0x0f, 0, 0, Z | P},
		{"xor", 4, 0x80000000, 0, 0, 0x80000000, S | P},
		{"or", 8, 0x8000000000000001, 0, 0, 0x8000000000000001, S},
		{"and", 2, 0xff, 0x03, 0, 0x03, P},
	} {
		var r, f uint64
		switch c.op {
		case "add", "adc":
			r, f = add(c.a, c.b, c.carry, c.size)
		case "sub", "sbb":
			r, f = sub(c.a, c.b, c.carry, c.size)
		case "and":
			r = c.a & c.b
			f = logic(r, c.size)
		case "or":
			r = c.a | c.b
			f = logic(r, c.size)
		case "xor":
			r = c.a ^ c.b
			f = logic(r, c.size)
		}
		if r != c.r || f != c.f {
			t.Errorf("%s%d %#x, %#x (carry %d) = %#x flags %#x; want %#x flags %#x", c.op, 8*c.size, c.a, c.b, c.carry, r, f, c.r, c.f)
		}
	}
}

// inc, dec and neg through the emulator: inc and dec keep CF.
func TestFlagTableIncDecNeg(t *testing.T) {
	for _, c := range []struct {
		code        []byte // operates on rax
		rax, cf     uint64
		wantRAX, wf uint64
	}{
		{[]byte{0xfe, 0xc0}, 0x7f, 0, 0x80, O | S | A},                                       // inc %al
		{[]byte{0xfe, 0xc0}, 0x7f, C, 0x80, O | S | A | C},                                   // inc keeps CF
		{[]byte{0xfe, 0xc8}, 0x80, 0, 0x7f, O | A},                                           // dec %al
		{[]byte{0xff, 0xc0}, 0xffffffff, C, 0, Z | P | A | C},                                // inc %eax
		{[]byte{0x48, 0xff, 0xc8}, 0, 0, 0xffffffffffffffff, S | P | A},                      // dec %rax
		{[]byte{0xf6, 0xd8}, 0x80, 0, 0x80, C | S | O},                                       // neg %al
		{[]byte{0xf7, 0xd8}, 0, C, 0, Z | P},                                                 // neg %eax clears CF
		{[]byte{0x66, 0xf7, 0xd8}, 1, 0, 0xffff, C | S | A | P},                              // neg %ax
		{[]byte{0x48, 0xf7, 0xd8}, 0x8000000000000000, 0, 0x8000000000000000, C | S | O | P}, // neg %rax
		{[]byte{0x48, 0xf7, 0xd0}, 0, C | Z, 0xffffffffffffffff, C | Z},                      // not: no flags
	} {
		in := mustDecode(t, c.code, 0x1000, 64)
		var r Regs
		r[rpn.RegRAX] = c.rax
		r[rpn.RegRFLAGS] = 0x202 | c.cf
		if !EmulateInsn(&in, &r, mapMem{}) {
			t.Fatalf("`%s`: not emulated", in.String())
		}
		want := c.rax&^sizeMaskOf(c.code) | c.wantRAX
		if r[rpn.RegRAX] != want || r[rpn.RegRFLAGS] != 0x202|c.wf {
			t.Errorf("`%s` %#x: rax %#x rflags %#x; want %#x, %#x", in.String(), c.rax, r[rpn.RegRAX], r[rpn.RegRFLAGS], want, 0x202|c.wf)
		}
	}
}

func sizeMaskOf(code []byte) uint64 {
	switch {
	case code[0] == 0x48:
		return ^uint64(0)
	case code[0] == 0x66:
		return 0xffff
	case code[0] == 0xfe || code[0] == 0xf6:
		return 0xff
	}
	return ^uint64(0) // 32-bit writes zero-extend
}

func TestCond(t *testing.T) {
	names := []string{"o", "no", "b", "ae", "e", "ne", "be", "a", "s", "ns", "p", "np", "l", "ge", "le", "g"}
	for _, c := range []struct {
		flags uint64
		true_ []string
	}{
		{0, []string{"no", "ae", "ne", "a", "ns", "np", "ge", "g"}},
		{C, []string{"no", "b", "ne", "be", "ns", "np", "ge", "g"}},
		{Z, []string{"no", "ae", "e", "be", "ns", "np", "ge", "le"}},
		{S, []string{"no", "ae", "ne", "a", "s", "np", "l", "le"}},
		{O, []string{"o", "ae", "ne", "a", "ns", "np", "l", "le"}},
		{S | O, []string{"o", "ae", "ne", "a", "s", "np", "ge", "g"}},
		{P, []string{"no", "ae", "ne", "a", "ns", "p", "ge", "g"}},
		{Z | S, []string{"no", "ae", "e", "be", "s", "np", "l", "le"}},
	} {
		want := map[string]bool{}
		for _, n := range c.true_ {
			want[n] = true
		}
		for cc, n := range names {
			if got := cond(byte(cc), c.flags); got != want[n] {
				t.Errorf("j%s with flags %#x: %v, want %v", n, c.flags, got, want[n])
			}
		}
	}
}
