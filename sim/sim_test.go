package sim

import (
	"bytes"
	"testing"

	"github.com/gprobes/gprobes/rpn"
)

func TestMemoryRegions(t *testing.T) {
	e := NewEnv()
	if err := e.AddMem(0x1000, []byte{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	if err := e.AddMem(0x1004, []byte{5, 6}); err != nil {
		t.Fatal(err)
	}
	// a later region replaces the bytes it overlaps
	if err := e.AddMem(0x1001, []byte{9, 9}); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 6)
	if !e.ReadMem(0x1000, got) || !bytes.Equal(got, []byte{1, 9, 9, 4, 5, 6}) {
		t.Errorf("read across regions: %v", got)
	}
	// nothing outside them
	for _, a := range []uint64{0xfff, 0x1006} {
		if e.ReadMem(a, make([]byte, 1)) || e.Access(a, false) {
			t.Errorf("%#x readable", a)
		}
	}
	// a read that runs past the end fails and writes nothing
	if e.ReadMem(0x1004, make([]byte, 3)) {
		t.Error("read past the end succeeded")
	}
	if e.WriteMem(0x1005, []byte{7, 7}) {
		t.Error("write past the end succeeded")
	}
	if !e.WriteMem(0x1003, []byte{0xaa, 0xbb}) || !e.ReadMem(0x1003, got[:2]) || got[0] != 0xaa || got[1] != 0xbb {
		t.Errorf("write across regions: %v", got[:2])
	}
	if err := e.AddMem(^uint64(0), []byte{1, 2}); err == nil {
		t.Error("a region wrapping the address space was accepted")
	}
	if err := e.AddMem(0, nil); err == nil {
		t.Error("an empty region was accepted")
	}
}

func TestRegistersAndSystemValues(t *testing.T) {
	e := NewEnv()
	if err := e.SetRegByName(rpn.ArchX86_64, "eax", 0x1_0000_0005); err != nil {
		t.Fatal(err)
	}
	if v, _ := e.Reg(rpn.RegRAX, false); v != 5 {
		t.Errorf("eax set rax = %#x", v)
	}
	if err := e.SetRegByName(rpn.ArchX86_64, "xmm0", 1); err == nil {
		t.Error("unknown register accepted")
	}
	if _, ok := e.Sys(rpn.SysTask); ok {
		t.Error("task known by default")
	}
	e.SetSys(rpn.SysTask, 0xffff8880)
	if v, ok := e.Sys(rpn.SysTask); !ok || v != 0xffff8880 {
		t.Error("task not set")
	}
	if _, ok := e.IO(0x70, 1, false, 0); ok {
		t.Error("IO space without ports")
	}
}
