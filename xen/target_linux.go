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
	// warn tells the user what failed with no command to fail (the
	// engine's Options.Warn, through SetWarn): a pause not undone
	warn     func(string)
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
				t.warnf("detach from domain %d: %v", t.dom, err)
			}
		}
	}
	if !t.dead && !keepPaused {
		if err := t.commit(true); err != nil {
			t.warnf("detach from domain %d: %v", t.dom, err)
		}
		for ; t.pauses > 0; t.pauses-- { // what the batch could not undo
			if err := t.hv.Unpause(t.dom); err != nil {
				t.warnf("domain %d may stay paused (xl unpause %d): %v", t.dom, t.dom, err)
			}
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
			if err := t.hv.Unpause(t.dom); err != nil {
				t.warnf("domain %d may keep a pause of gprobes' besides the debugger's: %v", t.dom, err)
			}
		}
	}
	t.closeHVM()
	if !t.dead && t.debugging {
		// kept paused for a debugger (exit 4), the domain leaves
		// debugging mode all the same: gdbsx turns it on when it
		// attaches, and an `xl unpause` without a debugger must not
		// leave the guest's own int3s pausing it
		if err := t.hv.SetDebugging(t.dom, false); err != nil {
			t.warnf("domain %d stays in debugging mode (its own int3s pause it): %v", t.dom, err)
		}
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

var _ engine.Warner = (*Target)(nil)

// SetWarn is engine.Warner's.
func (t *Target) SetWarn(f func(string)) { t.warn = f }

// warnf says a failure through warn (and the trace).
func (t *Target) warnf(format string, a ...any) {
	trace(format, a...)
	if t.warn != nil {
		t.warn(fmt.Sprintf(format, a...))
	}
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
