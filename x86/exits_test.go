package x86

import (
	"reflect"
	"testing"
)

func TestFunctionExits(t *testing.T) {
	// rec of testdata/retprobe/funcs.S, then a tail call, a jcc out, an
	// indirect jmp, a call, rep ret and ret imm16
	code := []byte{
		0x53,             // 0x00 push %rbx
		0x48, 0x89, 0xfb, // 0x01 mov %rdi,%rbx
		0x48, 0x85, 0xff, // 0x04 test %rdi,%rdi
		0x75, 0x07, // 0x07 jne 0x10 (inside)
		0xb8, 0x07, 0, 0, 0, // 0x09 mov $7,%eax
		0x5b,                         // 0x0e pop %rbx
		0xc3,                         // 0x0f ret
		0xe8, 0xeb, 0xff, 0xff, 0xff, // 0x10 call 0x0
		0xe9, 0x00, 0x10, 0x00, 0x00, // 0x15 jmp 0x101a (out)
		0x0f, 0x84, 0x00, 0xf0, 0xff, 0xff, // 0x1a je -0xfe0 (out)
		0xff, 0xe0, // 0x20 jmp *%rax
		0xf3, 0xc3, // 0x22 rep ret
		0xc2, 0x08, 0x00, // 0x24 ret $8
		0x00, // 0x27 a lone byte of padding
	}
	const base = 0x1000
	got, err := FunctionExits(code, base, 64)
	if err != nil {
		t.Fatal(err)
	}
	want := []Exit{
		{Addr: base + 0x0f, Len: 1, Kind: ExitRet},
		{Addr: base + 0x10, Len: 5, Kind: ExitCall, Target: base},
		{Addr: base + 0x15, Len: 5, Kind: ExitJump, Target: base + 0x101a},
		{Addr: base + 0x1a, Len: 6, Kind: ExitJump, Target: base + 0x20 - 0x1000},
		{Addr: base + 0x20, Len: 2, Kind: ExitIndirect},
		{Addr: base + 0x22, Len: 2, Kind: ExitRet},
		{Addr: base + 0x24, Len: 3, Kind: ExitRet},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if _, err := FunctionExits([]byte{0x90, 0x06, 0x90, 0xc3}, base, 64); err == nil {
		t.Error("undecodable bytes in the middle: no error")
	}
	for _, c := range []struct {
		code []byte
		ret  bool
	}{{[]byte{0xc3, 0xcc}, true}, {[]byte{0xf3, 0xc3}, true}, {[]byte{0xc2, 8, 0}, true}, {[]byte{0x90, 0xc3}, false}, {nil, false}} {
		if IsRet(c.code) != c.ret {
			t.Errorf("IsRet(% x) = %v", c.code, !c.ret)
		}
	}
}
