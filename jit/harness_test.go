//go:build linux && amd64

package jit_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/gprobes/gprobes/internal/jitexec"
	"github.com/gprobes/gprobes/jit"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/rpn/rpntest"
	"golang.org/x/sys/unix"
)

// The harness plays the pad and the tracer for compiled code run inside
// the test process (jitexec), and plays the machine's environment for
// the reference: rpn.Machine.Run over the same registers, memory, system
// values, variables and counters. Each hit runs both and compares all
// they produce.
//
// Memory the programs may touch is a region of memPages pages below 4 GiB
// (so i386 modules can address it) with a mix of protections: a read or
// write the protection refuses faults for real, the fault handler of
// jitexec resumes at the Fixup's handler as the tracer would, and the
// environment refuses the same access to the machine. Any other address a
// program reaches must be unmapped in the test process (the environment
// checks /proc/self/maps before the compiled code can touch it).

const (
	memPages = 8
	pageSize = 4096
	// switchBlock is a module's switches: a byte per minor
	switchBlock = 1 << 16
)

// page protections of the memory region
var memProt = [memPages]int{
	unix.PROT_READ | unix.PROT_WRITE,
	unix.PROT_READ | unix.PROT_WRITE,
	unix.PROT_READ,
	unix.PROT_NONE,
	unix.PROT_READ | unix.PROT_WRITE,
	unix.PROT_NONE,
	unix.PROT_READ,
	unix.PROT_NONE,
}

// data region layout: the pad's and the data region's parts, at fixed
// offsets in one mapping
const (
	dFrame    = 0
	dCounters = 256
	dClock    = 320
	dNoTSC    = 400
	dLV       = 512
	dGV       = dLV + rpn.MaxVars*8
	dThreads  = 8192
	dScratch  = dThreads + jit.ThreadSlots*jit.ThreadEntry
	dSize     = dScratch + 70000 + 4096
)

type harness struct {
	t        testing.TB
	data     []byte
	mem      []byte
	shadow   []byte // the machine's copy of mem
	base     uint64 // mem's address
	rng      *rand.Rand
	fsgsbase bool // the kernel allows rdfsbase
	pidns    bool // Layout.PidNS: push pid and push tid from the thread table
	pid, tid uint64
	segs     [6]uint64
	fsBase   uint64
	gsBase   uint64
	maps     []mapping
	stats    map[string]int // outcomes seen, for the random test's log
	refused  map[string]int // the verifier's refusals of random programs, by kind
	// the module's switches (Layout.Switch), and the machine's copy
	sw, swShadow []byte
}

type mapping struct{ lo, hi uint64 }

func newHarness(t testing.TB, seed uint64) *harness {
	t.Helper()
	if err := jitexec.Catch(); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x5eed))}
	var err error
	h.data, err = unix.Mmap(-1, 0, dSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	h.mem, err = unix.Mmap(-1, 0, memPages*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_32BIT)
	if err != nil {
		t.Fatal(err)
	}
	h.sw, err = unix.Mmap(-1, 0, switchBlock, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	h.swShadow = make([]byte, switchBlock)
	t.Cleanup(func() {
		unix.Munmap(h.data)
		unix.Munmap(h.mem)
		unix.Munmap(h.sw)
	})
	h.base = uint64(uintptr(unsafe.Pointer(&h.mem[0])))
	if h.base+memPages*pageSize > 1<<32 {
		t.Fatalf("MAP_32BIT gave %#x", h.base)
	}
	h.shadow = make([]byte, len(h.mem))
	h.fillMem()
	h.fsgsbase = hasFSGSBase()
	h.pid = uint64(os.Getpid())
	h.readMaps()
	h.sub(t)
	return h
}

// sub binds the harness to the test (or subtest) running on the calling
// goroutine: it stays on its thread until the test ends, and the thread's
// identity (tid, segments, fs_base) is what the machine's side answers.
func (h *harness) sub(t testing.TB) {
	h.t = t
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	h.tid = uint64(unix.Gettid())
	cs, ss, ds, es, fs, gs := jitexec.Segments()
	h.segs = [6]uint64{uint64(cs), uint64(ss), uint64(ds), uint64(es), uint64(fs), uint64(gs)}
	h.fsBase = archPrctl(0x1003)
	h.gsBase = archPrctl(0x1004)
}

func archPrctl(code uintptr) uint64 {
	var v uint64
	unix.RawSyscall(unix.SYS_ARCH_PRCTL, code, uintptr(unsafe.Pointer(&v)), 0)
	return v
}

// hasFSGSBase: AT_HWCAP2 (26) bit 1, the kernel's permission for
// rdfsbase in user mode.
func hasFSGSBase() bool {
	b, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return false
	}
	for i := 0; i+16 <= len(b); i += 16 {
		if binary.LittleEndian.Uint64(b[i:]) == 26 {
			return binary.LittleEndian.Uint64(b[i+8:])&2 != 0
		}
	}
	return false
}

func (h *harness) readMaps() {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		h.t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		var lo, hi uint64
		if _, err := fmt.Sscanf(l, "%x-%x", &lo, &hi); err == nil {
			h.maps = append(h.maps, mapping{lo, hi})
		}
	}
}

// fillMem gives the memory region (and its shadow) fresh contents:
// random bytes, one in 12 a NUL, then the protections.
func (h *harness) fillMem() {
	if err := unix.Mprotect(h.mem, unix.PROT_READ|unix.PROT_WRITE); err != nil {
		h.t.Fatal(err)
	}
	for i := range h.mem {
		b := byte(h.rng.Uint32())
		if h.rng.IntN(12) == 0 {
			b = 0
		}
		h.mem[i] = b
	}
	copy(h.shadow, h.mem)
	for p, prot := range memProt {
		if err := unix.Mprotect(h.mem[p*pageSize:(p+1)*pageSize], prot); err != nil {
			h.t.Fatal(err)
		}
	}
}

func (h *harness) addr(off int) uint64 { return uint64(uintptr(unsafe.Pointer(&h.data[off]))) }

func (h *harness) layout() jit.Layout {
	return jit.Layout{
		LV:       h.addr(dLV),
		GV:       h.addr(dGV),
		Probe:    h.addr(dCounters),
		Clock:    h.addr(dClock),
		NoTSC:    h.addr(dNoTSC),
		Threads:  h.addr(dThreads),
		FSGSBase: h.fsgsbase,
		PidNS:    h.pidns,
		Switch:   uint64(uintptr(unsafe.Pointer(&h.sw[0]))),
	}
}

func (h *harness) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&h.data[off])) }

func (h *harness) counters() *jit.Counters {
	return (*jit.Counters)(unsafe.Pointer(&h.data[dCounters]))
}

func (h *harness) clock() *jit.Clock { return (*jit.Clock)(unsafe.Pointer(&h.data[dClock])) }

// setThread enters tid in the thread table as the pad's region does,
// with root ids of its own.
func (h *harness) setThread(tid uint32, index uint32) {
	h.setThreadIDs(tid, index, tid, uint32(h.pid))
}

func (h *harness) setThreadIDs(tid, index, rootTid, rootPid uint32) {
	s := uint64(tid*0x9e3779b1) >> (32 - jit.ThreadBits)
	for i := uint64(0); i < jit.ThreadSlots; i++ {
		off := dThreads + int((s+i)&(jit.ThreadSlots-1))*jit.ThreadEntry
		p := h.u64(off)
		if t := uint32(*p); t == 0 || t == tid {
			*h.u64(off + 8) = uint64(rootTid) | uint64(rootPid)<<32
			*p = uint64(tid) | uint64(index)<<32
			return
		}
	}
}

// lookupThread is the reference for push procid.
func (h *harness) lookupThread(tid uint32) (uint64, bool) {
	e, ok := h.threadEntry(tid)
	return uint64(e[1]), ok
}

// threadEntry is tid's entry in the thread table: tid, index, root tid,
// root pid.
func (h *harness) threadEntry(tid uint32) ([4]uint32, bool) {
	s := uint64(tid*0x9e3779b1) >> (32 - jit.ThreadBits)
	for i := uint64(0); i < jit.ThreadSlots; i++ {
		off := dThreads + int((s+i)&(jit.ThreadSlots-1))*jit.ThreadEntry
		v, w := *h.u64(off), *h.u64(off + 8)
		switch uint32(v) {
		case tid:
			return [4]uint32{uint32(v), uint32(v >> 32), uint32(w), uint32(w >> 32)}, true
		case 0:
			return [4]uint32{}, false
		}
	}
	return [4]uint32{}, false
}

// env is the machine's environment for one hit.
type env struct {
	h     *harness
	frame [jit.FrameSlots]uint64
	tsc   uint64
	err   error // a program reached memory of the test process itself
}

func (e *env) Reg(r rpn.Reg, user bool) (uint64, bool) {
	switch {
	case r <= rpn.RegRFLAGS:
		return e.frame[r], true
	case r <= rpn.RegGS:
		return e.h.segs[r-rpn.RegCS], true
	case r == rpn.RegFSBase:
		return e.h.fsBase, true
	case r == rpn.RegGSBase:
		return e.h.gsBase, true
	}
	return 0, false // no control registers in a process
}

func (e *env) SetReg(r rpn.Reg, user bool, v uint64) bool {
	if user || r > rpn.RegRFLAGS {
		return false
	}
	e.frame[r] = v
	return true
}

// ok says whether every byte of [addr, addr+n) may be accessed (write:
// written) in the region.
func (e *env) ok(addr uint64, n int, write bool) bool {
	for i := 0; i < n; i++ {
		a := addr + uint64(i)
		if a < e.h.base || a >= e.h.base+memPages*pageSize {
			for _, m := range e.h.maps {
				if a >= m.lo && a < m.hi && e.err == nil {
					e.err = fmt.Errorf("the program reaches %#x, mapped in the test process", a)
				}
			}
			return false
		}
		prot := memProt[(a-e.h.base)/pageSize]
		if prot&unix.PROT_READ == 0 || write && prot&unix.PROT_WRITE == 0 {
			return false
		}
	}
	return true
}

func (e *env) ReadMem(addr uint64, p []byte) bool {
	if !e.ok(addr, len(p), false) {
		return false
	}
	copy(p, e.h.shadow[addr-e.h.base:])
	return true
}

func (e *env) WriteMem(addr uint64, p []byte) bool {
	if !e.ok(addr, len(p), true) {
		return false
	}
	copy(e.h.shadow[addr-e.h.base:], p)
	return true
}

func (e *env) Access(addr uint64, write bool) bool { return e.ok(addr, 1, write) }

func (e *env) Sys(v rpn.SysValue) (uint64, bool) {
	switch v {
	case rpn.SysPID:
		if e.h.pidns {
			t, ok := e.h.threadEntry(uint32(e.h.tid))
			return uint64(t[3]), ok
		}
		return e.h.pid, true
	case rpn.SysTID:
		if e.h.pidns {
			t, ok := e.h.threadEntry(uint32(e.h.tid))
			return uint64(t[2]), ok
		}
		return e.h.tid, true
	case rpn.SysProcID:
		return e.h.lookupThread(uint32(e.h.tid))
	case rpn.SysTS:
		if e.tsc&jit.StampNS != 0 {
			// read with the system call: ns already
			return e.tsc &^ jit.StampNS, true
		}
		return jit.ClockNS(*e.h.clock(), e.tsc), true
	}
	return 0, false
}

func (e *env) IO(uint64, uint8, bool, uint64) (uint64, bool) { return 0, false }

// Switch is the machine's enable and disable: the shadow of the switches.
func (e *env) Switch(minor uint16, on bool) bool {
	e.h.swShadow[minor] = 0
	if !on {
		e.h.swShadow[minor] = 1
	}
	return true
}

// probeRun is one program under test: the compiled code and the
// machine's side of the state.
type probeRun struct {
	h    *harness
	p    *rpn.Program
	idx  int // the probe of p under test
	code *jit.Code
	x    *jitexec.Code
	ref  rpntest.Reference // the machine's side
	done bool
}

// close unmaps the code (also done when the test ends).
func (r *probeRun) close() {
	if !r.done {
		r.done = true
		r.x.Close()
	}
}

// start compiles probe 0 of p and resets counters, variables and the
// thread table; lv and gv start with random words (wider than 32 bits
// too: gprobes may write any value).
func (h *harness) start(p *rpn.Program) (*probeRun, error) { return h.startProbe(p, 0) }

// startProbe is start for probe idx of p.
func (h *harness) startProbe(p *rpn.Program, idx int) (*probeRun, error) {
	code, err := jit.Compile(p, idx, h.layout())
	if err != nil {
		return nil, err
	}
	fix := make([][2]uint32, len(code.Fixups))
	for i, f := range code.Fixups {
		fix[i] = [2]uint32{f.At, f.Handler}
	}
	x, err := jitexec.Load(code.Bytes, fix)
	if err != nil {
		h.t.Fatal(err)
	}
	r := &probeRun{h: h, p: p, idx: idx, code: code, x: x,
		ref: rpntest.Reference{P: p, Probe: idx, LV: make([]uint64, rpn.MaxVars), GV: make([]uint64, rpn.MaxGVars)}}
	h.t.Cleanup(r.close)
	*h.counters() = jit.Counters{}
	for i := range r.ref.LV {
		r.ref.LV[i] = h.word()
		r.ref.GV[i] = h.word()
		*h.u64(dLV + i*8) = r.ref.LV[i]
		*h.u64(dGV + i*8) = r.ref.GV[i]
	}
	clear(h.data[dThreads:dScratch])
	clear(h.sw)
	clear(h.swShadow)
	return r, nil
}

// word is a random value, often small, sometimes special.
func (h *harness) word() uint64 {
	switch h.rng.IntN(6) {
	case 0:
		return uint64(h.rng.IntN(8))
	case 1:
		return uint64(h.rng.Uint32())
	case 2:
		return -uint64(h.rng.IntN(4))
	case 3:
		return 1 << 63
	}
	return h.rng.Uint64()
}

// hitSetup is what a hit starts from.
type hitSetup struct {
	frame [jit.FrameSlots]uint64
	tsc   uint64
}

func (h *harness) randomSetup() hitSetup {
	var s hitSetup
	for i := range s.frame {
		s.frame[i] = h.word()
	}
	s.tsc = h.rng.Uint64() | 1 // 0 is "not read yet"
	return s
}

// hit runs one hit on both sides and compares. It returns a description
// of the first difference, or "".
func (r *probeRun) hit(s hitSetup) string {
	h := r.h
	e := &env{h: h, frame: s.frame, tsc: s.tsc}
	var want rpn.Result
	if h.swShadow[r.p.Module().Probes[r.idx].Minor] != 0 {
		// switched off: what the engine does, no hit (no run, no count)
		want = rpn.Result{Outcome: rpn.OutcomeSkipped}
	} else {
		want = r.ref.Run(e)
	}
	res := &want
	if e.err != nil {
		h.t.Fatalf("%v\n%s", e.err, r.p.Listing(r.idx))
	}
	if h.stats != nil {
		k := res.Outcome.String()
		if res.Outcome == rpn.OutcomeException {
			k += " " + res.Exception.String()
		} else if res.Log != nil {
			k += " with a record"
		}
		h.stats[k]++
	}

	// the pad: the frame, the scratch area with garbage but for what it sets
	for i, v := range s.frame {
		*h.u64(dFrame + i*8) = v
	}
	scratch := h.data[dScratch : dScratch+jit.ScratchSize(int(r.p.Module().LogMax))]
	for i := range scratch {
		scratch[i] = byte(h.rng.Uint32())
	}
	*h.u64(dScratch + jit.OffTSC) = s.tsc
	*h.u64(dScratch + jit.OffPid) = 0
	*h.u64(dScratch + jit.OffTid) = 0
	ret := r.x.Call(uintptr(h.addr(dFrame)), uintptr(h.addr(dScratch)))

	var diffs []string
	diff := func(format string, args ...any) { diffs = append(diffs, fmt.Sprintf(format, args...)) }
	hdr := h.data[dScratch:]
	got := rpntest.Observed{
		Exit:      hdr[jit.OffExit],
		Truncated: hdr[jit.OffTruncated] != 0,
		Exception: rpn.Exception(hdr[jit.OffException]),
		PC:        binary.LittleEndian.Uint32(hdr[jit.OffPC:]),
		Addr:      binary.LittleEndian.Uint64(hdr[jit.OffAddr:]),
		Major:     binary.LittleEndian.Uint16(hdr[jit.OffMajor:]),
		Minor:     binary.LittleEndian.Uint16(hdr[jit.OffMinor:]),
	}
	if n := binary.LittleEndian.Uint32(hdr[jit.OffLogLen:]); int(n) <= len(hdr)-jit.OffLog {
		got.Log = hdr[jit.OffLog : jit.OffLog+int(n)]
	}
	switch ret {
	case jit.ResultNone:
		got.Kind = rpntest.None
	case jit.ResultCommit:
		got.Kind = rpntest.Commit
	case jit.ResultException:
		got.Kind = rpntest.Raised
		if got.Truncated {
			diff("truncated set in an exception")
		}
	default:
		diff("returned %d", ret)
	}
	if ret <= jit.ResultException {
		diffs = append(diffs, rpntest.Compare(&want, &got)...)
	}
	c := *h.counters()
	if c.Disabled > 1 || c.Lost != 0 || c.Missed != 0 {
		diff("counters %+v: disabled is 0 or 1, nothing lost or missed", c)
	}
	st := rpn.ProbeState{Hits: c.Hits, Skipped: c.Skipped, Runs: c.Runs, Faults: c.Faults, Disabled: c.Disabled != 0}
	lv, gv := make([]uint64, len(r.ref.LV)), make([]uint64, len(r.ref.GV))
	for i := range lv {
		lv[i] = *h.u64(dLV + i*8)
	}
	for i := range gv {
		gv[i] = *h.u64(dGV + i*8)
	}
	diffs = append(diffs, r.ref.CompareState(st, lv, gv)...)
	for i := range e.frame {
		if v := *h.u64(dFrame + i*8); v != e.frame[i] {
			diff("frame %v = %#x, want %#x", rpn.Reg(i), v, e.frame[i])
		}
	}
	for p, prot := range memProt {
		if prot&unix.PROT_READ != 0 && !bytes.Equal(h.mem[p*pageSize:(p+1)*pageSize], h.shadow[p*pageSize:(p+1)*pageSize]) {
			diff("memory page %d differs", p)
		}
	}
	if !bytes.Equal(h.sw, h.swShadow) {
		for m := range h.sw {
			if h.sw[m] != h.swShadow[m] {
				diff("switch of minor %d is %d, want %d", m, h.sw[m], h.swShadow[m])
			}
		}
	}
	if len(diffs) == 0 {
		return ""
	}
	return fmt.Sprintf("machine: %v exit %d exception %v pc %#x addr %#x log %x\n%s",
		want.Outcome, want.Exit, want.Exception, want.PC, want.Addr, want.Log, strings.Join(diffs, "\n"))
}
