package xen

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/linuxkernel"
)

// Options configure a Xen target.
type Options struct {
	linuxkernel.Options
	// Breakpoints chooses how probes stop the guest (default "auto", or
	// the environment's GPROBES_XEN_BREAKPOINTS):
	//   auto  debug registers for the first four probe addresses, int3 for
	//         the rest;
	//   dr    debug registers only (at most four probe addresses);
	//   int3  int3 bytes only;
	//   int1  int1 bytes (0xf1, ICEBP) only.
	// How gprobes learns of each kind of stop, and why auto is the
	// default: the package's design note (doc.go).
	Breakpoints string
	// Poll is the interval of the state check while int3 probes are in
	// (default 1 ms).
	Poll time.Duration
}

// Breakpoint modes.
const (
	BreakAuto = "auto"
	BreakDR   = "dr"
	BreakInt3 = "int3"
	BreakInt1 = "int1"
)

// idleCheck is the interval of the state check when every probe is
// reported by VIRQ_DEBUGGER: it catches what Xen does not announce, a
// guest kernel's own int3 (text_poke_bp, a kprobe of its own), which
// pauses a debugged domain silently; and a death when the xenstore watch
// is not there.
const idleCheck = 50 * time.Millisecond

// Target is a PV domain's kernel seen from dom0.
type Target struct {
	dom      uint16
	opts     Options
	hv       *Hypervisor
	ev       *subscriber
	kern     *linuxkernel.Kernel
	os       *linuxkernel.Guest
	width    int
	vcpus    int
	ctx      []Context
	ctxOK    []bool
	dirty    []bool            // ctx changed, to write before the vCPU runs
	bps      map[uint64]bool   // addresses holding our breakpoint byte
	bpFrame  map[uint64]uint64 // the machine frame of each of bps, whose writable mapping is kept (dropWritable)
	bpsIn    map[uint64]int    // how many of bps each machine frame holds
	loose    map[uint64]bool   // writable frames that may hold none of bps since the last Resume
	gone     map[uint64]bool   // addresses whose breakpoint byte was taken out
	dr       [4]uint64         // debug-register breakpoints (0: free slot)
	wdr      [4]*engine.Watch  // watches in debug registers (watch_linux.go)
	wfired   []uint8           // per vCPU, the watch registers its last stop fired
	drGone   map[uint64]bool   // debug-register breakpoints taken out
	why      []stopKind        // why each vCPU stopped, at the last stop
	noStatus bool              // no gdbsx_domstatus: int3 stops found by rip alone
	int3     map[int]bool      // vCPUs with a gdbsx int3 event (taken by gdbsx_domstatus)
	more     bool              // gdbsx_domstatus named a vCPU: another may have an event
	vcpuOps  []Call            // gdbsx vCPU unpauses to run before the domain runs again
	cur      int               // the vCPU whose page tables translate addresses
	waited   bool              // a state check found the domain paused and left it to the VIRQ
	keepInt3 bool              // the last look took int3 events while the domain still ran: the next look keeps them
	queue    []engine.Event
	pauses   int // pauses of the domain to undo on resume (ours, and one per debug trap)
	step     map[int]bool
	mu       sync.Mutex // guards run, kicked
	run      bool
	kicked   bool
	dead     bool
	detach   bool
	frames   map[uint64][]byte // frames mapped read-only
	wframes  map[uint64][]byte // frames mapped read-write: only while the domain is paused, or while they hold one of bps
	tlb      map[tlbKey]Translation
	stats    stats
	// what a gprobes that dies leaves in the domain (journal_linux.go)
	journal    *journal
	journalDir string
	orig       map[uint64]byte // the original byte under each of bps
	debugging  bool            // we turned debugging mode on
	released   bool
	hvm        string     // an HVM or PVH domain: the breakpoint mode asked (hvm_linux.go)
	vme        *vmMonitor // the vm_event route's monitor ring (vmevent.go), instead of debugging mode
}

// tlbKey is a page in an address space (the CR3 it was translated with).
type tlbKey struct{ cr3, page uint64 }

type stopKind byte

const (
	stopNone  stopKind = iota
	stopByte           // past an int3/int1 byte of ours
	stopDR             // on a debug-register breakpoint (a fault: before the instruction)
	stopStep           // at the end of a single-step
	stopWatch          // after an access a watch's debug register caught (a trap)
)

// stats count how stops were learnt of, for the summary at detach.
type stats struct {
	start            time.Time
	stops            int // trap stops handed to the engine
	byEvent, byCheck int // stops found after an event, after a timed check
	checks           int // timed checks
	foreign          int // the guest's own int3s met
	together         int // looks that found two vCPUs or more stopped at once
}

var (
	_ engine.Target = (*Target)(nil)
	_ engine.Dumper = (*Target)(nil)
)

const (
	opInt1 = 0xf1
	opInt3 = 0xcc
	flagTF = 1 << 8

	dr6Hits  = 0xf     // %dr6 B0-B3: which debug register fired
	dr6Step  = 1 << 14 // %dr6 BS: a single-step
	dr7Slots = 0xff    // %dr7 L0-G3
	dr7Ctl   = 0xffff0000
	trapInt3 = 3 // Xen's gdbsx event of an int3
)

// Open returns an opener for engine.Start: a domain put in debugging mode
// and paused (held) when it returns.
func Open(dom int, opts Options) func() (engine.Target, error) {
	return func() (engine.Target, error) {
		if opts.Poll == 0 {
			opts.Poll = time.Millisecond
		}
		if opts.Breakpoints == "" {
			opts.Breakpoints = os.Getenv("GPROBES_XEN_BREAKPOINTS")
		}
		switch opts.Breakpoints {
		case "":
			opts.Breakpoints = BreakAuto
		case BreakAuto, BreakDR, BreakInt3, BreakInt1:
		default:
			return nil, fmt.Errorf("xen:%d: breakpoints %q: want auto, dr, int3 or int1", dom, opts.Breakpoints)
		}
		t := newTarget(uint16(dom), opts)
		if err := t.setup(); err != nil {
			t.release(false)
			return nil, fmt.Errorf("xen:%d: %w", dom, err)
		}
		return t, nil
	}
}

func newTarget(dom uint16, opts Options) *Target {
	return &Target{dom: dom, opts: opts, bps: map[uint64]bool{}, bpFrame: map[uint64]uint64{}, bpsIn: map[uint64]int{}, loose: map[uint64]bool{}, gone: map[uint64]bool{}, drGone: map[uint64]bool{}, orig: map[uint64]byte{},
		step: map[int]bool{}, frames: map[uint64][]byte{}, wframes: map[uint64][]byte{}, tlb: map[tlbKey]Translation{}, int3: map[int]bool{}}
}

// sizeVCPUs makes room for the state of vCPUs 0 to maxID.
func (t *Target) sizeVCPUs(maxID uint32) {
	t.vcpus = int(maxID) + 1
	t.ctx = make([]Context, t.vcpus)
	t.ctxOK = make([]bool, t.vcpus)
	t.dirty = make([]bool, t.vcpus)
	t.why = make([]stopKind, t.vcpus)
	t.wfired = make([]uint8, t.vcpus)
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
		if err := t.setupHVM(); err != nil {
			return err
		}
	}
	if info.Dying() {
		return errors.New("the domain is shutting down")
	}
	if t.width, err = addressSize(t.hv, t.dom, info); err != nil {
		return err
	}
	if t.width != 64 {
		return fmt.Errorf("a %d-bit guest: gprobes probes x86_64 guest kernels", t.width)
	}
	if os.Getenv("GPROBES_XEN_TRACE") != "" {
		Trace = func(f string, a ...any) { fmt.Fprintf(os.Stderr, "xen: "+f+"\n", a...) }
	}
	if err := t.openJournal(info); err != nil {
		return err
	}
	t.ev = subscribe()
	if t.vme == nil {
		if err := t.hv.SetDebugging(t.dom, true); err != nil {
			return err
		}
		t.debugging = true
	}
	if err := t.hv.Pause(t.dom); err != nil {
		return err
	}
	t.pauses = 1
	t.sizeVCPUs(info.MaxVCPUID)
	t.stats.start = time.Now()
	if ctx, err := t.context(0); err == nil {
		trace("vCPU 0: rip %#x cr3 %#x cr4 %#x gs_kernel %#x", ctx.RIP(), ctx.CR(3), ctx.CR(4), ctx.u64(offGSKernel))
	}
	t.kern, err = linuxkernel.New(kmem{t}, t.opts.Options)
	t.os = &linuxkernel.Guest{K: t.kern, Target: "xen:", NoIO: "the guest's IO space is not reachable from dom0", VCPU: t.ThreadIndex,
		WritableAt: func(addr uint64) bool {
			// the guest's page tables say
			tr, err := t.translate(addr)
			return err == nil && tr.Writable
		}}
	return err
}

// release undoes setup: the domain runs on, out of debugging mode and
// with its debug registers cleared (or stays paused for a debugger with
// keepPaused).
func (t *Target) release(keepPaused bool) {
	if t.hv == nil || t.released {
		return
	}
	t.released = true
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
				if ev.Kind == engine.EvTrap && t.why[v] == stopByte {
					t.ctx[v].SetRIP(t.ctx[v].RIP() - 1)
					t.dirty[v] = true
				}
			}
			t.queue = nil
			t.dr = [4]uint64{}
			t.wdr = [4]*engine.Watch{}
			for v := 0; v < t.vcpus; v++ {
				t.syncDR(v)
			}
			if err := t.commit(false); err != nil {
				trace("detach: %v", err)
			}
		}
	}
	if !t.dead && !keepPaused {
		if err := t.commit(true); err != nil {
			trace("detach: %v", err)
		}
		for ; t.pauses > 0; t.pauses-- { // what the batch could not undo
			t.hv.Unpause(t.dom)
		}
	}
	if !t.dead && t.kern != nil {
		t.summary()
	}
	if !t.dead && keepPaused {
		// exit 4: the domain stays paused by one pause, the one the
		// printed command's `xl unpause` takes back once the debugger
		// is done (gdbsx takes back only its own); the debug trap's
		// and any other of gprobes' are undone here
		for ; t.pauses > 1; t.pauses-- {
			t.hv.Unpause(t.dom)
		}
	}
	t.closeHVM()
	if !t.dead && t.debugging {
		// kept paused for a debugger (exit 4), the domain leaves
		// debugging mode all the same: gdbsx turns it on when it
		// attaches, and an `xl unpause` without a debugger must not
		// leave the guest's own int3s pausing it
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
	t.closeJournal()
	t.hv.Close()
}

// summary says how the stops were learnt of (stderr, one line).
func (t *Target) summary() {
	st := t.stats
	if st.stops == 0 && st.foreign == 0 {
		return
	}
	line := fmt.Sprintf("gprobes: xen:%d: %d stops in %.1f s: %d reported by VIRQ_DEBUGGER or xenstore, %d found by a timed state check (%d checks)",
		t.dom, st.stops, time.Since(st.start).Seconds(), st.byEvent, st.byCheck, st.checks)
	if st.foreign > 0 {
		line += fmt.Sprintf("; %d stops on the guest's own int3", st.foreign)
	}
	if st.together > 0 {
		line += fmt.Sprintf("; %d times two vCPUs or more stopped at once", st.together)
	}
	c := t.hv.Counts()
	line += fmt.Sprintf("; %d hypercalls (%d domctls, %d multicalls, %d frame maps)", c.Hypercalls, c.Domctls, c.Multicalls, c.FrameMaps)
	fmt.Fprintln(os.Stderr, line)
}

// kmem reads the kernel's memory for linuxkernel.
type kmem struct{ t *Target }

func (m kmem) ReadMem(addr uint64, p []byte) error  { return m.t.ReadMem(0, addr, p) }
func (m kmem) WriteMem(addr uint64, p []byte) error { return m.t.WriteMem(0, addr, p) }

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

// commit writes the contexts changed while the domain was stopped, runs
// the gdbsx vCPU unpauses put off (the end of a step) and, with unpause,
// undoes every pause of the domain: one hypercall, a multicall of them
// all, in that order.
func (t *Target) commit(unpause bool) error {
	var calls []Call
	var vs []int
	for v, d := range t.dirty {
		if d {
			calls = append(calls, contextCall(domctlSetVCPUContext, t.dom, v, &t.ctx[v]))
			vs = append(vs, v)
		}
	}
	calls = append(calls, t.vcpuOps...)
	t.vcpuOps = nil
	ups := 0
	if unpause {
		ups = t.pauses
		for i := 0; i < ups; i++ {
			calls = append(calls, domCall(domctlUnpauseDomain, t.dom, -1))
		}
	}
	if err := t.hv.Batch(calls); err != nil {
		return err
	}
	var first error
	for i, c := range calls {
		switch {
		case i < len(vs):
			if c.Err == nil {
				t.dirty[vs[i]] = false
			}
		case i >= len(calls)-ups:
			if c.Err == nil {
				t.pauses--
			}
		}
		if c.Err != nil && first == nil {
			first = c.Err
		}
	}
	return first
}

// look reads the domain's state in one hypercall: getdomaininfo, the
// first vCPU with a gdbsx int3 event (gdbsx_domstatus, which clears it)
// and, with contexts (after VIRQ_DEBUGGER, which says a debugged domain
// stopped on a debug trap, most likely ours), every vCPU's context. What
// was read before is forgotten: the domain ran since. The contexts are
// only of use if the domain is paused.
func (t *Target) look(contexts bool) (DomainInfo, error) {
	clear(t.ctxOK)
	clear(t.tlb)
	clear(t.why)
	if !t.keepInt3 {
		clear(t.int3)
	}
	t.keepInt3 = false
	t.more = false
	var info DomainInfo
	calls := []Call{infoCall(t.dom, &info)}
	var sv int
	var sev uint32
	if !t.noStatus {
		calls = append(calls, statusCall(t.dom, &sv, &sev))
	}
	if contexts {
		calls = t.appendContexts(calls)
	}
	if err := t.hv.Batch(calls); err != nil {
		return info, err
	}
	if err := infoErr(t.dom, calls[0], info); err != nil {
		return info, err
	}
	if !t.noStatus {
		t.takeStatus(calls[1].Err, sv, sev)
	}
	t.takeContexts(calls)
	return info, nil
}

// appendContexts adds a getvcpucontext of every vCPU not read yet.
func (t *Target) appendContexts(calls []Call) []Call {
	for v := 0; v < t.vcpus; v++ {
		if !t.ctxOK[v] {
			calls = append(calls, contextCall(domctlGetVCPUContext, t.dom, v, &t.ctx[v]))
		}
	}
	return calls
}

// takeContexts marks the contexts a batch read (an offline vCPU's fails).
func (t *Target) takeContexts(calls []Call) {
	for _, c := range calls {
		if c.Cmd == domctlGetVCPUContext && c.Err == nil {
			for v := range t.ctx {
				if c.Ctx == &t.ctx[v] {
					t.ctxOK[v] = true
				}
			}
		}
	}
}

// takeStatus notes what a gdbsx_domstatus said.
func (t *Target) takeStatus(err error, v int, ev uint32) {
	if err != nil {
		trace("gdbsx_domstatus: %v: int3 stops found by rip alone", err)
		t.noStatus = true
		t.more = false
		return
	}
	t.more = v >= 0
	if v >= 0 && ev == trapInt3 {
		t.int3[v] = true
	}
}

// readStopped reads, in one hypercall as a rule, what a stop needs that
// look did not read: every vCPU's context and, while gdbsx_domstatus
// names vCPUs, the next one's int3 event.
func (t *Target) readStopped() error {
	first := true
	for i := 0; first || (t.more && !t.noStatus && i <= t.vcpus); i++ { // each domstatus clears one event
		var calls []Call
		var sv int
		var sev uint32
		status := t.more && !t.noStatus
		if status {
			calls = append(calls, statusCall(t.dom, &sv, &sev))
		}
		if first {
			calls = t.appendContexts(calls)
			first = false
		}
		if len(calls) == 0 {
			return nil
		}
		if err := t.hv.Batch(calls); err != nil {
			return err
		}
		if status {
			t.takeStatus(calls[0].Err, sv, sev)
		}
		t.takeContexts(calls)
	}
	return nil
}

// syncDR puts the debug-register breakpoints into a vCPU's context when
// its registers differ from them (the first time, or after a change; a
// guest kernel using its debug registers itself would lose them to us).
func (t *Target) syncDR(v int) {
	ctx, err := t.context(v)
	if err != nil {
		return // offline vCPU
	}
	addr, want := t.drWant()
	same := true
	for i, a := range addr {
		if a != 0 {
			same = same && ctx.DebugReg(i) == a
		}
	}
	if same && ctx.DebugReg(7)&(dr7Slots|dr7Ctl) == want {
		return
	}
	for i, a := range addr {
		ctx.SetDebugReg(i, a)
	}
	ctx.SetDebugReg(7, want)
	t.dirty[v] = true
}

// translate finds an address in the page tables of a stopped vCPU: the
// one whose registers the engine read last (t.cur: the engine reads a
// thread's registers first thing at each of its stops, so a probe's
// memory reads at a hit go through the page tables of the vCPU that hit,
// the address space of the task that runs there, as a GDB stub's memory
// follows the thread selected last). Kernel addresses are the same in
// every vCPU's tables.
func (t *Target) translate(va uint64) (Translation, error) {
	ctx, err := t.context(t.cur)
	for v := 0; err != nil && v < t.vcpus; v++ {
		ctx, err = t.context(v) // offline: another vCPU's tables
	}
	if err != nil {
		return Translation{}, err
	}
	key := tlbKey{ctx.CR(3), va &^ 0xfff}
	if tr, ok := t.tlb[key]; ok {
		return tr, nil
	}
	tr, err := Translate(physMem{t}, PagingOf(ctx.CR(4), t.width), ctx.CR(3), ctx.CR(4), key.page)
	if err != nil {
		return Translation{}, err
	}
	t.tlb[key] = tr
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
	if write {
		t.loose[fn] = true // kept past the next Resume only if a breakpoint byte goes in
	}
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

// GetRegs reads a vCPU's registers; memory is read through its page
// tables from now on (translate).
func (t *Target) GetRegs(tid int, r *engine.Regs) error {
	v, err := t.vcpu(tid)
	if err != nil {
		return err
	}
	ctx, err := t.context(v)
	if err != nil {
		return err
	}
	t.cur = v
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
	t.dirty[v] = true // written before the vCPU runs again
	return nil
}

// Wait blocks until a vCPU stops on a breakpoint or a step, Kick is
// called, or the domain goes. Debug traps (debug-register breakpoints,
// steps) and deaths are events; the stops of int3 bytes are found by a
// state check every Poll, the only polling left (see Options).
func (t *Target) Wait() (engine.Event, error) {
	for {
		if len(t.queue) > 0 {
			ev := t.queue[0]
			t.queue = t.queue[1:]
			if ev.Kind == engine.EvTrap {
				t.cur = ev.Tid - 1
			}
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
		virq, watch := t.ev.live()
		every := idleCheck
		if len(t.bps) > 0 || !virq {
			every = t.opts.Poll
		} else if !watch {
			every = 250 * time.Millisecond
		}
		fired := t.ev.wait(every)
		t.mu.Lock()
		kicked := t.kicked
		t.mu.Unlock()
		// one hypercall: the domain's state, and after an event every
		// vCPU's context as well when this is the process's only
		// target (the event is then most likely a debug trap of ours,
		// which paused the domain: nothing to pause again). With
		// several, the event may be another domain's: reading the
		// contexts would stop this one's vCPUs for nothing, so they are
		// read once it is found paused (stopPaused)
		info, err := t.look(fired && !kicked && t.ev.alone())
		if !fired {
			// the check and an event may cross: the event's count
			fired = t.ev.pending()
		}
		if err != nil || info.Dying() {
			t.dead = true
			how := "the domain was destroyed"
			if err == nil {
				how = "the domain shut down"
			}
			if fired {
				how += " (woken by an event)"
			}
			// its frames, the event subscription, the journal: freed now
			t.release(false)
			return engine.Event{Kind: engine.EvSpaceExit, Tid: 1, Exit: how}, nil
		}
		if !fired && !kicked {
			t.stats.checks++
		}
		if !kicked && !info.Paused() {
			clear(t.ctxOK) // read while it ran: of no use
			t.waited = false
			// an int3 event read in the same multicall as a state that
			// still ran: the trap came between the two reads, and has
			// paused the domain since. Xen cleared the event as it told
			// it: dropped, the stop would be no one's and the domain
			// would stay paused (seen once in TestXenNative's int3 phase)
			t.keepInt3 = len(t.int3) > 0
			continue
		}
		if !fired && !kicked && !t.waited && virq && len(t.bps) == 0 && !t.noStatus && !t.more {
			// paused, no int3 event, no int3 byte of ours: a debug
			// trap's pause, whose VIRQ_DEBUGGER this check crossed and
			// which comes in a moment (or someone's xl pause); once
			// more, and a domain still paused without an event is taken
			// all the same
			t.waited = true
			continue
		}
		t.waited = false
		n := len(t.queue)
		if kicked {
			err = t.stopAll()
		} else {
			err = t.stopPaused()
		}
		if err != nil {
			return engine.Event{}, err
		}
		if fired {
			t.stats.byEvent += len(t.queue) - n
		} else if !kicked {
			t.stats.byCheck += len(t.queue) - n
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
// A stop the engine asks for (a kick, StopThread, the detach); the
// domain's own stops are stopPaused's.
func (t *Target) stopAll() error {
	if err := t.commit(false); err != nil { // what the engine changed
		trace("flush: %v", err)
	}
	if err := t.hv.Pause(t.dom); err != nil {
		return err
	}
	t.pauses++
	t.mu.Lock()
	t.run = false
	t.mu.Unlock()
	// what look read stays: the int3 events it took (cleared in Xen),
	// why the vCPUs of queued stops stopped
	clear(t.ctxOK)
	clear(t.tlb)
	t.more = !t.noStatus // which vCPUs stopped on an int3: gdbsx_domstatus
	if err := t.readStopped(); err != nil {
		return err
	}
	t.classify()
	return nil
}

// stopPaused takes the stops of a domain found paused (by its debug
// traps, as a rule) without pausing it again: each trap paused it, and
// each getvcpucontext waits until its vCPU is off the CPU, after which
// the domain's pause keeps it off. A domain paused by someone else
// (xl pause) with no stop of ours is left alone and waited on.
func (t *Target) stopPaused() error {
	if err := t.readStopped(); err != nil {
		return err
	}
	n, p := len(t.queue), t.pauses
	t.classify()
	if len(t.queue) == n && t.pauses == p {
		clear(t.ctxOK) // not stopped by us: it may run at any time
		clear(t.tlb)
		return nil
	}
	t.mu.Lock()
	t.run = false
	t.mu.Unlock()
	return nil
}

// classify queues a trap event for each vCPU on a breakpoint or at the
// end of a step, from the contexts and int3 events read; each such stop
// paused the domain, a pause to undo when it runs again.
func (t *Target) classify() {
	n := len(t.queue)
	queued := map[int]bool{}
	for _, ev := range t.queue {
		if ev.Kind == engine.EvTrap {
			queued[ev.Tid-1] = true
		}
	}
	for v := 0; v < t.vcpus; v++ {
		// an int3 event is taken once: a detach's look after a stop
		// already handled must not see it again
		int3 := t.int3[v]
		delete(t.int3, v)
		if queued[v] {
			continue // its stop is in the queue already (a detach's look)
		}
		ctx, err := t.context(v)
		if err != nil {
			continue // offline vCPU
		}
		rip, dr6 := ctx.RIP(), ctx.DebugReg(6)
		dr6 = t.takeWatchBits(v, ctx, dr6)
		byteHit := t.bps[rip-1] || t.gone[rip-1]
		switch {
		case t.step[v]:
			delete(t.step, v)
			ctx.SetRFLAGS(ctx.RFLAGS() &^ flagTF)
			ctx.SetDebugReg(6, dr6&^(dr6Step|dr6Hits))
			t.dirty[v] = true
			for o := 0; o < t.vcpus; o++ {
				if o != v { // held for the step: let go with the domain
					t.vcpuOps = append(t.vcpuOps, domCall(domctlGdbsxUnpauseVCPU, t.dom, o))
				}
			}
			t.why[v] = stopStep
		case dr6&dr6Hits != 0 && t.onDR(ctx, rip, dr6):
			ctx.SetDebugReg(6, dr6&^dr6Hits)
			t.dirty[v] = true
			t.why[v] = stopDR
		case byteHit && (int3 || t.noStatus || t.opts.Breakpoints == BreakInt1):
			t.why[v] = stopByte
		case int3:
			// the guest kernel's own int3 (text_poke_bp patching code, a
			// kprobe of its own), which Xen kept from the guest and paused
			// the domain for. Back to the int3: it runs again when we let
			// go, and stops again until the kernel has patched it out.
			ctx.SetRIP(rip - 1)
			t.dirty[v] = true
			t.pauses++
			t.stats.foreign++
			trace("vCPU %d: the guest's own int3 at %#x", v, rip-1)
			continue
		case t.wfired[v] != 0:
			t.why[v] = stopWatch
		default:
			continue
		}
		t.pauses++ // the debug trap's own pause
		t.stats.stops++
		t.queue = append(t.queue, engine.Event{Kind: engine.EvTrap, Tid: v + 1})
	}
	if len(t.queue)-n > 1 {
		t.stats.together++
	}
}

// onDR says whether a vCPU stopped on one of our debug-register
// breakpoints: a B<i> bit of %dr6 for a register holding rip.
func (t *Target) onDR(ctx *Context, rip, dr6 uint64) bool {
	if !t.drGone[rip] && !t.drIn(rip) {
		return false
	}
	for i := 0; i < 4; i++ {
		if dr6&(1<<i) != 0 && ctx.DebugReg(i) == rip {
			return true
		}
	}
	return false
}

func (t *Target) drIn(addr uint64) bool {
	for _, a := range t.dr {
		if a == addr {
			return true
		}
	}
	return false
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

// Step runs one instruction of a vCPU with the others held. The step's
// #DB raises VIRQ_DEBUGGER.
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
	t.dirty[v] = true
	t.step[v] = true
	return t.resumeAll()
}

// Resume lets the domain run once every queued stop has been handled.
func (t *Target) Resume(tid, sig int) error {
	if len(t.queue) > 0 {
		return nil // another vCPU's stop is still to handle
	}
	t.dropWritable()
	return t.resumeAll()
}

// resumeAll lets the domain run: the changed contexts written, the
// vCPUs held for a step let go and every pause undone in one hypercall.
func (t *Target) resumeAll() error {
	if err := t.readStopped(); err != nil { // the contexts syncDR compares (read at a stop already)
		return err
	}
	for v := 0; v < t.vcpus; v++ {
		t.syncDR(v)
	}
	clear(t.int3) // the stops they told of are handled
	t.mu.Lock()
	t.run = true
	t.mu.Unlock()
	return t.commit(true)
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
	t.release(sig == engine.SigStop) // stay paused, in debugging mode
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

func (t *Target) ThreadIndex(tid int) int { return tid - 1 }

func (t *Target) IsStopped(tid int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.run
}

// InsertBreakpoint takes a free debug register (modes auto and dr) or
// writes an int3/int1 byte. Debug registers reach every vCPU when the
// domain runs next.
func (t *Target) InsertBreakpoint(space int, addr uint64, orig []byte) error {
	mode := t.opts.Breakpoints
	if mode == BreakAuto || mode == BreakDR {
		for i, a := range t.dr {
			if a == 0 && t.wdr[i] == nil {
				t.dr[i] = addr
				if err := t.writeJournal(); err != nil {
					t.dr[i] = 0
					return err
				}
				delete(t.drGone, addr)
				return nil
			}
		}
		if mode == BreakDR {
			return fmt.Errorf("%#x: the four debug registers hold probes and watches already (breakpoints = dr%s)", addr, t.drHint())
		}
	}
	op := byte(opInt3)
	if mode == BreakInt1 {
		op = opInt1
	}
	if len(orig) == 0 {
		return fmt.Errorf("no original byte for %#x", addr)
	}
	// journaled first: a gprobes that dies between the two leaves a
	// journal whose byte is not in, which recovery skips
	t.bps[addr], t.orig[addr] = true, orig[0]
	if err := t.writeJournal(); err != nil {
		delete(t.bps, addr)
		return err
	}
	if err := t.WriteMem(0, addr, []byte{op}); err != nil {
		delete(t.bps, addr)
		t.writeJournal()
		return err
	}
	if tr, err := t.translate(addr); err == nil { // the write just used it
		fn := tr.Phys >> 12
		t.unframe(addr) // counted once, should it be in already
		t.bpFrame[addr] = fn
		t.bpsIn[fn]++
	}
	delete(t.gone, addr)
	return nil
}

// dropWritable unmaps, before the domain runs on, the writable mappings
// of frames that hold none of gprobes' breakpoint bytes. On a PV domain a
// frame dom0 maps writable cannot become a page table or a descriptor
// table of the guest: Xen refuses the type change, the guest's pin
// (mmuext_op) fails with EINVAL and the guest process it was for dies. A
// kernel module's text freed by rmmod, a page a probe wrote, is soon
// reused as one. A breakpoint taken out for a step in place keeps its
// frame's mapping (Step does not come here); one taken out for good, or
// forgotten with the module, loses it at the next Resume. Only the frames
// that changed since the last Resume are looked at (loose): a hit costs a
// lookup or two, whatever the number of probes.
func (t *Target) dropWritable() {
	for fn := range t.loose {
		if b, ok := t.wframes[fn]; ok && t.bpsIn[fn] == 0 {
			UnmapFrame(b)
			delete(t.wframes, fn)
		}
	}
	clear(t.loose)
}

// unframe drops addr's breakpoint byte from its frame's count; a frame
// left with none is looked at by the next dropWritable.
func (t *Target) unframe(addr uint64) {
	fn, ok := t.bpFrame[addr]
	if !ok {
		return
	}
	delete(t.bpFrame, addr)
	if t.bpsIn[fn]--; t.bpsIn[fn] <= 0 {
		delete(t.bpsIn, fn)
		t.loose[fn] = true
	}
}

func (t *Target) RemoveBreakpoint(space int, addr uint64, orig []byte) error {
	for i, a := range t.dr {
		if a == addr {
			t.dr[i] = 0
			t.drGone[addr] = true
			return t.writeJournal()
		}
	}
	if len(orig) == 0 {
		return fmt.Errorf("no original byte for %#x", addr)
	}
	if err := t.WriteMem(0, addr, orig[:1]); err != nil {
		return err
	}
	delete(t.bps, addr)
	t.unframe(addr)
	delete(t.orig, addr)
	t.gone[addr] = true
	return t.writeJournal()
}

// TrapPC: a vCPU stops past an int3/int1 byte (a trap), on a debug
// register's address (a fault).
func (t *Target) TrapPC(tid int, rip uint64) uint64 {
	if v, err := t.vcpu(tid); err == nil && (t.why[v] == stopDR || t.why[v] == stopWatch) {
		return rip
	}
	return rip - 1
}

// OS: a Linux guest kernel (linuxkernel.Guest).
func (t *Target) OS() engine.OS { return t.os }
