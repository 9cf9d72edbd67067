package x86

import (
	"encoding/binary"
	"strings"
	"testing"

	"golang.org/x/arch/x86/x86asm"
)

// Each covered instruction, relocated to a pad 1 MiB away, does what it
// did in place: decoded at the pad, it names the same target or operand.
func TestRelocateForPad(t *testing.T) {
	const addr, at = 0x401000, 0x501000
	cases := []struct {
		name  string
		code  []byte
		want  string // x86asm GNU syntax of the first relocated instruction, decoded at the pad
		exits bool
		err   string
	}{
		{"push", []byte{0x55}, "push %rbp", false, ""},
		// 0x401000+7+0x10 = 0x401017 = 0x501007 - 0xffff0
		{"rip load", []byte{0x48, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00}, "mov 0xfff00010(%rip),%rax", false, ""},
		// 0x401009+0xff8 = 0x402001 = 0x501009 - 0xff008
		{"lock add rip", []byte{0xf0, 0x48, 0x83, 0x05, 0xf8, 0x0f, 0x00, 0x00, 0x01}, "lock addq $0x1,0xfff00ff8(%rip)", false, ""},
		{"jmp rel8", []byte{0xeb, 0x10}, "jmpq 0x401012", true, ""},
		{"jcc", []byte{0x0f, 0x84, 0x00, 0x01, 0x00, 0x00}, "je 0x401106", true, ""},
		// the return address is the constant after the 5-byte jump
		{"call", []byte{0xe8, 0x00, 0x01, 0x00, 0x00}, "pushq 0x5(%rip)", true, ""},
		{"ret", []byte{0xc3}, "retq", true, ""},
		{"syscall", []byte{0x0f, 0x05}, "", false, "system call"},
		{"loop", []byte{0xe2, 0x10}, "", false, "loop, jrcxz"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in, err := Decode(c.code, addr, 64)
			if err != nil {
				t.Fatal(err)
			}
			r, err := RelocateForPad(&in, at)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one saying %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := x86asm.Decode(r.Code, 64)
			if err != nil {
				t.Fatalf("relocated % x does not decode: %v", r.Code, err)
			}
			if s := x86asm.GNUSyntax(got, at, nil); s != c.want {
				t.Errorf("relocated to %s, want %s (% x)", s, c.want, r.Code)
			}
			if r.Exits != c.exits {
				t.Errorf("exits %v, want %v", r.Exits, c.exits)
			}
		})
	}
}

// A relocated call pushes the original return address (one push from a
// constant after the jump) and jumps to the original target: the callee
// returns to the program, never to the pad. Pushed says where the jump is.
func TestRelocateCallPushesOriginalReturn(t *testing.T) {
	const addr, at = 0x7f0000401000, 0x7f0000501000
	in, _ := Decode([]byte{0xe8, 0x00, 0x01, 0x00, 0x00}, addr, 64)
	r, err := RelocateForPad(&in, at)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	pc := uint64(at)
	if r.Pushed != 6 || len(r.Code) != 6+5+8 {
		t.Fatalf("pushed at %d, %d bytes: % x", r.Pushed, len(r.Code), r.Code)
	}
	if ret := binary.LittleEndian.Uint64(r.Code[11:]); ret != addr+5 {
		t.Errorf("the return address kept is %#x, want %#x", ret, uint64(addr+5))
	}
	for off := 0; off < 11; {
		i, err := x86asm.Decode(r.Code[off:], 64)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, x86asm.GNUSyntax(i, pc, nil))
		off += i.Len
		pc += uint64(i.Len)
	}
	want := []string{"pushq 0x5(%rip)", "jmpq 0x7f0000401105"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("relocated call: %q, want %q", got, want)
	}
}

func TestStackDelta(t *testing.T) {
	cases := []struct {
		code  []byte
		delta int64
		ok    bool
	}{
		{[]byte{0x55}, -8, true},                          // push %rbp
		{[]byte{0x41, 0x57}, -8, true},                    // push %r15
		{[]byte{0x5d}, 8, true},                           // pop %rbp
		{[]byte{0x48, 0x83, 0xec, 0x18}, -0x18, true},     // sub $0x18,%rsp
		{[]byte{0x48, 0x83, 0xc4, 0x18}, 0x18, true},      // add $0x18,%rsp
		{[]byte{0x48, 0x8d, 0x64, 0x24, 0xf0}, -16, true}, // lea -0x10(%rsp),%rsp
		{[]byte{0xf3, 0x0f, 0x1e, 0xfa}, 0, true},         // endbr64
		{[]byte{0x48, 0x89, 0xe5}, 0, true},               // mov %rsp,%rbp
		{[]byte{0x48, 0x8b, 0x05, 0, 0, 0, 0}, 0, true},   // mov x(%rip),%rax
		{[]byte{0x48, 0x89, 0xec}, 0, false},              // mov %rbp,%rsp
		{[]byte{0x48, 0x83, 0xe4, 0xf0}, 0, false},        // and $-16,%rsp
		{[]byte{0xc9}, 0, false},                          // leave
		{[]byte{0x66, 0x55}, 0, false},                    // push %bp
	}
	for _, c := range cases {
		in, err := Decode(c.code, 0x1000, 64)
		if err != nil {
			t.Fatal(err)
		}
		d, ok := StackDelta(&in)
		if ok != c.ok || ok && d != c.delta {
			t.Errorf("`%s`: delta %d ok %v, want %d %v", in.String(), d, ok, c.delta, c.ok)
		}
	}
}
