package xen

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/linuxkernel"
	"github.com/gprobes/gprobes/rpn"
)

// Options configure a Xen target.
type Options struct {
	linuxkernel.Options
	// Int1 plants int1 (0xf1, ICEBP) instead of int3. Xen 4.17 pauses a
	// debugged PV domain on both, but raises VIRQ_DEBUGGER only for the
	// debug trap (#DB: int1, single-step): with int1 the stop wakes
	// gprobes at once; with int3 it is found by polling the domain's
	// state. Off by default: under QEMU TCG (the lab) ICEBP from the PV
	// kernel's ring 3 raises #GP, which kills the guest; on hardware ICEBP
	// is a #DB without privilege check, but that is not verified yet.
	Int1 bool
	// Poll is the polling interval without Int1 (default 1 ms; with Int1 a
	// domain with no event is checked for being gone every 250 ms).
	Poll time.Duration
}

// Target is a PV domain's kernel seen from dom0.
type Target struct {
	dom     uint16
	opts    Options
	hv      *Hypervisor
	ev      *subscriber
	kern    *linuxkernel.Kernel
	width   int
	vcpus   int
	ctx     []Context
	ctxOK   []bool
	bps     map[uint64]bool // addresses holding our breakpoint byte
	gone    map[uint64]bool // addresses whose breakpoint was taken out
	queue   []engine.Event
	pauses  int // our pauses of the domain to undo on resume
	step    map[int]bool
	mu      sync.Mutex // guards running, kicked
	run     bool
	kicked  bool
	dead    bool
	detach  bool
	frames  map[uint64][]byte // frames mapped read-only
	wframes map[uint64][]byte // frames mapped read-write
	tlb     map[uint64]Translation
}

var _ engine.Target = (*Target)(nil)

const (
	opInt1 = 0xf1
	opInt3 = 0xcc
	flagTF = 1 << 8
)

// Open returns an opener for engine.Start: a domain put in debugging mode
// and paused (held) when it returns.
func Open(dom int, opts Options) func() (engine.Target, error) {
	return func() (engine.Target, error) {
		if opts.Poll == 0 {
			opts.Poll = time.Millisecond
		}
		t := &Target{dom: uint16(dom), opts: opts, bps: map[uint64]bool{}, gone: map[uint64]bool{}, step: map[int]bool{},
			frames: map[uint64][]byte{}, wframes: map[uint64][]byte{}, tlb: map[uint64]Translation{}}
		if err := t.setup(); err != nil {
			t.release(false)
			return nil, fmt.Errorf("xen:%d: %w", dom, err)
		}
		return t, nil
	}
}

func (t *Target) setup() error {
	var err error
	if t.hv, err = OpenHypervisor(); err != nil {
		return err
	}
	info, err := t.hv.Info(t.dom)
	if err != nil {
		return err
	}
	if info.HVM() {
		return errors.New("an HVM or PVH domain: the native backend probes PV domains (Xen reports an HVM guest's int3 through vm_event, which it does not use yet)")
	}
	if info.Dying() {
		return errors.New("the domain is shutting down")
	}
	if t.width, err = t.hv.AddressSize(t.dom); err != nil {
		return err
	}
	if t.width != 64 {
		return fmt.Errorf("a %d-bit guest: gprobes probes x86_64 guest kernels", t.width)
	}
	if t.opts.Int1 {
		if t.ev, err = subscribe(); err != nil {
			return err
		}
	}
	if err := t.hv.SetDebugging(t.dom, true); err != nil {
		return err
	}
	if err := t.hv.Pause(t.dom); err != nil {
		return err
	}
	t.pauses = 1
	t.vcpus = int(info.MaxVCPUID) + 1
	t.ctx = make([]Context, t.vcpus)
	t.ctxOK = make([]bool, t.vcpus)
	if os.Getenv("GPROBES_XEN_TRACE") != "" {
		Trace = func(f string, a ...any) { fmt.Fprintf(os.Stderr, "xen: "+f+"\n", a...) }
		ctx, err := t.context(0)
		if err == nil {
			Trace("vCPU 0: rip %#x cr3 %#x cr4 %#x gs_kernel %#x", ctx.RIP(), ctx.CR(3), ctx.CR(4), ctx.u64(offGSKernel))
		}
	}
	t.kern, err = linuxkernel.New(kmem{t}, t.opts.Options)
	return err
}

// release undoes setup: the domain runs on, out of debugging mode (or
// stays paused for a debugger with keepPaused).
func (t *Target) release(keepPaused bool) {
	if t.hv == nil {
		return
	}
	if !t.dead && t.kern != nil {
		// a vCPU may have hit a breakpoint since the last look (its trap
		// paused the domain, its rip is past the byte, which the engine
		// has put back): take it back to the instruction before letting go
		t.mu.Lock()
		t.run = true
		t.mu.Unlock()
		if t.stopAll() == nil {
			for _, ev := range t.queue {
				v := ev.Tid - 1
				if ev.Kind == engine.EvTrap && t.ctxOK[v] && (t.bps[t.ctx[v].RIP()-1] || t.gone[t.ctx[v].RIP()-1]) {
					t.ctx[v].SetRIP(t.ctx[v].RIP() - 1)
					t.hv.SetContext(t.dom, v, &t.ctx[v])
				}
			}
			t.queue = nil
		}
	}
	if !t.dead && !keepPaused {
		for ; t.pauses > 0; t.pauses-- {
			t.hv.Unpause(t.dom)
		}
		t.hv.SetDebugging(t.dom, false)
	}
	for _, m := range []map[uint64][]byte{t.frames, t.wframes} {
		for f, b := range m {
			UnmapFrame(b)
			delete(m, f)
		}
	}
	if t.ev != nil {
		t.ev.close()
	}
	t.hv.Close()
}

// AddSymbols loads more symbol files for the kernel.
func (t *Target) AddSymbols(paths []string) error { return t.kern.AddSymbols(paths) }

// Slide is the KASLR slide found.
func (t *Target) Slide() (uint64, bool) { return t.kern.Slide() }

// kmem reads the kernel's memory for linuxkernel.
type kmem struct{ t *Target }

func (m kmem) ReadMem(addr uint64, p []byte) error { return m.t.ReadMem(0, addr, p) }

func (t *Target) vcpu(tid int) (int, error) {
	if tid < 1 || tid > t.vcpus {
		return 0, fmt.Errorf("vCPU %d: no such thread", tid-1)
	}
	return tid - 1, nil
}

func (t *Target) context(v int) (*Context, error) {
	if !t.ctxOK[v] {
		if err := t.hv.GetContext(t.dom, v, &t.ctx[v]); err != nil {
			return nil, err
		}
		t.ctxOK[v] = true
	}
	return &t.ctx[v], nil
}

// stopped forgets what was read while the domain ran.
func (t *Target) stopped() {
	clear(t.ctxOK)
	clear(t.tlb)
}

// translate finds a kernel address in the page tables of a stopped vCPU.
func (t *Target) translate(va uint64) (Translation, error) {
	page := va &^ 0xfff
	if tr, ok := t.tlb[page]; ok {
		return tr, nil
	}
	ctx, err := t.context(0)
	if err != nil {
		return Translation{}, err
	}
	tr, err := Translate(physMem{t}, PagingOf(ctx.CR(4), t.width), ctx.CR(3), ctx.CR(4), page)
	if err != nil {
		return Translation{}, err
	}
	t.tlb[page] = tr
	return tr, nil
}

// physMem reads machine memory of the domain through mapped frames.
type physMem struct{ t *Target }

func (m physMem) ReadPhys(addr uint64, p []byte) error {
	for len(p) > 0 {
		f, err := m.t.frame(addr>>12, false)
		if err != nil {
			return err
		}
		n := copy(p, f[addr&0xfff:])
		p, addr = p[n:], addr+uint64(n)
	}
	return nil
}

func (t *Target) frame(fn uint64, write bool) ([]byte, error) {
	m := t.frames
	if write {
		m = t.wframes
	}
	if b, ok := m[fn]; ok {
		return b, nil
	}
	if len(m) >= 4096 {
		for f, b := range m { // drop one at random
			UnmapFrame(b)
			delete(m, f)
			break
		}
	}
	b, err := t.hv.MapFrame(t.dom, fn, write)
	if err != nil {
		return nil, err
	}
	m[fn] = b
	return b, nil
}

func (t *Target) access(addr uint64, p []byte, write bool) error {
	for len(p) > 0 {
		tr, err := t.translate(addr)
		if err != nil {
			return err
		}
		f, err := t.frame(tr.Phys>>12, write)
		if err != nil {
			return err
		}
		off := (tr.Phys + addr&0xfff) & 0xfff // tr is of the page
		var n int
		if write {
			n = copy(f[off:], p)
		} else {
			n = copy(p, f[off:])
		}
		p, addr = p[n:], addr+uint64(n)
	}
	return nil
}

func (t *Target) ReadMem(space int, addr uint64, p []byte) error  { return t.access(addr, p, false) }
func (t *Target) WriteMem(space int, addr uint64, p []byte) error { return t.access(addr, p, true) }

func (t *Target) GetRegs(tid int, r *engine.Regs) error {
	v, err := t.vcpu(tid)
	if err != nil {
		return err
	}
	ctx, err := t.context(v)
	if err != nil {
		return err
	}
	ctx.Regs(r)
	return nil
}

func (t *Target) SetRegs(tid int, r *engine.Regs) error {
	v, err := t.vcpu(tid)
	if err != nil {
		return err
	}
	ctx, err := t.context(v)
	if err != nil {
		return err
	}
	ctx.SetRegs(r)
	return t.hv.SetContext(t.dom, v, ctx)
}

// Wait blocks until a vCPU stops on a breakpoint or a step, Kick is
// called, or the domain goes.
func (t *Target) Wait() (engine.Event, error) {
	for {
		if len(t.queue) > 0 {
			ev := t.queue[0]
			t.queue = t.queue[1:]
			return ev, nil
		}
		if t.dead {
			return engine.Event{}, engine.ErrNoTracees
		}
		t.mu.Lock()
		running := t.run
		t.mu.Unlock()
		if !running {
			// nothing runs: a stop the engine asked for while stopped
			return engine.Event{Kind: engine.EvKick, Tid: 1}, nil
		}
		fired := false
		if t.ev != nil {
			fired = t.ev.wait(250 * time.Millisecond)
		} else {
			time.Sleep(t.opts.Poll)
		}
		info, err := t.hv.Info(t.dom)
		if err != nil || info.Dying() {
			t.dead = true
			how := "the domain was destroyed"
			if err == nil {
				how = "the domain shut down"
			}
			return engine.Event{Kind: engine.EvSpaceExit, Tid: 1, Exit: how}, nil
		}
		t.mu.Lock()
		kicked := t.kicked
		t.mu.Unlock()
		if !fired && !kicked && !info.Paused() {
			continue
		}
		if err := t.stopAll(); err != nil {
			return engine.Event{}, err
		}
		if kicked {
			t.mu.Lock()
			t.kicked = false
			t.mu.Unlock()
			t.queue = append(t.queue, engine.Event{Kind: engine.EvKick, Tid: 1})
		}
	}
}

// stopAll pauses the domain (synchronously: every vCPU is off the CPUs
// when it returns) and queues a trap event for each vCPU on a breakpoint
// or at the end of a step. Each such vCPU paused the domain once more.
func (t *Target) stopAll() error {
	if err := t.hv.Pause(t.dom); err != nil {
		return err
	}
	t.pauses++
	t.mu.Lock()
	t.run = false
	t.mu.Unlock()
	t.stopped()
	for v := 0; v < t.vcpus; v++ {
		ctx, err := t.context(v)
		if err != nil {
			continue // offline vCPU
		}
		rip := ctx.RIP()
		switch {
		case t.step[v]:
			delete(t.step, v)
			ctx.SetRFLAGS(ctx.RFLAGS() &^ flagTF)
			if err := t.hv.SetContext(t.dom, v, ctx); err != nil {
				return err
			}
			for o := 0; o < t.vcpus; o++ {
				if o != v {
					t.hv.UnpauseVCPU(t.dom, o)
				}
			}
		case t.bps[rip-1] || t.gone[rip-1]:
		default:
			continue
		}
		t.pauses++ // the debug trap's own pause
		t.queue = append(t.queue, engine.Event{Kind: engine.EvTrap, Tid: v + 1})
	}
	return nil
}

// Kick stops the running domain soon (from any goroutine).
func (t *Target) Kick() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.run || t.dead {
		return false
	}
	t.kicked = true
	if t.ev != nil {
		t.ev.wake()
	}
	return true
}

// Step runs one instruction of a vCPU with the others held.
func (t *Target) Step(tid int) error {
	v, err := t.vcpu(tid)
	if err != nil {
		return err
	}
	ctx, err := t.context(v)
	if err != nil {
		return err
	}
	for o := 0; o < t.vcpus; o++ {
		if o != v {
			if err := t.hv.PauseVCPU(t.dom, o); err != nil {
				return err
			}
		}
	}
	ctx.SetRFLAGS(ctx.RFLAGS() | flagTF)
	if err := t.hv.SetContext(t.dom, v, ctx); err != nil {
		return err
	}
	t.step[v] = true
	return t.resumeAll()
}

// Resume lets the domain run once every queued stop has been handled.
func (t *Target) Resume(tid, sig int) error {
	if len(t.queue) > 0 {
		return nil // another vCPU's stop is still to handle
	}
	return t.resumeAll()
}

func (t *Target) resumeAll() error {
	t.mu.Lock()
	t.run = true
	t.mu.Unlock()
	for ; t.pauses > 0; t.pauses-- {
		if err := t.hv.Unpause(t.dom); err != nil {
			return err
		}
	}
	return nil
}

func (t *Target) StopThread(tid int) ([]engine.Event, error) {
	t.mu.Lock()
	running := t.run
	t.mu.Unlock()
	if !running {
		return nil, nil
	}
	if err := t.stopAll(); err != nil {
		return nil, err
	}
	evs := t.queue
	t.queue = nil
	return evs, nil
}

func (t *Target) DrainKick(tid int) ([]int, error) { return nil, nil }

// Detach lets the domain go, out of debugging mode (once). exit 4 (sig
// SIGSTOP) leaves it paused for a debugger.
func (t *Target) Detach(tid, sig int) error {
	if t.detach || t.dead {
		return nil
	}
	t.detach = true
	t.release(sig == 19) // SIGSTOP: stay paused, in debugging mode
	return nil
}

func (t *Target) Threads(space int) []int {
	if t.detach || t.dead {
		return nil
	}
	out := make([]int, t.vcpus)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

func (t *Target) Spaces() []int {
	if t.dead {
		return nil
	}
	return []int{0}
}

func (t *Target) AllocXOL(space, tid int, near, size uint64) (uint64, error) {
	return 0, engine.ErrNoXOL
}

func (t *Target) ThreadIndex(tid int) int { return tid - 1 }

func (t *Target) IsStopped(tid int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.run
}

func (t *Target) Dump(space, tid int, dir string) (string, error) {
	return "", errors.New("the native Xen backend does not write guest dumps yet (xl dump-core DOMID does)")
}

func (t *Target) InsertBreakpoint(space int, addr uint64, orig []byte) error {
	op := byte(opInt3)
	if t.opts.Int1 {
		op = opInt1
	}
	if err := t.WriteMem(0, addr, []byte{op}); err != nil {
		return err
	}
	t.bps[addr] = true
	delete(t.gone, addr)
	return nil
}

func (t *Target) RemoveBreakpoint(space int, addr uint64, orig []byte) error {
	if len(orig) == 0 {
		return fmt.Errorf("no original byte for %#x", addr)
	}
	if err := t.WriteMem(0, addr, orig[:1]); err != nil {
		return err
	}
	delete(t.bps, addr)
	t.gone[addr] = true
	return nil
}

// TrapPC: int1 and int3 are traps: rip is past the breakpoint byte.
func (t *Target) TrapPC(rip uint64) uint64 { return rip - 1 }

func (t *Target) Kernel() bool { return true }

func (t *Target) Check(m *rpn.Module) string {
	return t.kern.Check(m, "xen:", "the guest's IO space is not reachable from dom0")
}

func (t *Target) Resolve(space int, name string, modtype rpn.ModType) (*engine.Loaded, bool, error) {
	return t.kern.Resolve(name)
}

func (t *Target) Rendezvous(space int) (uint64, bool) { return 0, false }

// Writable: the guest's page tables say.
func (t *Target) Writable(space int, addr uint64) bool {
	tr, err := t.translate(addr)
	return err == nil && tr.Writable
}

func (t *Target) Sys(tid int, regs *engine.Regs, v rpn.SysValue) (uint64, bool) {
	if v == rpn.SysProcID {
		return uint64(t.ThreadIndex(tid)), true
	}
	return t.kern.Sys(regs, v)
}

func (t *Target) UserReg(tid int, regs *engine.Regs, r rpn.Reg) (uint64, bool) {
	return t.kern.UserReg(regs, r)
}
