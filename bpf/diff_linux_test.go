//go:build linux

package bpf_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/rpn/rpntest"
)

// The differential harness: a program compiled to eBPF runs in the kernel
// at syscalls:sys_enter_getppid, restricted to the test's thread, and
// rpn.Machine runs it over the same values: the syscall's arguments as
// the task's user-mode registers (push u), the test's pid and tid, the
// record's CPU and time, and a memory region of the test process with a
// mix of protections (push mrf, log str, log mrf, vfy_r read it with
// bpf_probe_read_user in the kernel). Every hit compares the record (or
// its absence), the counters, lv and gv.

const (
	memPages = 6
	pageSize = 4096
)

var memProt = [memPages]int{
	unix.PROT_READ | unix.PROT_WRITE,
	unix.PROT_READ,
	unix.PROT_NONE,
	unix.PROT_READ | unix.PROT_WRITE,
	unix.PROT_NONE,
	unix.PROT_READ,
}

type region struct {
	mem  []byte
	base uint64
}

func newRegion(t testing.TB, seed uint64) *region {
	t.Helper()
	// below 4 GiB, so that i386 modules can address it
	mem, err := unix.Mmap(-1, 0, memPages*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_POPULATE|unix.MAP_32BIT)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	rng := rand.New(rand.NewPCG(seed, 7))
	for i := range mem {
		b := byte(rng.Uint32())
		if rng.IntN(12) == 0 {
			b = 0
		}
		mem[i] = b
	}
	// a string that runs from a readable page into an unreadable one
	for i := pageSize*2 - 40; i < pageSize*2; i++ {
		mem[i] = 'x'
	}
	for p, prot := range memProt {
		if err := unix.Mprotect(mem[p*pageSize:(p+1)*pageSize], prot); err != nil {
			t.Fatal(err)
		}
	}
	return &region{mem: mem, base: uint64(uintptr(unsafe.Pointer(&mem[0])))}
}

// subst replaces $BASE, $RO, $NONE, $EDGE in a program's text with
// addresses in the region: a read-write page, a read-only page, an
// unreadable page, and 40 readable bytes before an unreadable page.
func (r *region) subst(src string) string {
	return strings.NewReplacer(
		"$BASE", fmt.Sprintf("%#x", r.base+100),
		"$RO", fmt.Sprintf("%#x", r.base+pageSize+8),
		"$NONE", fmt.Sprintf("%#x", r.base+2*pageSize+16),
		"$EDGE", fmt.Sprintf("%#x", r.base+2*pageSize-40),
	).Replace(src)
}

// env answers the machine as the kernel sees the hit.
type env struct {
	r        *region
	args     [6]uint64
	pid, tid uint64
	cpu, ts  uint64
}

func (e *env) Reg(r rpn.Reg, user bool) (uint64, bool) {
	if !user {
		return 0, false
	}
	switch r {
	case rpn.RegRDI:
		return e.args[0], true
	case rpn.RegRSI:
		return e.args[1], true
	case rpn.RegRDX:
		return e.args[2], true
	case rpn.RegR10:
		return e.args[3], true
	case rpn.RegR8:
		return e.args[4], true
	case rpn.RegR9:
		return e.args[5], true
	case rpn.RegRAX:
		return ^uint64(unix.ENOSYS) + 1, true // pt_regs->ax at sys_enter: -ENOSYS
	}
	return 0, false
}

func (e *env) SetReg(rpn.Reg, bool, uint64) bool { return false }

func (e *env) ok(addr uint64, n int) bool {
	for i := 0; i < n; i++ {
		a := addr + uint64(i)
		if a < e.r.base || a >= e.r.base+memPages*pageSize {
			return false
		}
		if memProt[(a-e.r.base)/pageSize]&unix.PROT_READ == 0 {
			return false
		}
	}
	return true
}

func (e *env) ReadMem(addr uint64, p []byte) bool {
	if !e.ok(addr, len(p)) {
		return false
	}
	copy(p, e.r.mem[addr-e.r.base:])
	return true
}

func (e *env) WriteMem(uint64, []byte) bool { return false }

func (e *env) Access(addr uint64, write bool) bool { return !write && e.ok(addr, 1) }

func (e *env) Sys(v rpn.SysValue) (uint64, bool) {
	switch v {
	case rpn.SysPID:
		return e.pid, true
	case rpn.SysTID:
		return e.tid, true
	case rpn.SysProcID:
		return e.cpu, true
	case rpn.SysTS:
		return e.ts, true
	}
	return 0, false
}

func (e *env) IO(uint64, uint8, bool, uint64) (uint64, bool) { return 0, false }

// kernelRun is one program attached in the kernel, and the machine's side.
type kernelRun struct {
	t        testing.TB
	p        *rpn.Program
	compiled *bpf.Compiled
	prog     *ebpf.Program
	m        *bpf.Maps
	l        link.Link
	rd       *bpf.Reader
	env      env
	ref      rpntest.Reference // the machine's side
}

// startRun loads and attaches p; the caller has locked its OS thread.
func startRun(t testing.TB, p *rpn.Program, r *region, rng *rand.Rand, loop bool) *kernelRun {
	t.Helper()
	k := prepareRun(t, p, r, rng, loop)
	var err error
	if k.l, err = bpf.AttachTracepoint(k.prog, "syscalls", "sys_enter_getppid"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.l.Close() })
	return k
}

// prepareRun loads p with its maps and a reader, not attached.
func prepareRun(t testing.TB, p *rpn.Program, r *region, rng *rand.Rand, loop bool) *kernelRun {
	t.Helper()
	prog, m, c := load(t, p, bpf.Options{PID: uint32(os.Getpid()), TID: uint32(unix.Gettid()), Loop: loop})
	k := &kernelRun{t: t, p: p, m: m, compiled: c, prog: prog}
	k.env = env{r: r, pid: uint64(os.Getpid()), tid: uint64(unix.Gettid())}
	// variables start with the same random values on both sides
	k.ref = rpntest.Reference{P: p, LV: make([]uint64, p.Module().Vars), GV: make([]uint64, rpn.MaxGVars)}
	for i := range k.ref.LV {
		k.ref.LV[i] = randWord(rng, p.WordSize())
	}
	for i := range k.ref.GV {
		k.ref.GV[i] = randWord(rng, p.WordSize())
	}
	if err := m.SetVars(false, k.ref.LV); err != nil {
		t.Fatal(err)
	}
	if err := m.SetVars(true, k.ref.GV); err != nil {
		t.Fatal(err)
	}
	var err error
	if k.rd, err = bpf.NewReader(m); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.rd.Close() })
	return k
}

func randWord(rng *rand.Rand, w int) uint64 {
	v := rng.Uint64()
	switch rng.IntN(4) {
	case 0:
		v = uint64(rng.IntN(8))
	case 1:
		v = -uint64(rng.IntN(3))
	}
	if w == 4 {
		v &= 0xffffffff
	}
	return v
}

// hit makes one getppid call with args as its arguments and compares both
// sides; "" when they agree.
func (k *kernelRun) hit(args [6]uint64) string {
	unix.Syscall6(unix.SYS_GETPPID, uintptr(args[0]), uintptr(args[1]), uintptr(args[2]), uintptr(args[3]), uintptr(args[4]), uintptr(args[5]))
	var rec *bpf.Record
	if k.rd.Available() > 0 {
		k.rd.SetDeadline(time.Now().Add(time.Second))
		r, err := k.rd.Read()
		if err != nil {
			return fmt.Sprintf("read the ring: %v", err)
		}
		r.Log = bytes.Clone(r.Log)
		rec = &r
		k.env.cpu, k.env.ts = uint64(r.CPU), r.TS
	}
	k.env.args = args
	res := k.ref.Run(&k.env)
	got := rpntest.Observed{Kind: rpntest.None}
	var d []string
	if rec != nil {
		got = rpntest.Observed{Kind: rpntest.Commit, Exit: rec.Exit, Log: rec.Log, Truncated: rec.Truncated,
			Exception: rec.Exception, PC: rec.PC, Addr: rec.Addr, Major: rec.Major, Minor: rec.Minor}
		if rec.Exception != 0 {
			got.Kind = rpntest.Raised
			if len(rec.Log) != 0 || rec.Exit != 0 {
				d = append(d, fmt.Sprintf("an exception record with exit %d, log %x", rec.Exit, rec.Log))
			}
		} else if res.Commits() && rec.Rem != (res.Outcome == rpn.OutcomeRem) {
			d = append(d, fmt.Sprintf("rem %v, the machine's outcome is %v", rec.Rem, res.Outcome))
		}
		if uint64(rec.PID) != k.env.pid || uint64(rec.TID) != k.env.tid {
			d = append(d, fmt.Sprintf("record pid/tid %d/%d, want %d/%d", rec.PID, rec.TID, k.env.pid, k.env.tid))
		}
	}
	d = append(d, rpntest.Compare(&res, &got)...)
	if k.rd.Available() > 0 {
		d = append(d, "the kernel committed a second record")
	}
	cn, err := k.m.ProbeCounters(0)
	if err != nil {
		return err.Error()
	}
	if cn.Lost != 0 || cn.Missed != 0 {
		d = append(d, fmt.Sprintf("counters: kernel %+v: nothing lost or missed", cn))
	}
	lv, err := k.m.Vars(false)
	if err != nil {
		return err.Error()
	}
	gv, err := k.m.Vars(true)
	if err != nil {
		return err.Error()
	}
	d = append(d, k.ref.CompareState(rpn.ProbeState{Hits: cn.Hits, Skipped: cn.Skipped, Runs: cn.Runs, Faults: cn.Faults, Disabled: cn.Disabled}, lv, gv)...)
	return strings.Join(d, "; ")
}

// diffCases: programs the harness can run on both sides. $BASE, $RO,
// $NONE and $EDGE are addresses in the memory region (region.subst).
var diffCases = []struct{ name, src string }{
	{"push d", "push d,0\npush d,0x7fffffff\npush d,0x80000000\npush d,0xffffffff\npush d,-1\npush d,0x123456789abcdef0\nlog 6\nexit 1"},
	{"exit 0", "push d,1\nlog 1\nexit 0"},
	{"abort", "push d,1\nlog 1\nabort"},
	{"rem", "push d,1\nlog 1\nrem"},
	{"exit 2 empty log", "exit 2"},
	{"push u", "push u,rdi\npush u,rsi\npush u,rdx\npush u,r10\npush u,r8\npush u,r9\npush u,rax\npush u,edi\npush u,r9d\nlog 9\nexit 1"},
	{"arith", "push u,rdi\npush u,rsi\nadd\npush u,rdx\nsub\npush u,r10\nmul\npush u,r8\nand\npush u,r9\nor\npush u,rdi\nxor\nnot\nneg\nlog 1\nexit 1"},
	{"div", "push u,rdi\npush u,rsi\npush d,1\nor\ndiv\nlog 2\npush d,-7\npush d,2\ndiv\nlog 2\nexit 1"},
	{"div by a register", "push u,rdi\npush u,rsi\ndiv\nlog 2\nexit 1"},
	{"div by zero", "push d,5\npush d,0\ndiv\nexit 1"},
	{"idiv", "push u,rdi\npush u,rsi\npush d,1\nor\nidiv\nlog 2\npush d,-7\npush d,2\nidiv\nlog 2\npush d,0x8000000000000000\npush d,-1\nidiv\nlog 2\npush d,5\npush d,-1\nidiv\nlog 2\npush d,7\npush d,-2\nidiv\nlog 2\nexit 1"},
	{"idiv by zero", "push d,5\npush d,0\nidiv\nexit 1"},
	{"shifts imm", "push u,rdi\nshl 3\npush u,rdi\nshr 63\npush u,rdi\nsar 7\npush u,rdi\nrol 13\npush u,rdi\nror 1\npush u,rsi\nshl 0\npush u,rsi\nrol 0\nlog 7\nexit 1"},
	{"shifts", "push u,rdi\npush d,3\nshl\npush u,rdi\npush d,64\nshl\npush u,rdi\npush d,65\nshr\npush u,rdi\npush d,5\nshr\npush d,-8\npush d,100\nsar\npush d,-8\npush d,2\nsar\npush u,rdi\npush d,68\nrol\npush u,rdi\npush d,3\nror\nlog 8\nexit 1"},
	{"shifts by a register", "push u,rdi\npush u,rsi\nshl\npush u,rdi\npush u,rsi\nshr\npush u,rdi\npush u,rsi\nsar\npush u,rdi\npush u,rsi\nrol\npush u,rdi\npush u,rsi\nror\nlog 5\nexit 1"},
	{"stack ops", "push d,1\npush d,2\npush d,3\nxchg\ndup\npop\npush d,4\nros 2\nlog 2\nexit 1"},
	{"stack wraps", strings.Repeat("push d,5\npush u,rdi\n", 18) + "log 32\n" + strings.Repeat("pop\n", 31) + "log 3\nexit 1"},
	{"reads the zeroed stack", "log 4\npop\npop\nlog 3\nexit 1"},
	{"jumps", "push d,3\nagain: push d,1\nsub\njnz again\npush d,7\njz no\njnz yes\nno: exit 0\nyes: push d,-1\njlt a\nexit 0\na: jle b\nexit 0\nb: push d,1\njgt c\nexit 0\nc: jge d\nexit 0\nd: jmp e\ne: log 3\nexit 1"},
	{"forward jumps on the arguments", "push u,rdi\njz a\npush d,1\nlog 1\na: push u,rsi\njlt b\npush d,2\nlog 1\nb: push u,rdx\njgt c\nexit 2\nc: exit 1"},
	{"forward jumps beyond jmpmax", "jmpmax = 1\npush u,rdi\njz a\npush d,1\nlog 1\na: push u,rsi\njnz b\npush d,2\nlog 1\nb: exit 1"},
	{"loop", "push d,5\nl: push lp\nlog 1\nloop l\nlog 1\nexit 1"},
	{"loop on an argument", "vars = 1\njmpmax = 300\npush u,rdi\npush d,255\nand\npush d,1\nadd\nl: inc lv,0\nloop l\npush lv,0\nlog 1\nexit 1"},
	{"loop from zero wraps", "jmpmax = 10\npush d,0\nl: loop l\nexit 1"},
	{"loop to jmpmax 65535", "jmpmax = 65535\nvars = 1\npush d,65535\nl: inc lv,0\nloop l\nlog lv,0,1\nexit 1"},
	{"loop one past jmpmax", "jmpmax = 65535\nvars = 1\npush d,65536\nl: inc lv,0\nloop l\nexit 1"},
	{"max jumps", "jmpmax = 5\nl: jmp l"},
	{"max jumps on a conditional", "jmpmax = 2\npush d,1\nl: jnz l\nexit 1"},
	{"call ret", "push d,1\ncall f\ncall f\nlog 1\nexit 1\nf: push d,2\nadd\nret"},
	{"recursion too deep", "f: call f\nexit 1"},
	{"recursion 32 deep", "vars = 1\npush d,32\nf: push lv,0\npush d,1\nadd\npop lv,0\nloop g\nlog lv,0,1\nexit 1\ng: call f\nret"},
	{"ret at depth 0", "push d,1\nret"},
	{"call in a loop", "push d,3\nl: call f\nloop l\nlog 2\nexit 1\nf: push lp\nxchg\nret"},
	{"nested calls", "call a\nexit 1\na: call b\nret\nb: call c\nret\nc: push d,1\nlog 1\nret"},
	{"log n truncates", "logmax = 20\npush d,0x1122334455667788\npush d,2\npush d,3\nlog 3\nexit 1"},
	{"log n after a full log", "logmax = 8\npush d,1\nlog 1\npush d,2\nlog 1\nexit 1"},
	{"log n exactly full", "logmax = 16\npush d,1\npush d,2\nlog 2\nexit 1"},
	{"push lp pop lp", "push d,1\npush d,2\nlog 2\npush lp\npush d,8\npop lp\nlog 1\nexit 1"},
	{"pop lp beyond", "push d,8\npop lp\nexit 1"},
	{"setmaj setmin", "major = 3\nminor = 4\nsetmaj 10\nsetmin 11\nexit 1"},
	{"setmaj from the stack", "push d,0xffff\nsetmaj\npush d,7\nsetmin\nexit 1"},
	{"setmaj too big", "push d,0x10000\nsetmaj\nexit 1"},
	{"variables", "vars = 4\ngvars = 3\ninc lv,0\ndec lv,1\npush lv,2\npush d,9\npop lv,3\npush gv,0\npush d,5\nmove gv,1\ninc gv,2\ndec gv,0\nlog 3\nlog lv,0,4\nlog gv,0,3\nexit 1"},
	{"indexed variables", "vars = 4\ngvars = 2\npush d,2\npush lv\npush d,1\npush d,77\npop lv\npush d,66\npush d,3\nmove lv\npush d,0\ninc lv\npush d,1\ndec lv\npush d,1\npush gv\npush d,0\ninc gv\nlog 3\nlog lv,0,4\nexit 1"},
	{"indexed variable out of range", "vars = 2\npush d,2\npush lv\nexit 1"},
	{"indexed gv out of range", "gvars = 2\npush d,7\npush d,2\npop gv\nexit 1"},
	{"indexed by an argument", "vars = 8\npush u,rdi\npush d,15\nand\ninc lv\nlog lv,0,8\nexit 1"},
	{"log lv large", "vars = 200\nlogmax = 4000\nlog lv,0,200\nlog lv,10,9\nexit 1"},
	{"log lv truncated", "vars = 20\nlogmax = 100\nlog lv,0,20\nexit 1"},
	{"log lv into a full log", "vars = 2\nlogmax = 8\npush d,1\nlog 1\nlog lv,0,2\nexit 1"},
	{"pid tid procid ts", "push pid\npush tid\npush procid\npush ts\npush ts\nlog 5\nexit 1"},
	{"push mrf", "push d,$BASE\npush mrf,1\npush d,$BASE\npush mrf,2\npush d,$RO\npush mrf,4\npush d,$RO\npush mrf\nlog 4\nexit 1"},
	{"push mrf unreadable", "push d,$NONE\npush mrf,4\nexit 1"},
	{"push mrf at 0", "push d,0\npush mrf\nexit 1"},
	{"push mrf kernel", "push d,0xfffffffffffff000\npush mrf,2\nexit 1"},
	{"push mrf across into unreadable", "push d,$EDGE\npush d,36\nadd\npush mrf\nexit 1"},
	{"log mrf", "push d,16\npush d,$BASE\nlog mrf\npush d,0\npush d,0\nlog mrf\npush d,40\npush d,$EDGE\nlog mrf\nexit 1"},
	{"log mrf truncated", "logmax = 30\npush d,100\npush d,$RO\nlog mrf\nexit 1"},
	{"log mrf unreadable", "push d,41\npush d,$EDGE\nlog mrf\nexit 1"},
	{"log mrf into a full log", "logmax = 8\npush d,1\nlog 1\npush d,5\npush d,$NONE\nlog mrf\nexit 1"},
	{"log str", "push d,-1\npush d,$BASE\nlog str\npush d,3\npush d,$RO\nlog str\npush d,0\npush d,$NONE\nlog str\nexit 1"},
	{"log str from an argument", "logmax = 64\npush u,rdi\npush d,63\nand\npush d,$BASE\nadd\npush d,20\nxchg\nlog str\nexit 1"},
	{"log str unreadable", "push d,10\npush d,$NONE\nlog str\nexit 1"},
	{"log str into an unreadable page", "push d,100\npush d,$EDGE\nlog str\nexit 1"},
	{"log str at 0", "push d,100\npush d,0\nlog str\nexit 1"},
	{"log str truncated", "logmax = 10\npush d,100\npush d,$EDGE\nlog str\nexit 1"},
	{"log str fills the log at the edge", "logmax = 40\npush d,100\npush d,$EDGE\nlog str\nexit 1"},
	{"log str into a full log", "logmax = 8\npush d,1\nlog 1\npush d,5\npush d,$NONE\nlog str\nexit 1"},
	{"logmax 20000: a scratch array keyed by CPU", "logmax = 20000\npush d,5000\npush d,$BASE\nlog mrf\npush d,3000\npush d,$RO\nlog str\npush u,rdi\nlog 1\nexit 1"},
	{"vfy_r", "push d,$BASE\nvfy_r\npush d,$RO\nvfy_r\npush d,$NONE\nvfy_r\npush d,0\nvfy_r\npush d,0xfffffffffffff000\nvfy_r\nlog 5\nexit 1"},
	{"nop", "nop\nnop\nexit 1"},
	{"pass count", "passcount = 2\npush d,1\nlog 1\nexit 1"},
	{"max hits", "maxhits = 2\npush d,1\nlog 1\nexit 1"},
	{"pass count and max hits", "vars = 1\npasscount = 1\nmaxhits = 2\ninc lv,0\nexit 1"},
	{"exception counts toward max hits", "maxhits = 1\npush d,0\npush d,0\ndiv\nexit 1"},
	{"depth differs by path: dynamic stack", "push u,rdi\njz a\npush d,1\na: push d,2\nlog 2\nexit 1"},
	{"dynamic stack in a loop", "push d,3\nl: push d,1\nxchg\nloop l\nlog 4\nexit 1"},
	{"i386 arith", "arch = i386\npush d,0xffffffff\npush d,2\nadd\npush d,-1\npush u,edi\nmul\npush u,esi\npush u,edx\nsub\nnot\nneg\nlog 4\nexit 1"},
	{"i386 jumps", "arch = i386\npush d,0x80000000\njlt neg\nexit 0\nneg: push d,0xffffffff\nlog 1\nexit 1"},
	{"i386 div", "arch = i386\npush u,edi\npush u,esi\npush d,1\nor\ndiv\npush u,edi\npush u,esi\npush d,1\nor\nidiv\nlog 4\nexit 1"},
	{"i386 idiv sar", "arch = i386\npush d,-9\npush d,2\nidiv\npush d,0x80000000\nsar 4\nlog 3\npush d,0x80000000\npush d,-1\nidiv\nlog 2\nexit 1"},
	{"i386 shifts", "arch = i386\npush u,edi\nshl 31\npush u,edi\nshr 31\npush u,edi\nsar 31\npush u,edi\nrol 31\npush u,edi\nror 31\npush u,edi\npush d,33\nshl\npush u,edi\npush d,32\nshr\npush u,edi\npush d,100\nsar\npush u,edi\npush d,33\nrol\npush u,edi\npush d,35\nror\npush u,edi\nrol 0\nlog 11\nexit 1"},
	{"i386 shifts by a register", "arch = i386\npush u,edi\npush u,esi\nshl\npush u,edi\npush u,esi\nshr\npush u,edi\npush u,esi\nsar\npush u,edi\npush u,esi\nrol\npush u,edi\npush u,esi\nror\nlog 5\nexit 1"},
	{"i386 loop", "arch = i386\npush d,0\nl: loop l\nexit 1"},
	{"i386 variables", "arch = i386\nvars = 2\ngvars = 2\ninc lv,0\ndec lv,1\ninc gv,0\ndec gv,1\npush d,1\ninc lv\npush lv,0\npush lv,1\npush lv,0\npush lv,1\nand\nor\nlog 2\nlog lv,0,2\nlog gv,0,2\nexit 1"},
	{"i386 call", "arch = i386\npush d,1\ncall f\nlog 1\nexit 1\nf: push d,2\nadd\nret"},
}

// Every case, a few hits each with random arguments, on both sides; each
// compiled as it would be, and in loop mode.
func TestDiff(t *testing.T) {
	needBPF(t)
	r := newRegion(t, 1)
	for ci, c := range diffCases {
		for _, loop := range []bool{false, true} {
			name := c.name
			if loop {
				name += " (loop mode)"
			}
			t.Run(name, func(t *testing.T) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				rng := rand.New(rand.NewPCG(uint64(ci), 99))
				p := compileSrc(t, r.subst(c.src))
				k := startRun(t, p, r, rng, loop)
				for i := 0; i < 6; i++ {
					var args [6]uint64
					for j := range args {
						args[j] = randWord(rng, 8)
					}
					if d := k.hit(args); d != "" {
						t.Fatalf("hit %d (args %#x): %s\n%s", i+1, args, d, p.Listing(0))
					}
				}
			})
		}
	}
}

var _ = errors.New
