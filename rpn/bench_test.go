package rpn_test

import (
	"encoding/binary"
	"testing"

	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/rpn"
)

// flatEnv is a minimal target: registers in an array and one flat memory
// range. It is what an engine's per-hit cache looks like, and it does not
// allocate, so the benchmarks measure the machine.
type flatEnv struct {
	regs [rpn.NumRegs]uint64
	base uint64
	mem  []byte
}

func (e *flatEnv) Reg(r rpn.Reg, user bool) (uint64, bool) { return e.regs[r&0xff], true }
func (e *flatEnv) SetReg(r rpn.Reg, user bool, v uint64) bool {
	e.regs[r&0xff] = v
	return true
}
func (e *flatEnv) in(addr uint64, n int) bool {
	return addr >= e.base && addr-e.base <= uint64(len(e.mem)) && uint64(n) <= uint64(len(e.mem))-(addr-e.base)
}
func (e *flatEnv) ReadMem(addr uint64, p []byte) bool {
	if !e.in(addr, len(p)) {
		return false
	}
	copy(p, e.mem[addr-e.base:])
	return true
}
func (e *flatEnv) WriteMem(addr uint64, p []byte) bool {
	if !e.in(addr, len(p)) {
		return false
	}
	copy(e.mem[addr-e.base:], p)
	return true
}
func (e *flatEnv) Access(addr uint64, write bool) bool           { return e.in(addr, 1) }
func (e *flatEnv) Sys(v rpn.SysValue) (uint64, bool)             { return uint64(v) + 100, true }
func (e *flatEnv) IO(uint64, uint8, bool, uint64) (uint64, bool) { return 0, false }

func compile(tb testing.TB, src string) *rpn.Program {
	tb.Helper()
	f, err := dpdf.ParseSource("bench.dpdf", []byte(src), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		tb.Fatal(err)
	}
	m, err := compiler.Compile(f, rpn.CompileOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	p, err := rpn.Load(m)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// The fork/kill probe of seeds/001 on x86_64: count, log 16 bytes of
// stack. 5 instructions per hit.
const forkKill = `name = vmlinux
modtype = kernel
major = 1
jmpmax = 32
logmax = 100
vars = 2
offset = 0xffffffff81000000
minor = 2
inc lv,1
push d,16
push r,rsp
log mrf
exit
`

// An arithmetic loop: the sum of i*i for i = 1000 down to 1, 7
// instructions per iteration, 7003 per hit.
const arithLoop = `name = t
modtype = user
vars = 1
offset = 0x1000
push d,1000
again: dup
dup
mul
push lv,0
add
pop lv,0
loop again
exit 0
`

// A string logger: the path argument of an openat-like probe, read with
// log str, plus two words. 8 instructions per hit.
const logString = `name = t
modtype = user
logmax = 256
offset = 0x1000
push r,rdi
push r,rdx
log 2
push d,255
push r,rsi
log str
exit 1
`

func newFlatEnv() *flatEnv {
	env := &flatEnv{base: 0x7ffc0000, mem: make([]byte, 8192)}
	env.regs[rpn.RegRSP] = 0x7ffc1000
	env.regs[rpn.RegRSI] = 0x7ffc0100
	copy(env.mem[0x100:], "/usr/lib/x86_64-linux-gnu/libc.so.6\x00")
	for i := 0x1000; i < 0x1010; i++ {
		env.mem[i] = byte(i)
	}
	return env
}

func TestZeroAllocationsPerHit(t *testing.T) {
	for _, c := range []struct{ name, src string }{{"forkkill", forkKill}, {"loop", arithLoop}, {"logstr", logString}} {
		p := compile(t, c.src)
		env := newFlatEnv()
		var m rpn.Machine
		var st rpn.ProbeState
		lv, gv := make([]uint64, 2), make([]uint64, 0)
		m.Run(p, 0, &st, lv, gv, env) // first hit sizes the log buffer
		allocs := testing.AllocsPerRun(1000, func() {
			st = rpn.ProbeState{}
			r := m.Run(p, 0, &st, lv, gv, env)
			if r.Outcome != rpn.OutcomeExit {
				t.Fatalf("%s: outcome %v %v", c.name, r.Outcome, r.Exception)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per hit, want 0", c.name, allocs)
		}
	}
	// the exception path does not allocate either
	p := compile(t, "name = t\nmodtype = user\noffset = 1\npush d,8\npush d,0x10\nlog mrf\nexit\n")
	var m rpn.Machine
	var st rpn.ProbeState
	env := newFlatEnv()
	if allocs := testing.AllocsPerRun(1000, func() {
		if r := m.Run(p, 0, &st, nil, nil, env); r.Exception != rpn.ExInvalidAddress {
			t.Fatalf("got %v", r.Exception)
		}
	}); allocs != 0 {
		t.Errorf("exception path: %v allocations per hit", allocs)
	}
}

func benchProgram(b *testing.B, src string, insns int) {
	p := compile(b, src)
	env := newFlatEnv()
	var m rpn.Machine
	var st rpn.ProbeState
	lv, gv := make([]uint64, 2), []uint64{}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st.Runs, st.Hits = 0, 0
		m.Run(p, 0, &st, lv, gv, env)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(insns), "ns/insn")
}

func BenchmarkVM(b *testing.B) {
	b.Run("forkkill", func(b *testing.B) { benchProgram(b, forkKill, 5) })
	b.Run("loop", func(b *testing.B) { benchProgram(b, arithLoop, 7003) })
	b.Run("logstr", func(b *testing.B) { benchProgram(b, logString, 8) })
}

var sink uint64
var sinkBuf [128]byte

// BenchmarkGo is the floor: the same computations written in Go, reading
// the target through the same Env interface where the program does.
func BenchmarkGo(b *testing.B) {
	var env rpn.Env = newFlatEnv()
	b.Run("forkkill", func(b *testing.B) {
		lv := make([]uint64, 2)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			lv[1]++
			rsp, _ := env.Reg(rpn.RegRSP, false)
			env.ReadMem(rsp, sinkBuf[:16])
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/5, "ns/insn")
	})
	b.Run("loop", func(b *testing.B) {
		lv := make([]uint64, 1)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			for j := uint64(1000); j > 0; j-- {
				lv[0] += j * j
			}
		}
		sink = lv[0]
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/7003, "ns/insn")
	})
	b.Run("logstr", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			rdi, _ := env.Reg(rpn.RegRDI, false)
			rdx, _ := env.Reg(rpn.RegRDX, false)
			binary.LittleEndian.PutUint64(sinkBuf[0:], rdi)
			binary.LittleEndian.PutUint64(sinkBuf[8:], rdx)
			rsi, _ := env.Reg(rpn.RegRSI, false)
			n := 16
			for off := uint64(0); off < 255; off += 64 {
				var chunk [64]byte
				env.ReadMem(rsi+off, chunk[:])
				z := 64
				for k, c := range chunk {
					if c == 0 {
						z = k
						break
					}
				}
				n += copy(sinkBuf[n:], chunk[:z])
				if z < 64 {
					break
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/8, "ns/insn")
	})
}
