package x86

import (
	"testing"

	"github.com/gprobes/gprobes/rpn"
)

// sliceMem is a flat memory for benchmarks.
type sliceMem struct {
	base uint64
	b    []byte
}

func (m *sliceMem) Read(a uint64, p []byte) bool {
	if a < m.base || a-m.base+uint64(len(p)) > uint64(len(m.b)) {
		return false
	}
	copy(p, m.b[a-m.base:])
	return true
}

func (m *sliceMem) Write(a uint64, p []byte) bool {
	if a < m.base || a-m.base+uint64(len(p)) > uint64(len(m.b)) {
		return false
	}
	copy(m.b[a-m.base:], p)
	return true
}

var benchInsns = []struct {
	name string
	code []byte
}{
	{"endbr64", []byte{0xf3, 0x0f, 0x1e, 0xfa}},
	{"push-rbp", []byte{0x55}},
	{"sub-rsp", []byte{0x48, 0x83, 0xec, 0x18}},
	{"mov-load", []byte{0x48, 0x8b, 0x47, 0x08}},
	{"cmpb-mem", []byte{0x80, 0x3f, 0x00}},
	{"ret", []byte{0xc3}},
}

func benchRegs() Regs {
	var r Regs
	r[rpn.RegRSP] = 0x10000800
	r[rpn.RegRDI] = 0x10000100
	r[rpn.RegRIP] = 0x401000
	r[rpn.RegRFLAGS] = 0x202
	return r
}

// TestEmulateAllocs: the per-hit path allocates nothing.
func TestEmulateAllocs(t *testing.T) {
	mem := &sliceMem{base: 0x10000000, b: make([]byte, 0x1000)}
	for _, c := range benchInsns {
		in := mustDecode(t, c.code, 0x401000, 64)
		n := testing.AllocsPerRun(100, func() {
			r := benchRegs()
			if !EmulateInsn(&in, &r, mem) {
				t.Fatalf("%s not emulated", c.name)
			}
		})
		if n != 0 {
			t.Errorf("%s: %v allocations per emulation", c.name, n)
		}
	}
	br := mustDecode(t, []byte{0xe8, 0, 1, 0, 0}, 0x401000, 64)
	if n := testing.AllocsPerRun(100, func() {
		r := benchRegs()
		EmulateBranch(&br, &r, mem)
	}); n != 0 {
		t.Errorf("call rel32: %v allocations", n)
	}
}

func BenchmarkEmulate(b *testing.B) {
	mem := &sliceMem{base: 0x10000000, b: make([]byte, 0x1000)}
	for _, c := range benchInsns {
		in := mustDecode(b, c.code, 0x401000, 64)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := benchRegs()
				EmulateInsn(&in, &r, mem)
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	code := []byte{0x48, 0x8b, 0x87, 0xa0, 0x00, 0x00, 0x00, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90}
	b.ReportAllocs()
	for b.Loop() {
		Decode(code, 0x401000, 64)
	}
}
