//go:build linux && amd64

package x86

// The real thing: the harness runs under ptrace with an int3 planted on
// the instruction under test, and this test handles every hit the way the
// engine does (emulate, emulate a branch, boost through a slot, or
// single-step in a slot and fix up), then compares registers and memory
// with a native run of the original instruction.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/rpn"
)

const ptraceOExitKill = 0x100000

// ptraceMem reads and writes the tracee's memory with PEEKDATA/POKEDATA.
// (POKEDATA writes whole words: fine for the single-threaded harness, not
// for an engine; see Mem.)
type ptraceMem struct{ pid int }

func (m ptraceMem) Read(a uint64, p []byte) bool {
	n, err := syscall.PtracePeekData(m.pid, uintptr(a), p)
	return err == nil && n == len(p)
}

func (m ptraceMem) Write(a uint64, p []byte) bool {
	n, err := syscall.PtracePokeData(m.pid, uintptr(a), p)
	return err == nil && n == len(p)
}

// ptRegs is the tracee's register block as PTRACE_GETREGSET(NT_PRSTATUS)
// returns it: struct user_regs_struct, or, while a 64-bit tracee runs
// 32-bit code, the i386 layout (17 words of 4 bytes). The kernel picks the
// layout from the tracee's current code segment, and PTRACE_GETREGS does
// the same on this kernel: an engine probing 32-bit code must handle both.
type ptRegs struct {
	buf [27 * 8]byte
	n   int // bytes the kernel filled: 216 or 68
}

const (
	ptraceGetRegset = 0x4204
	ptraceSetRegset = 0x4205
	ntPRStatus      = 1
)

func (p *ptRegs) regset(pid int, req uintptr) error {
	iov := syscall.Iovec{Base: &p.buf[0], Len: uint64(len(p.buf))}
	if req == ptraceSetRegset {
		iov.Len = uint64(p.n)
	}
	_, _, e := syscall.Syscall6(syscall.SYS_PTRACE, req, uintptr(pid), ntPRStatus, uintptr(unsafe.Pointer(&iov)), 0, 0)
	if e != 0 {
		return e
	}
	p.n = int(iov.Len)
	return nil
}

func (p *ptRegs) get(pid int) error { return p.regset(pid, ptraceGetRegset) }

// set writes the registers back. The i386 block cannot be written back
// as a whole: its fs and gs selectors, even unchanged, reset fs_base and
// gs_base of the 64-bit process (libc's TLS is gone and it crashes at the
// next %fs access). So 32-bit blocks go register by register with
// PTRACE_POKEUSER, which always takes struct user_regs_struct offsets.
func (p *ptRegs) set(pid int) error {
	if p.n != 68 {
		return p.regset(pid, ptraceSetRegset)
	}
	r := p.regs()
	for i := 0; i < 18; i++ {
		if ptOff32[i] < 0 {
			continue
		}
		if _, _, e := syscall.Syscall6(syscall.SYS_PTRACE, syscall.PTRACE_POKEUSR, uintptr(pid), uintptr(ptOff64[i]), uintptr(r[i]), 0, 0); e != 0 {
			return e
		}
	}
	return nil
}

// offsets of our registers in the two layouts (byte offsets)
var (
	ptOff64 = [18]int{10 * 8, 5 * 8, 11 * 8, 12 * 8, 13 * 8, 14 * 8, 4 * 8, 19 * 8,
		9 * 8, 8 * 8, 7 * 8, 6 * 8, 3 * 8, 2 * 8, 1 * 8, 0, 16 * 8, 18 * 8}
	ptOff32 = [18]int{6 * 4, 0, 1 * 4, 2 * 4, 3 * 4, 4 * 4, 5 * 4, 15 * 4,
		-1, -1, -1, -1, -1, -1, -1, -1, 12 * 4, 14 * 4}
)

func (p *ptRegs) regs() Regs {
	var r Regs
	for i := 0; i < 18; i++ {
		if p.n == 68 {
			if o := ptOff32[i]; o >= 0 {
				r[i] = uint64(binary.LittleEndian.Uint32(p.buf[o:]))
			}
		} else {
			r[i] = binary.LittleEndian.Uint64(p.buf[ptOff64[i]:])
		}
	}
	return r
}

func (p *ptRegs) setRegs(r *Regs) {
	for i := 0; i < 18; i++ {
		if p.n == 68 {
			if o := ptOff32[i]; o >= 0 {
				binary.LittleEndian.PutUint32(p.buf[o:], uint32(r[i]))
			}
		} else {
			binary.LittleEndian.PutUint64(p.buf[ptOff64[i]:], r[i])
		}
	}
}

func (p *ptRegs) pc() uint64 { return p.regs()[rpn.RegRIP] }

// tracer is a traced harness and the probes planted in it.
type tracer struct {
	h      *harness
	pid    int
	mem    ptraceMem
	probes map[uint64]*tprobe
	steps  int // single-steps taken
	faults int // faults delivered after mapping rip out of a slot
}

type tprobe struct {
	in      Insn
	slot    uint64
	written bool // the slot holds this probe's bytes
	hits    int
}

// startTracer starts the harness under ptrace. The calling goroutine must
// stay on its OS thread (runtime.LockOSThread) for every ptrace call.
func startTracer(t testing.TB) *tracer {
	t.Helper()
	if os.Getenv("GPROBES_NO_PTRACE") != "" {
		testkit.SkipOrFail(t, "GPROBES_NO_PTRACE set")
	}
	cmd := exec.Command(buildC(t, "harness.c"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	h, err := startHarness(cmd)
	if errors.Is(err, syscall.EPERM) {
		testkit.SkipOrFail(t, "ptrace not permitted here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil || !ws.Stopped() {
		t.Fatalf("traced harness did not stop at exec: %v %v", err, ws)
	}
	if err := syscall.PtraceSetOptions(pid, ptraceOExitKill); err != nil {
		t.Fatalf("PTRACE_SETOPTIONS: %v", err)
	}
	if err := syscall.PtraceCont(pid, 0); err != nil {
		t.Fatal(err)
	}
	h.hello(t)
	return &tracer{h: h, pid: pid, mem: ptraceMem{pid}, probes: map[uint64]*tprobe{}}
}

// serve handles stops until the harness exits.
func (tr *tracer) serve() error {
	for {
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(tr.pid, &ws, 0, nil); err != nil {
			return err
		}
		switch {
		case ws.Exited() || ws.Signaled():
			return nil
		case !ws.Stopped():
			continue
		}
		sig := ws.StopSignal()
		if sig == syscall.SIGTRAP {
			if err := tr.hit(); err != nil {
				syscall.Kill(tr.pid, syscall.SIGKILL)
				return err
			}
			continue
		}
		if err := tr.fault(sig); err != nil {
			return err
		}
	}
}

// fault passes a signal on, first moving rip out of a slot so the
// program sees the fault at the probed instruction.
func (tr *tracer) fault(sig syscall.Signal) error {
	var pr ptRegs
	if err := pr.get(tr.pid); err != nil {
		return err
	}
	for _, p := range tr.probes {
		if orig, ok := SlotPC(&p.in, p.slot, pr.pc()); ok {
			r := pr.regs()
			r[rpn.RegRIP] = orig
			pr.setRegs(&r)
			if err := pr.set(tr.pid); err != nil {
				return err
			}
			tr.faults++
		}
	}
	return syscall.PtraceCont(tr.pid, int(sig))
}

// hit runs one probe hit: the tracee stopped after the int3 at a probe.
func (tr *tracer) hit() error {
	var pr ptRegs
	if err := pr.get(tr.pid); err != nil {
		return err
	}
	p := tr.probes[pr.pc()-1]
	if p == nil {
		return fmt.Errorf("SIGTRAP at %#x: no probe there", pr.pc())
	}
	p.hits++
	regs := pr.regs()
	regs[rpn.RegRIP] = p.in.Addr
	in := &p.in
	switch in.Class {
	case Emulate:
		if EmulateInsn(in, &regs, tr.mem) {
			return tr.resume(&pr, &regs)
		}
		return tr.step(p, &pr, &regs) // the memory access faults: let the CPU fault
	case Branch:
		if !EmulateBranch(in, &regs, tr.mem) {
			return tr.step(p, &pr, &regs)
		}
		return tr.resume(&pr, &regs)
	case Boost:
		if err := tr.writeSlot(p); err != nil {
			return err
		}
		regs[rpn.RegRIP] = p.slot
		return tr.resume(&pr, &regs)
	case Step:
		return tr.step(p, &pr, &regs)
	}
	return fmt.Errorf("hit on `%s`: class %v", in.String(), in.Class)
}

func (tr *tracer) resume(pr *ptRegs, regs *Regs) error {
	pr.setRegs(regs)
	if err := pr.set(tr.pid); err != nil {
		return err
	}
	return syscall.PtraceCont(tr.pid, 0)
}

func (tr *tracer) writeSlot(p *tprobe) error {
	if p.written {
		return nil
	}
	b, err := PrepareXOL(&p.in, p.slot, p.in.Class == Boost)
	if err != nil {
		return err
	}
	for _, q := range tr.probes {
		if q.slot == p.slot {
			q.written = false
		}
	}
	if !tr.mem.Write(p.slot, b) {
		return fmt.Errorf("cannot write slot at %#x", p.slot)
	}
	p.written = true
	return nil
}

// step single-steps the instruction in its slot and fixes up.
func (tr *tracer) step(p *tprobe, pr *ptRegs, regs *Regs) error {
	if err := tr.writeSlot(p); err != nil {
		return err
	}
	regs[rpn.RegRIP] = p.slot
	pr.setRegs(regs)
	if err := pr.set(tr.pid); err != nil {
		return err
	}
	for {
		if err := syscall.PtraceSingleStep(tr.pid); err != nil {
			return err
		}
		tr.steps++
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(tr.pid, &ws, 0, nil); err != nil {
			return err
		}
		if !ws.Stopped() {
			return fmt.Errorf("tracee ended during a step: %v", ws)
		}
		if sig := ws.StopSignal(); sig != syscall.SIGTRAP {
			return tr.fault(sig) // the instruction faulted in the slot
		}
		if err := pr.get(tr.pid); err != nil {
			return err
		}
		r := pr.regs()
		err := FixupAfterStep(&p.in, p.slot, &r, tr.mem)
		if errors.Is(err, ErrStepAgain) {
			continue
		}
		if err != nil {
			return err
		}
		return tr.resume(pr, &r)
	}
}

type ptraceCase struct {
	code  []byte
	mode  int
	prep  func(r *Regs)
	class Class // force a class (to single-step what is normally emulated)
	force bool
}

func TestPtraceProbeHits(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	native := newHarness(t)
	has32 := native.compat32(t)
	tr := startTracer(t)

	const unmapped = 0xdead0000
	cases := []ptraceCase{
		// Emulate
		{code: []byte{0xf3, 0x0f, 0x1e, 0xfa}},       // endbr64
		{code: []byte{0x55}},                         // push %rbp
		{code: []byte{0x41, 0x54}},                   // push %r12
		{code: []byte{0x48, 0x83, 0xec, 0x18}},       // sub $0x18,%rsp
		{code: []byte{0x48, 0x8b, 0x47, 0x08}},       // mov 0x8(%rdi),%rax
		{code: []byte{0x80, 0x3f, 0x00}},             // cmpb $0x0,(%rdi)
		{code: []byte{0x48, 0x8b, 0x05, 0, 0, 0, 0}}, // mov rel(%rip),%rax
		{code: []byte{0xc3}},                         // ret
		{code: []byte{0xff, 0xd0}},                   // call *%rax
		{code: []byte{0x9c}},                         // pushf
		{code: []byte{0x48, 0x8b, 0x47, 0x08}, prep: func(r *Regs) { r[rpn.RegRDI] = unmapped }}, // faults: stepped, SIGSEGV at the probe
		// Branch
		{code: []byte{0x74, 0x40}},                   // je
		{code: []byte{0x0f, 0x8c, 0x00, 0x01, 0, 0}}, // jl rel32
		{code: []byte{0xe8, 0x00, 0x01, 0, 0}},       // call rel32
		{code: []byte{0xe2, 0x40}},                   // loop
		// Boost
		{code: []byte{0x48, 0x0f, 0xc8}},       // bswap %rax
		{code: []byte{0x48, 0x0f, 0xaf, 0xc1}}, // imul %rcx,%rax
		{code: []byte{0x48, 0xd3, 0xe0}},       // shl %cl,%rax
		// Step
		{code: []byte{0x48, 0x89, 0x05, 0, 0, 0, 0}},                                           // mov %rax,rel(%rip)
		{code: []byte{0xf0, 0x0f, 0xc1, 0x07}},                                                 // lock xadd %eax,(%rdi)
		{code: []byte{0x48, 0x01, 0x07}},                                                       // add %rax,(%rdi)
		{code: []byte{0x48, 0xf7, 0xf1}},                                                       // div %rcx
		{code: []byte{0xf3, 0xaa}},                                                             // rep stos: one step per iteration
		{code: []byte{0x48, 0x87, 0x04, 0x24}},                                                 // xchg %rax,(%rsp)
		{code: []byte{0xff, 0x15, 0, 0, 0, 0}},                                                 // call *rel(%rip) (emulated)
		{code: []byte{0x0f, 0x05}, prep: func(r *Regs) { r[rpn.RegRAX] = 110 }},                // syscall getppid: the same in both harnesses
		{code: []byte{0x48, 0x01, 0x07}, prep: func(r *Regs) { r[rpn.RegRDI] = unmapped }},     // faults in the slot
		{code: []byte{0xff, 0xd0}, prep: func(r *Regs) { r[rpn.RegRAX] = 0x8000000000001000 }}, // non-canonical target: #GP at the call
		// Emulate-class instructions single-stepped, as when emulation gives up
		{code: []byte{0x9c}, class: Step, force: true},                         // pushf: the step's TF must not stay in the pushed image
		{code: []byte{0xff, 0xd0}, class: Step, force: true},                   // call *%rax: return address fixed
		{code: []byte{0xff, 0x57, 0x08}, class: Step, force: true},             // call *0x8(%rdi)
		{code: []byte{0xc3}, class: Step, force: true},                         // ret
		{code: []byte{0x55}, class: Step, force: true},                         // push %rbp
		{code: []byte{0x48, 0x8b, 0x05, 0, 0, 0, 0}, class: Step, force: true}, // rip-relative load from the slot
		// 32-bit code
		{code: []byte{0x53}, mode: 32},                         // push %ebx
		{code: []byte{0x8b, 0x47, 0x08}, mode: 32},             // mov 0x8(%edi),%eax
		{code: []byte{0x01, 0x07}, mode: 32},                   // add %eax,(%edi)
		{code: []byte{0x0f, 0xc8}, mode: 32},                   // bswap %eax
		{code: []byte{0xe8, 0x00, 0x01, 0, 0}, mode: 32},       // call rel32
		{code: []byte{0xa1, 0x00, 0x01, 0x00, 0x10}, mode: 32}, // mov 0x10000100,%eax
	}

	r := rand.New(rand.NewPCG(3, 3))
	var nreqs, treqs []request
	var probes []*tprobe
	for i, c := range cases {
		mode := c.mode
		if mode == 0 {
			mode = 64
		}
		if mode == 32 && !has32 {
			continue
		}
		code := append([]byte(nil), c.code...)
		in := mustDecode(t, code, hX, mode)
		if in.RIPDispOff >= 0 {
			binary.LittleEndian.PutUint32(code[in.RIPDispOff:], uint32(hData+0x80-(hX+uint64(in.Len))))
			in = mustDecode(t, code, hX, mode)
		}
		if c.force {
			in.Class = c.class
		}
		g := &gen{r: r, mode: mode}
		regs := g.state()
		regs[rpn.RegRSP] = hData + 0x300
		regs[rpn.RegRDI] = hData + 0x40
		regs[rpn.RegRAX] = hXOLLand
		regs[rpn.RegRCX] = 5
		regs[rpn.RegRDX] = 0
		if c.prep != nil {
			c.prep(&regs)
		}
		if mode == 32 {
			for j := range regs {
				regs[j] &= 0xffffffff
			}
		}
		var win [hWindow]byte
		for j := range win {
			win[j] = byte(r.Uint32())
		}
		binary.LittleEndian.PutUint64(win[0x300:], hXOLLand) // for ret
		binary.LittleEndian.PutUint64(win[0x80:], hXOLLand)  // for call *rel(%rip)
		binary.LittleEndian.PutUint64(win[0x48:], hXOLLand)  // for call *0x8(%rdi)
		lands := []uint64{hX + uint64(in.Len), hXOLLand}
		if in.Class == Branch {
			lands = append(lands, in.Target())
		}
		s := scenario{mode: mode, entry: hX, regs: regs, window: win, code: []chunk{{hX, code}}, landings: lands}
		nreqs = append(nreqs, native.request(&s))
		// The traced run has the int3 planted; each case gets its own
		// address so the tracer finds the probe by address.
		p := &tprobe{in: in, slot: hSlot + uint64(i)*SlotSize}
		planted := append([]byte{0xcc}, code[1:]...)
		s.code = []chunk{{hX, planted}}
		treqs = append(treqs, tr.h.request(&s))
		probes = append(probes, p)
	}
	want := native.runAll(t, nreqs)

	// One request at a time: every case's probe sits at hX.
	got := make([]reply, len(treqs))
	for i := range treqs {
		tr.probes = map[uint64]*tprobe{hX: probes[i]}
		done := make(chan error, 1)
		go func() {
			rep, err := tr.h.runAllErr(treqs[i : i+1])
			if err == nil {
				got[i] = rep[0]
			}
			done <- err
		}()
		// Serve stops until the reply arrives: wait for stops with WNOHANG
		// so the loop notices the reply.
		if err := tr.serveUntil(done); err != nil {
			t.Fatalf("case %d `%s`: %v", i, probes[i].in.String(), err)
		}
	}
	tr.h.in.Close()
	tr.serve()

	for i, p := range probes {
		in := &p.in
		w, g := &want[i], &got[i]
		if p.hits != 1 {
			t.Errorf("`%s`: %d hits, want 1", in.String(), p.hits)
		}
		if w.signo != g.signo || w.faultRIP != g.faultRIP {
			t.Errorf("`%s` (%v): native signal %d at %#x, probed %d at %#x", in.String(), in.Class, w.signo, w.faultRIP, g.signo, g.faultRIP)
			continue
		}
		if w.signo != 0 {
			continue
		}
		if d := diffRegs(in.Mode, &w.regs, &g.regs); d != "" {
			t.Errorf("`%s` (%v):%s", in.String(), in.Class, d)
		}
		if !bytes.Equal(w.data[:hWindow], g.data[:hWindow]) {
			t.Errorf("`%s` (%v): memory differs", in.String(), in.Class)
		}
	}
	t.Logf("%d probed instructions under ptrace: %d single-steps, %d faults moved out of a slot", len(probes), tr.steps, tr.faults)
}

// serveUntil handles stops until done delivers.
func (tr *tracer) serveUntil(done chan error) error {
	for {
		select {
		case err := <-done:
			return err
		default:
		}
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(tr.pid, &ws, syscall.WNOHANG, nil)
		if err != nil {
			return err
		}
		if pid == 0 {
			time.Sleep(20 * time.Microsecond)
			continue
		}
		if ws.Exited() || ws.Signaled() {
			return fmt.Errorf("harness ended: %v", ws)
		}
		if !ws.Stopped() {
			continue
		}
		if sig := ws.StopSignal(); sig == syscall.SIGTRAP {
			if err := tr.hit(); err != nil {
				return err
			}
		} else if err := tr.fault(sig); err != nil {
			return err
		}
	}
}

// BenchmarkPtraceHit measures one probe hit, from the int3 trap to the
// tracee running again, for each way of executing the displaced
// instruction. The loop in the tracee: X: insn; dec %r15; jnz X.
func BenchmarkPtraceHit(b *testing.B) {
	for _, c := range []struct {
		name string
		code []byte
	}{
		{"emulate-nop", []byte{0x0f, 0x1f, 0x44, 0x00, 0x00}},
		{"emulate-load", []byte{0x48, 0x8b, 0x47, 0x08}},
		{"boost-bswap", []byte{0x48, 0x0f, 0xc8}},
		{"step-add-mem", []byte{0x48, 0x01, 0x07}},
	} {
		b.Run(c.name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tr := startTracer(b)
			in := mustDecode(b, c.code, hX, 64)
			tr.probes[hX] = &tprobe{in: in, slot: hSlot}
			loop := append([]byte{0xcc}, c.code[1:]...)
			loop = append(loop, 0x49, 0xff, 0xcf) // dec %r15
			back := -(len(loop) + 2)
			loop = append(loop, 0x75, byte(int8(back))) // jnz X
			var regs Regs
			regs[rpn.RegRSP] = hData + 0x300
			regs[rpn.RegRDI] = hData + 0x40
			regs[rpn.RegR15] = uint64(b.N)
			regs[rpn.RegRFLAGS] = 0x202
			s := scenario{mode: 64, entry: hX, regs: regs, code: []chunk{{hX, loop}}, landings: []uint64{hX + uint64(len(loop))}}
			req := tr.h.request(&s)
			done := make(chan error, 1)
			b.ResetTimer()
			go func() { _, err := tr.h.runAllErr([]request{req}); done <- err }()
			if err := tr.serveUntilBlocking(done, b.N); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if got := tr.probes[hX].hits; got != b.N {
				b.Fatalf("%d hits, want %d", got, b.N)
			}
			tr.h.in.Close()
			tr.serve()
		})
	}
}

// serveUntilBlocking is serveUntil with blocking waits, for a run that
// hits the probe at hX exactly n times and then replies.
func (tr *tracer) serveUntilBlocking(done chan error, n int) error {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(tr.pid, &ws, 0, nil)
		if err != nil {
			return err
		}
		if pid != tr.pid || !ws.Stopped() {
			return fmt.Errorf("harness ended: %v", ws)
		}
		sig := ws.StopSignal()
		if sig != syscall.SIGTRAP {
			if err := tr.fault(sig); err != nil {
				return err
			}
			continue
		}
		if err := tr.hit(); err != nil {
			return err
		}
		if tr.probes[hX].hits == n {
			return <-done
		}
	}
}
