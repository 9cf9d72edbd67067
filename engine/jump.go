package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gprobes/gprobes/internal/shm"
	"github.com/gprobes/gprobes/internal/tsc"
	"github.com/gprobes/gprobes/jit"
	"github.com/gprobes/gprobes/pad"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/x86"
	"golang.org/x/sys/unix"
)

// Jump pads (docs/engine.md, "Jump pads: probes that run inside the
// process"): on a process, a probe
// whose instructions a 5-byte jump may cover runs in the thread that hits
// it, in a pad gprobes writes into the process, with no trap. The engine
// keeps everything else: it places pads (threads stopped), turns a fault
// in a pad into what the program would have seen, holds signals that
// arrive while a thread is inside one, and drains the records the pads
// commit into their region's ring. Any probe it cannot put on a jump
// stays on the int3 route, and query says why.

// Route values of Options.Route.
const (
	RouteAuto = ""     // jump pads where safe, int3 elsewhere
	RouteInt3 = "int3" // int3 everywhere
)

// region is a data region (pad package): one per process image, shared
// by a fork child with its parent.
type region struct {
	mem      *shm.Mem
	ring     *pad.Ring
	ringSize int
	addr     uint64    // in the process
	gv       uint64    // the global variables' mapping in the process
	sw       uint64    // the switch memory's mapping in the process (switch.go), 0: none
	sites    []siteRef // by site number: whose counters and records
	// published: a copy of sites for the drain, replaced (never changed)
	// after every change of sites, under e.js.mu
	published atomic.Pointer[[]siteRef]
	lvNext    int // next free word of the region's lv area
	lvAt      map[*Module]int
	lvFree    []int // offsets of modules' lv areas given back
	refs      int   // spaces using it
	// tcbOff is where its threads keep their id (pad.OffTCBTid), as
	// checked when the region was made; odd are the threads that do not
	// (a vfork child shares its parent's thread control block): while
	// there is one, the pads ask the kernel
	tcbOff uint64
	odd    map[int]bool
	// ns: the process runs in a pid namespace of its own; nsRoot maps
	// the thread ids its pads see (its records carry) to gprobes' (under
	// e.js.mu)
	ns     bool
	nsRoot map[int]int
	// live: the tracer's liveness word in the process (JumpHost.LiveWord)
	live uint64
}

type siteRef struct {
	p    *eprobe
	addr uint64
}

// jumpSite is a probe address covered by a jump.
type jumpSite struct {
	addr   uint64
	plan   x86.JumpPlan
	orig   []byte // the covered bytes as they were
	pad    *builtPad
	probes []*eprobe
	// retFn: a return probe's pad at a ret of the function that starts
	// there (retjump.go), the ret at ret; 0 for an offset probe's
	retFn, ret uint64
}

// recAddr is the address the records of the site's probes carry: the
// probe address, or a return probe's function (as on the int3 route).
func (s *jumpSite) recAddr() uint64 {
	if s.retFn != 0 {
		return s.retFn
	}
	return s.addr
}

// builtPad is a pad written into a space. A pad no jump leads to any more
// is retired, and used again only once no thread can be inside it (a
// thread may be inside one long after its probe went: a removal under
// load, a signal handler that interrupted it).
type builtPad struct {
	at, end uint64
	p       *pad.Pad
	site    *jumpSite
	// retired: no jump leads to it any more; its bytes are used again
	// once no thread can be inside (areas.go)
	retired bool
	// the region's site numbers and modules' variables its code uses:
	// free for others once no pad using them can run
	sites []int
	mods  []*Module
}

// jumpState is a space's jump books.
type jumpState struct {
	rg    *region
	sites map[uint64]*jumpSite
	pads  []*builtPad // sorted by at
	areas []*xolArea
	held  []uint64 // the held byte of each area
	// pool: the pads' stacks (pad.PoolSize bytes), 0 until mapped
	pool uint64
	// no says why this space cannot have pads ("" until tried)
	no string
	// holding counts threads with a signal held until they leave a pad
	holding map[int]bool
	// int3Only: addresses where a probe that cannot run in a pad moved
	// the others to an int3, and why
	int3Only map[uint64]string
}

// jumpShared is what the drain goroutine shares with the loop: the
// regions, their site tables and the records' thread table, under mu.
type jumpShared struct {
	mu sync.Mutex
	// moveMu: the mover's, held with mu to add or remove a region
	moveMu  sync.Mutex
	regions map[*region]bool
	threads map[int][2]int // tid -> pid, index: records name them
	stop    chan struct{}
	done    chan struct{}
	started bool
	// lostGone: records dropped by the rings of regions released since
	lostGone uint64
	q        drainQueue
	batch    []*Record  // the committer's
	rec      pad.Record // the committer's
	// exited threads the rings' records may still name
	exited  map[int]exitedThread
	exitSeq uint64
}

type exitedThread struct {
	pid, index int
	seq        uint64
}

// keepExited is how many exited threads the records' table remembers.
const keepExited = 4096

func (e *Engine) jumpSpace(sp *space) *jumpState {
	if sp.jump == nil {
		sp.jump = &jumpState{sites: map[uint64]*jumpSite{}, holding: map[int]bool{}, int3Only: map[uint64]string{}}
	}
	return sp.jump
}

// padAt returns the pad containing pc in a space, or nil.
func (sp *space) padAt(pc uint64) *builtPad {
	if sp.jump == nil {
		return nil
	}
	ps := sp.jump.pads
	i := sort.Search(len(ps), func(i int) bool { return ps[i].end > pc })
	if i < len(ps) && ps[i].at <= pc {
		return ps[i]
	}
	return nil
}

// tryJump puts probe p at addr on the jump route. It returns "" when the
// probe is in, else why not (the probe then goes on the int3 route).
func (e *Engine) tryJump(sp *space, inst *instance, p *eprobe, addr uint64) string {
	if e.opts.Route == RouteInt3 {
		return "--route int3"
	}
	host, ok := e.ab.jump, e.ab.jump != nil
	if !ok || e.os.Kernel() {
		return "the target takes no jump pads"
	}
	js := e.jumpSpace(sp)
	if js.no != "" {
		return js.no
	}
	if why := js.int3Only[addr]; why != "" {
		return why
	}
	if len(sp.bps) > 0 {
		if bp := sp.bps[addr]; bp != nil {
			return "an int3 probe is at this address already"
		}
	}
	// what the jump covers, from the function's original code
	set := inst.ld.Symbols
	if set == nil {
		return "no symbols to find the function's bounds"
	}
	if isGo(set) {
		// goroutine stacks start at 8 KiB and the runtime moves them:
		// no room below rsp for a pad's state (about 2.5 KiB)
		return "Go code: goroutine stacks are too small for a pad's state"
	}
	link := addr - inst.bias
	fn, ok := set.SymbolAt(link)
	if !ok || fn.Size == 0 || fn.Size > 1<<20 {
		return "no function symbol with a size covers the address"
	}
	start := fn.Addr + inst.bias
	code := make([]byte, fn.Size)
	if err := e.readOriginal(sp, start, code); err != nil {
		return fmt.Sprintf("read %s: %v", fn.Name, err)
	}
	plan := x86.PlanJump(code, start, addr, 64)
	if !plan.OK() || x86.IsRet(plan.Covered[len(plan.Covered)-1].Bytes) {
		// a short function (`ret`, `xor %eax,%eax; ret`): its ret and
		// the alignment fill after it (retjump.go)
		if fp := x86.PlanJumpFill(code, start, addr, e.fillAfter(sp, inst, fn.Addr, start+fn.Size), 64); fp.OK() {
			plan = fp
		} else if plan.OK() {
			plan.Reason = fp.Reason
		}
	}
	if !plan.OK() {
		return plan.Reason
	}
	// nothing else in the file may enter the covered bytes past their
	// first: another function's jump (a .cold part, a shared tail), a
	// symbol, a landing pad, a jump table
	if inst.ld.Entries == nil {
		return "what else enters the function is unknown"
	}
	ents, err := inst.ld.Entries()
	if err != nil {
		return fmt.Sprintf("what else enters the function is unknown: %v", err)
	}
	if lo, hi := x86.CoveredRange(plan, addr); lo < hi {
		if en, ok := ents.Inside(lo-inst.bias, hi-inst.bias); ok {
			return en.Describe(inst.bias, func(a uint64) string {
				if s, off, ok := set.Nearest(a); ok {
					if off == 0 {
						return s.Name
					}
					return fmt.Sprintf("%s+%#x", s.Name, off)
				}
				return ""
			})
		}
	}
	for i := range plan.Covered {
		in := &plan.Covered[i]
		if in.Class == x86.Branch && len(in.Bytes) > 0 && in.Bytes[0] == 0xe8 && host.ShadowStack(sp.id) {
			// a relocated call pushes the return address itself: the
			// callee's ret would not find it on the shadow stack
			return "a call among the covered instructions, in a process with shadow stacks"
		}
		if i == len(plan.Covered)-1 && (in.Class == x86.Branch || x86.IsRet(in.Bytes)) {
			break // relocated, and emulated for a thread leaving with a signal held
		}
		r, err := x86.RelocateForPad(in, addr)
		if err != nil {
			return err.Error()
		}
		if r.Exits {
			return fmt.Sprintf("`%s` ends the covered bytes with a return or an indirect jump", in.String())
		}
	}
	_, hi := x86.CoveredRange(plan, addr)
	for a := range sp.bps {
		if a >= addr && a < hi {
			return fmt.Sprintf("another breakpoint (%#x) is inside the covered bytes", a)
		}
	}
	for a, s := range js.sites {
		if a < hi && a+uint64(s.plan.Len) > addr {
			return fmt.Sprintf("the jump of the probe at %#x overlaps", a)
		}
	}
	site := &jumpSite{addr: addr, plan: plan}
	site.orig = make([]byte, plan.Len)
	for _, in := range plan.Covered {
		copy(site.orig[in.Addr-addr:], in.Bytes)
	}
	if last := plan.Covered[len(plan.Covered)-1]; last.Addr+uint64(last.Len) < addr+uint64(plan.Len) {
		// the fill after a ret is covered too
		if err := e.readOriginal(sp, addr, site.orig); err != nil {
			return fmt.Sprintf("read the covered bytes: %v", err)
		}
	}
	return e.placeJump(sp, host, site, []*eprobe{p})
}

// placeJump builds the pad of a new jump site with its probes and writes
// the jump (every thread stopped, none inside the covered bytes or able to
// return into them): "" when it is in, else why not. site.orig holds the
// covered bytes as they are.
func (e *Engine) placeJump(sp *space, host JumpHost, site *jumpSite, probes []*eprobe) string {
	js := sp.jump
	addr, plan := site.addr, site.plan
	rg, why := e.ensureRegion(sp, host)
	if why != "" {
		return why
	}
	if why := e.buildPad(sp, host, rg, site, probes); why != "" {
		return why
	}
	placed := false
	defer func() {
		if !placed {
			e.retirePad(sp, site.pad) // never reached by a jump
		}
	}()
	// every thread stopped; none inside the covered bytes (a thread
	// there is let run on a moment, a few times, before giving up)
	var stopped []int
	for try := 0; ; try++ {
		var err error
		stopped, err = e.stopAll(sp.id)
		if err != nil {
			e.resumeStopped(stopped)
			return fmt.Sprintf("stop the threads: %v", err)
		}
		inside := ""
		if lo, hi := x86.CoveredRange(plan, addr); lo < hi {
			inside = e.mayReturnInto(sp, host, [][2]uint64{{lo, hi}}, "the covered bytes", true)
		}
		if inside == "" {
			break
		}
		if try == 10 || len(stopped) == 0 {
			e.resumeStopped(stopped)
			return inside
		}
		e.resumeStopped(stopped)
		time.Sleep(50 * time.Microsecond)
	}
	defer e.resumeStopped(stopped)
	if why := e.plantJumpWhy(sp, site); why != "" {
		return why
	}
	js.sites[addr] = site
	placed = true
	return ""
}

// retirePad: no jump leads to the pad any more. Its bytes go back to its
// area, to be used again once no thread can be inside (reclaim).
func (e *Engine) retirePad(sp *space, bp *builtPad) {
	if bp == nil || bp.retired || sp.jump == nil {
		return
	}
	bp.retired = true
	for _, a := range sp.jump.areas {
		if a.holds(bp.at) {
			a.retire(bp.at, (bp.end-bp.at+15)&^15)
			return
		}
	}
}

// buildPad compiles the probes of a site, builds their pad and writes it;
// site.pad is the new pad. The jump is the caller's to write.
func (e *Engine) buildPad(sp *space, host JumpHost, rg *region, site *jumpSite, probes []*eprobe) string {
	js := sp.jump
	var pps []pad.Probe
	var sites []int
	var mods []*Module
	for _, p := range probes {
		inst := sp.inst[p.src]
		if inst == nil {
			return "the probe's module is not in this space"
		}
		if p.def().LogOnFault {
			return "logonfault = yes: the record of a faulting step is the int3 route's"
		}
		if p.def().AutoStack {
			return "autostacktrace = yes: an exception record's stack is unwound on the int3 route"
		}
		if int(p.src.LogMax) > pad.MaxLog {
			return fmt.Sprintf("logmax %d is more than a ring slot holds (%d)", p.src.LogMax, pad.MaxLog)
		}
		n := e.siteFor(rg, p, site.recAddr())
		if n < 0 && e.reclaim(sp) > 0 {
			n = e.siteFor(rg, p, site.recAddr())
		}
		if n < 0 {
			return fmt.Sprintf("the region serves %d probes at most", pad.MaxProbes)
		}
		sites = append(sites, n)
		lv, why := e.lvFor(rg, p.mod)
		if why != "" && e.reclaim(sp) > 0 {
			lv, why = e.lvFor(rg, p.mod)
		}
		if why != "" {
			return why
		}
		mods = append(mods, p.mod)
		sw, why := e.padSwitches(rg, p.mod)
		if why != "" {
			return why
		}
		code, err := jit.Compile(inst.prog, p.Index, jit.Layout{
			LV: lv, GV: rg.gv, Switch: sw, Probe: rg.addr + pad.OffCounters + uint64(n)*64,
			Clock: rg.addr + pad.OffClock, Threads: rg.addr + pad.OffThreads,
			FSGSBase: host.FSGSBase(sp.id), PidNS: rg.ns, NoTSC: rg.addr + pad.OffNoTSC,
		})
		if err != nil {
			var u *jit.Unsupported
			if errors.As(err, &u) {
				return u.Reason
			}
			return err.Error()
		}
		pps = append(pps, pad.Probe{Code: code, Site: uint32(n), LogMax: int(p.src.LogMax)})
	}
	pool, why := e.padStacks(sp, host)
	if why != "" {
		return why
	}
	// build once to learn the size, then at its address
	trial, err := pad.Build(pad.Spec{At: site.addr, Addr: site.addr, Covered: site.plan.Covered, Probes: pps, Region: rg.addr, RingSize: rg.ringSize, Held: site.addr, Pool: pool, Live: rg.live, Return: site.retFn != 0})
	if err != nil {
		return err.Error()
	}
	held, at, err := e.padSpace(sp, host, site.addr, uint64(len(trial.Code)))
	if err != nil {
		return fmt.Sprintf("map the pad's area: %v", err)
	}
	built, err := pad.Build(pad.Spec{At: at, Addr: site.addr, Covered: site.plan.Covered, Probes: pps, Region: rg.addr, RingSize: rg.ringSize, Held: held, Pool: pool, Live: rg.live, Return: site.retFn != 0})
	if err != nil {
		return err.Error()
	}
	if err := e.tgt.WriteMem(sp.id, at, built.Code); err != nil {
		return fmt.Sprintf("write the pad: %v", err)
	}
	bpad := &builtPad{at: at, end: at + uint64(len(built.Code)), p: built, site: site, sites: sites, mods: mods}
	js.pads = append(js.pads, bpad)
	sort.Slice(js.pads, func(i, j int) bool { return js.pads[i].at < js.pads[j].at })
	site.pad = bpad
	site.probes = append([]*eprobe{}, probes...)
	return ""
}

// padStacks maps the space's pad stacks the first time a pad is built
// (pad.PoolSize bytes of private memory: a fork child has a copy of its
// own, an exec'd image new ones).
func (e *Engine) padStacks(sp *space, host JumpHost) (uint64, string) {
	js := sp.jump
	if js.pool != 0 {
		return js.pool, ""
	}
	err := e.withStoppedThread(sp.id, func(tid int) error {
		var err error
		js.pool, err = host.MapStacks(sp.id, tid, pad.PoolSize)
		return err
	})
	if err != nil {
		js.pool = 0
		return 0, fmt.Sprintf("map the pads' stacks: %v", err)
	}
	return js.pool, ""
}

// freePadStack frees the pad stack a thread at rsp r holds (it leaves its
// pad without the pad's help: a fault in its covered instructions), if
// one is its. The owner words are read and written through the target.
func (e *Engine) freePadStack(sp *space, r uint64) {
	pool := sp.jump.pool
	if pool == 0 {
		return
	}
	first, end := pad.SlotOf(pool, r)
	var w [8]byte
	for i, a := 0, first; i < pad.PoolSlots; i, a = i+1, a+pad.SlotStride {
		if a >= end {
			a = pad.FirstSlot(pool)
		}
		if e.tgt.ReadMem(sp.id, a, w[:]) != nil {
			return
		}
		if binary.LittleEndian.Uint64(w[:]) == r {
			e.fail(e.tgt.WriteMem(sp.id, a, make([]byte, 8)), "free the pad stack of a thread at %#x", r)
			return
		}
	}
}

// padSpace finds room for a pad of size bytes within reach of addr: in
// an area (pads given back and proven unused first, reclaim), else in a
// new one. Each area starts with its held byte.
func (e *Engine) padSpace(sp *space, host JumpHost, addr, size uint64) (held, at uint64, err error) {
	js := sp.jump
	size = (size + 15) &^ 15
	for try := 0; try < 2; try++ {
		for i, a := range js.areas {
			if nearArea(a.base, a.size, addr) {
				if at, ok := a.take(size); ok {
					return js.held[i], at, nil
				}
			}
		}
		if try == 0 && e.reclaim(sp) == 0 {
			break
		}
	}
	const areaSize = 256 << 10
	if size > areaSize-64 {
		return 0, 0, fmt.Errorf("a pad of %d bytes", size)
	}
	var base uint64
	err = e.withStoppedThread(sp.id, func(tid int) error {
		var err error
		if base, err = host.AllocXOL(sp.id, tid, addr, areaSize); err != nil {
			return err
		}
		if !nearArea(base, areaSize, addr) {
			// of no use to pads: not kept
			if err := host.Unmap(sp.id, tid, base, areaSize); err != nil {
				e.warn(fmt.Sprintf("process %d: unmap an area mapped out of reach: %v", sp.id, err))
			}
			return fmt.Errorf("no room within ±2 GiB of %#x", addr)
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	if err := host.JournalHeld(sp.id, base); err != nil {
		return 0, 0, err
	}
	a := &xolArea{base: base, size: areaSize, used: 64 + size}
	js.areas = append(js.areas, a)
	js.held = append(js.held, base)
	return base, base + 64, nil
}

// ensureRegion maps the space's data region, and the global variables,
// into the process.
func (e *Engine) ensureRegion(sp *space, host JumpHost) (*region, string) {
	js := sp.jump
	if js.rg != nil {
		return js.rg, ""
	}
	gvm := e.gvShm
	if gvm == nil {
		js.no = "the global variables are not in shared memory"
		return nil, js.no
	}
	ringSize := e.opts.RingSize
	if ringSize == 0 {
		ringSize = pad.DefaultRingSize
	}
	mem, err := shm.Create(fmt.Sprintf("gprobes-pads-%d", sp.id), pad.RegionSize(ringSize))
	if err != nil {
		js.no = err.Error()
		return nil, js.no
	}
	pad.InitRegion(mem.Bytes, ringSize)
	var addr, gv, sw, tcbOff, live uint64
	var ns bool
	err = e.withStoppedThread(sp.id, func(tid int) error {
		var err error
		if addr, err = host.MapShared(sp.id, tid, mem.FD, uint64(len(mem.Bytes))); err != nil {
			return err
		}
		tcbOff = host.TIDOffset(sp.id, tid)
		nsTid, _ := host.NSIDs(tid)
		ns = nsTid != tid
		if live, err = host.LiveWord(sp.id, tid); err != nil {
			return fmt.Errorf("the tracer's liveness word: %w", err)
		}
		binary.LittleEndian.PutUint64(mem.Bytes[pad.OffTCBTid:], tcbOff)
		if gv, err = host.MapShared(sp.id, tid, gvm.FD, uint64(len(gvm.Bytes))); err != nil {
			return err
		}
		sw, err = e.mapSwitches(host, sp.id, tid)
		return err
	})
	if err != nil {
		mem.Close()
		js.no = err.Error()
		return nil, js.no
	}
	rg := &region{mem: mem, ring: pad.NewRing(mem.Bytes), ringSize: ringSize, addr: addr, gv: gv, sw: sw, lvAt: map[*Module]int{}, refs: 1,
		tcbOff: tcbOff, odd: map[int]bool{}, ns: ns, nsRoot: map[int]int{}, live: live}
	if clk, ok := e.clock(); ok {
		// push ts converts with the calibration of the moment (a skew of
		// some parts in 100,000 as the process runs); the records' times
		// with the clock's, refined as it goes
		cal := clk.Cal()
		binary.LittleEndian.PutUint64(mem.Bytes[pad.OffClock:], cal.TSC0)
		binary.LittleEndian.PutUint64(mem.Bytes[pad.OffClock+8:], cal.NS0)
		binary.LittleEndian.PutUint64(mem.Bytes[pad.OffClock+16:], cal.Mult)
		binary.LittleEndian.PutUint64(mem.Bytes[pad.OffClock+24:], cal.Shift)
	}
	js.rg = rg
	e.js.mu.Lock()
	e.js.moveMu.Lock()
	e.js.regions[rg] = true
	e.js.moveMu.Unlock()
	for _, tid := range e.tgt.Threads(sp.id) {
		e.noteThread(tid, sp.id)
	}
	e.js.mu.Unlock()
	e.startDrain()
	return rg, ""
}

var (
	clockOnce sync.Once
	clockVal  *tsc.Clock
	clockOK   bool
)

// clock is the time stamp counter's clock, calibrated once per gprobes
// process (20 ms, the first time a region is made) and refined by the
// drain.
func (e *Engine) clock() (*tsc.Clock, bool) {
	clockOnce.Do(func() { clockVal, clockOK = tsc.NewClock(20 * time.Millisecond) })
	return clockVal, clockOK
}

// publish gives the drain a copy of the region's sites: the mover takes
// the copy of the moment with the records it moves, so that a chunk's
// records are made with the sites they were committed under, whatever
// changes later. Called with e.js.mu held.
func (rg *region) publish() {
	c := append([]siteRef(nil), rg.sites...)
	rg.published.Store(&c)
}

// siteFor gives probe p at addr its counters (site number) in a region.
func (e *Engine) siteFor(rg *region, p *eprobe, addr uint64) int {
	e.js.mu.Lock()
	defer e.js.mu.Unlock()
	free := -1
	for i, s := range rg.sites {
		if s.p == p && s.addr == addr {
			return i
		}
		if s.p == nil && free < 0 {
			free = i
		}
	}
	if free >= 0 {
		rg.sites[free] = siteRef{p: p, addr: addr}
		rg.publish()
		return free
	}
	if len(rg.sites) >= pad.MaxProbes {
		return -1
	}
	rg.sites = append(rg.sites, siteRef{p: p, addr: addr})
	rg.publish()
	return len(rg.sites) - 1
}

// lvFor places a module's local variables in a region: the module's lv
// becomes that memory, shared by its pads and its int3 hits.
func (e *Engine) lvFor(rg *region, m *Module) (uint64, string) {
	if off, ok := rg.lvAt[m]; ok {
		return rg.addr + uint64(off), ""
	}
	// room for every variable a module may have: a build merged in
	// later with more grows its lv in place
	var off int
	if k := len(rg.lvFree); k > 0 {
		off, rg.lvFree = rg.lvFree[k-1], rg.lvFree[:k-1]
	} else {
		if rg.lvNext+rpn.MaxVars > pad.LVWords {
			return 0, "the region's local variables are full"
		}
		off = pad.OffLV + rg.lvNext*8
		rg.lvNext += rpn.MaxVars
	}
	words := rg.mem.Words(off, rpn.MaxVars)[:len(m.lv)]
	copy(words, m.lv)
	m.lv = words
	rg.lvAt[m] = off
	return rg.addr + uint64(off), ""
}

// noteThread enters a thread in the records' table and in its region's
// thread table (push procid, and push pid and push tid in a pid
// namespace). Called with e.js.mu held.
func (e *Engine) noteThread(tid, spID int) {
	idx := e.tgt.ThreadIndex(tid)
	e.js.threads[tid] = [2]int{spID, idx}
	if sp := e.spaces[spID]; sp != nil && sp.jump != nil && sp.jump.rg != nil {
		rg := sp.jump.rg
		own := tid
		if rg.ns {
			own, _ = e.ab.jump.NSIDs(tid)
			rg.nsRoot[own] = tid
		}
		pad.SetThread(rg.mem.Bytes, own, idx, tid, spID)
	}
}

// The drain is two goroutines. The mover takes the committed records
// out of the rings as bytes (pad.Ring.Take: a memory copy of whole runs
// of records, the tail stored once a run), as fast as the pads commit
// them, into the engine's queue of chunks; the committer makes each
// record of a chunk (ringRecord) and hands them to the sink, in batches
// to a BatchSink. So a sink that formats and writes a record in a
// microsecond or two never holds up the rings: a burst the sink cannot
// follow waits in the queue, not in the target. The queue holds at most
// queueBytes: past that the mover leaves the records in the rings, which
// fill, and the pads count each record they cannot commit as lost, per
// probe. The target never waits for either.

// chunkBytes is the most bytes the mover takes from a ring at once (a
// chunk of the queue); queueRings the queue's bound in rings: a queue
// holds at most queueRings times the ring's size, and at most maxQueue.
const (
	chunkBytes = 1 << 20
	queueRings = 4
	maxQueue   = 256 << 20
)

// keepChunks is how many chunks the queue keeps for reuse once empty.
const keepChunks = 8

// newChunk is an empty chunk's buffer: memory of its own (mmap), outside
// Go's heap, so that the mover never pays for the collector's work and a
// queue that held a burst gives its memory back to the system.
func newChunk() []byte {
	b, err := unix.Mmap(-1, 0, chunkBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return make([]byte, 0, chunkBytes)
	}
	return b[:0]
}

// freeChunk gives a chunk's memory back (newChunk's).
func freeChunk(b []byte) {
	if cap(b) == chunkBytes {
		unix.Munmap(b[:chunkBytes])
	}
}

// chunk is records as a ring held them, from one region, with the
// region's sites as they were when they were moved.
type chunk struct {
	rg    *region
	sites []siteRef
	b     []byte
}

// drainQueue is the queue between the mover and the committer.
type drainQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond // a chunk queued or done, or the end
	chunks []chunk
	bytes  int  // queued and being committed
	busy   bool // the committer holds a chunk
	max    int  // bound of bytes
	end    bool // no more chunks: the committer ends when the queue is empty
	free   [][]byte
	done   chan struct{}
}

// queueSize is the queue's bound for rings of ring bytes.
func queueSize(ring int) int { return min(queueRings*ring, maxQueue) }

// startDrain starts the goroutines that drain the regions' rings.
func (e *Engine) startDrain() {
	if e.js.started {
		return
	}
	e.js.started = true
	q := &e.js.q
	q.cond = sync.NewCond(&q.mu)
	ring := e.opts.RingSize
	if ring == 0 {
		ring = pad.DefaultRingSize
	}
	q.max = queueSize(ring)
	q.done = make(chan struct{})
	go e.committer()
	go func() {
		defer close(e.js.done)
		idle := 0
		for {
			if clockOK {
				clockVal.Refine()
			}
			n, _ := e.move()
			select {
			case <-e.js.stop:
				e.drainAll()
				q.mu.Lock()
				q.end = true
				q.cond.Broadcast()
				q.mu.Unlock()
				<-q.done
				return
			default:
			}
			if n > 0 {
				idle = 0
				continue
			}
			// back off to 1 ms while nothing comes: the default ring
			// holds some 1,000,000 records of two words, more than a
			// millisecond of a hot probe's hits in several threads
			idle = min(idle+1, 20)
			time.Sleep(time.Duration(idle) * 50 * time.Microsecond)
		}
	}()
}

// move takes what the rings hold into the queue: at most moveChunks
// chunks a ring, so that pads that never stop committing do not hold
// e.js.moveMu for good. It needs only e.js.moveMu (the regions may not
// change under it), never e.js.mu, which the committer holds to make
// records. It returns how many records it took, and whether
// the queue was full.
func (e *Engine) move() (n int, full bool) { return e.moveSome(false) }

// moveAll moves every record the rings hold into the queue, past its
// bound if need be (by a ring's worth at most, as the rings' pads have
// stopped committing: a region's slots given back, its threads
// stopped), without waiting for the committer: the records
// are out of the rings and will be made with the sites they were
// committed under (chunk). A loop of the target's threads stopped waits
// for a memory copy, not for a writer.
func (e *Engine) moveAll() {
	q := &e.js.q
	if q.cond == nil {
		return // no ring was ever drained
	}
	q.mu.Lock()
	ended := q.end
	q.mu.Unlock()
	if ended {
		e.drainAll() // no committer any more (Close): commit here
		return
	}
	for range 64 {
		if n, _ := e.moveSome(true); n == 0 {
			return
		}
	}
}

func (e *Engine) moveSome(force bool) (n int, full bool) {
	q := &e.js.q
	e.js.moveMu.Lock()
	defer e.js.moveMu.Unlock()
	for rg := range e.js.regions {
		for range moveChunks {
			q.mu.Lock()
			room := q.max - q.bytes
			if force {
				room = chunkBytes
			}
			var buf []byte
			if k := len(q.free); k > 0 {
				buf, q.free = q.free[k-1][:0], q.free[:k-1]
			}
			q.mu.Unlock()
			if room <= 0 {
				full = true
				break
			}
			if buf == nil {
				buf = newChunk()
			}
			buf, k := rg.ring.Take(buf, min(room, chunkBytes), 0)
			// the sites after the records: every site a moved record
			// names was published before its pad could commit it, and a
			// site is given back only once its records are moved
			var sites []siteRef
			if p := rg.published.Load(); p != nil {
				sites = *p
			}
			q.mu.Lock()
			if k == 0 {
				q.free = append(q.free, buf) // one too many at most
				q.mu.Unlock()
				break
			}
			q.chunks = append(q.chunks, chunk{rg: rg, sites: sites, b: buf})
			q.bytes += len(buf)
			q.cond.Broadcast()
			q.mu.Unlock()
			n += k
			if len(buf) < chunkBytes/2 {
				break // the ring is empty, or nearly
			}
		}
	}
	return n, full
}

const moveChunks = 8

// committer commits the queue's chunks, oldest first, until the end.
func (e *Engine) committer() {
	q := &e.js.q
	defer close(q.done)
	for {
		q.mu.Lock()
		for len(q.chunks) == 0 && !q.end {
			q.cond.Wait()
		}
		q.mu.Unlock()
		if !e.commitNext() {
			return
		}
	}
}

// commitNext commits the oldest chunk of the queue; false: it was empty.
func (e *Engine) commitNext() bool {
	q := &e.js.q
	q.mu.Lock()
	if len(q.chunks) == 0 {
		q.mu.Unlock()
		return false
	}
	c := q.chunks[0]
	q.chunks[0] = chunk{}
	q.chunks = q.chunks[1:]
	q.busy = true
	q.mu.Unlock()
	bs, batched := e.opts.Sink.(BatchSink)
	batch := e.js.batch[:0]
	b := c.b
	for len(b) > 0 {
		// the records of up to drainBatch at a time, under e.js.mu (the
		// sites and the threads they name)
		e.js.mu.Lock()
		k := 0
		for len(b) > 0 && k < drainBatch {
			one := b[:pad.RecordLen(b)]
			b = b[len(one):]
			pad.Decode(one, &e.js.rec, func(r *pad.Record) {
				if int(r.Site) >= len(c.sites) || c.sites[r.Site].p == nil {
					return
				}
				batch = append(batch, e.ringRecord(c.rg, c.sites[r.Site], r))
			})
			k++
		}
		e.js.mu.Unlock()
		if batched {
			e.commitMu.Lock()
			bs.CommitBatch(batch)
			e.commitMu.Unlock()
		} else {
			for _, r := range batch {
				e.commit(r)
			}
		}
		clear(batch)
		batch = batch[:0]
		// let the mover have the P: the rings come first
		runtime.Gosched()
	}
	e.js.batch = batch
	q.mu.Lock()
	q.bytes -= len(c.b)
	q.busy = false
	if len(q.free) < keepChunks {
		q.free = append(q.free, c.b[:0])
	} else {
		freeChunk(c.b)
	}
	q.cond.Broadcast()
	q.mu.Unlock()
	return true
}

// drainBatch is the most records a BatchSink gets at once.
const drainBatch = 1024

// drainAll drains every ring to its end and commits every record (a
// region about to go, a probe's slots given back, Close): when it
// returns, no record committed before it was called is left in a ring
// or in the queue. Called on the loop (or the mover at its end), never
// with e.js.mu held.
func (e *Engine) drainAll() {
	q := &e.js.q
	if q.cond == nil {
		return // no ring was ever drained
	}
	for {
		q.mu.Lock()
		ended := q.end
		for !ended && (len(q.chunks) > 0 || q.busy) {
			q.cond.Wait()
		}
		q.mu.Unlock()
		if ended {
			// the committer is gone (Close): commit here
			for e.commitNext() {
			}
		}
		n, full := e.move()
		if n == 0 && !full {
			// the ring is empty; but the mover's own move, which this
			// one waited for (moveMu), may have queued a chunk after the
			// wait above: done only once the queue is empty too. (It
			// returned with that chunk uncommitted, and a process's end
			// was reported before its last records: TestJumpSignals,
			// 8,356 of 40,000, in a loaded CI run.)
			q.mu.Lock()
			idle := len(q.chunks) == 0 && !q.busy
			q.mu.Unlock()
			if idle {
				break
			}
		}
	}
}

// ringRecord makes the record of what a pad committed.
func (e *Engine) ringRecord(rg *region, ref siteRef, r *pad.Record) *Record {
	p := ref.p
	d := p.def()
	var at time.Time
	switch {
	case r.TSC&jit.StampNS != 0:
		// the process traps rdtsc: the pad read the time in ns
		if ns := r.TSC &^ jit.StampNS; ns != 0 {
			at = time.Unix(0, int64(ns))
		} else {
			at = time.Now() // it could not: the drain's time
		}
	case clockOK:
		at = clockVal.Time(r.TSC)
	}
	tid := int(r.Tid)
	if rg.ns {
		// the pad read the id its thread sees
		if root, ok := rg.nsRoot[tid]; ok {
			tid = root
		}
	}
	rec := &Record{Time: at, Kind: "log", Module: p.mod.Name, Major: r.Major, Minor: r.Minor,
		Location: d.Loc.Text, Probe: ProbeKindName(d), Address: ref.addr, Tid: tid, Exit: r.Exit, Truncated: r.Truncated}
	if t, ok := e.js.threads[tid]; ok {
		rec.Pid, rec.CPU = t[0], t[1]
	} else if x, ok := e.js.exited[tid]; ok {
		rec.Pid, rec.CPU = x.pid, x.index
	}
	if r.Exception != 0 {
		rec.Kind = "exception"
		rec.Exception = rpn.Exception(r.Exception).String()
		rec.PC = r.PC
		rec.Exit = 0
		if pos, ok := p.src.LineFor(r.PC); ok {
			rec.Line = p.src.PosString(pos)
		}
	} else {
		if r.Exit == rpn.ExitTrace {
			rec.Kind = "trace"
		}
		rec.Data = append([]byte(nil), r.Data...)
	}
	return rec
}

// stopJump stops the drain goroutine after a last drain.
func (e *Engine) stopJump() {
	if e.js.started {
		close(e.js.stop)
		<-e.js.done
		e.js.started = false
	}
}

// Lost is how many records the jump pads of the target dropped because
// their ring was full. Any goroutine may call it.
func (e *Engine) Lost() uint64 {
	e.js.mu.Lock()
	defer e.js.mu.Unlock()
	n := e.js.lostGone
	for rg := range e.js.regions {
		n += rg.ring.Lost()
	}
	return n
}

// jumpCounters adds what the pads counted to a probe's info; ended
// reports whether a pad's max hits or rem ended the probe.
func (e *Engine) jumpCounters(p *eprobe, info *ProbeInfo) (ended bool) {
	e.js.mu.Lock()
	defer e.js.mu.Unlock()
	for rg := range e.js.regions {
		for i, s := range rg.sites {
			if s.p != p {
				continue
			}
			c := pad.LoadCounters(pad.CountersAt(rg.mem.Bytes, i))
			info.Hits += c.Hits
			info.Skipped += c.Skipped
			info.Faults += c.Faults
			info.Lost += c.Lost
			info.Missed += c.Missed
			if c.Disabled != 0 {
				ended = true
			}
		}
	}
	return ended
}

// stopAll stops every running thread of a space; it returns those it
// stopped (resumeStopped lets them go). Threads that stopped for an event
// of their own have it queued and are handled as usual.
func (e *Engine) stopAll(spID int) ([]int, error) {
	var quiet []int
	for _, tid := range e.tgt.Threads(spID) {
		if e.tgt.IsStopped(tid) {
			continue
		}
		evs, err := e.tgt.StopThread(tid)
		if err != nil {
			continue // it exited
		}
		if len(evs) == 0 {
			quiet = append(quiet, tid)
		} else {
			e.pendingEvents = append(e.pendingEvents, evs...)
		}
	}
	return quiet, nil
}

func (e *Engine) resumeStopped(tids []int) {
	for _, tid := range tids {
		if e.tgt.IsStopped(tid) {
			e.fail(e.tgt.Resume(tid, 0), "resume thread %d", tid)
		}
	}
}

// unplaceJump takes probe p off the jump site at addr: the pad is rebuilt
// without it, or the original code goes back when it was the last. The
// old pad is retired: used again only once no thread can be inside it.
func (e *Engine) unplaceJump(sp *space, addr uint64, p *eprobe) error {
	js := sp.jump
	site := js.sites[addr]
	if site == nil {
		return nil
	}
	var keep []*eprobe
	for _, q := range site.probes {
		if q != p {
			keep = append(keep, q)
		}
	}
	if sp.detached {
		delete(js.sites, addr)
		return nil
	}
	host := e.ab.jump
	stopped, _ := e.stopAll(sp.id)
	defer e.resumeStopped(stopped)
	old, oldProbes := site.pad, site.probes
	if len(keep) > 0 {
		if why := e.buildPad(sp, host, js.rg, site, keep); why == "" {
			err := e.plantJump(sp, site)
			if err == nil {
				e.retirePad(sp, old)
				return nil
			}
			if err != errPadFar {
				e.retirePad(sp, site.pad)
				site.pad, site.probes = old, oldProbes
				return err
			}
			e.retirePad(sp, site.pad)
			site.pad, site.probes = old, oldProbes
		}
		// could not rebuild: the others go too (query says removed)
	}
	delete(js.sites, addr)
	if err := e.unplant(sp, addr, site.orig); err != nil {
		return err // the jump may still lead to the pad: not retired
	}
	e.retirePad(sp, site.pad)
	return nil
}

// jumpUnmapped forgets the jump sites in a module's code that is gone
// (in is its executable code, nil for all): nothing to write back, the
// pads stay; their probes there go back to pending if in no other space.
func (e *Engine) jumpUnmapped(sp *space, in func(uint64) bool) {
	if sp.jump == nil {
		return
	}
	for addr, site := range sp.jump.sites {
		if in != nil && !in(addr) {
			continue
		}
		for _, p := range site.probes {
			delete(p.in, sp.id)
			if len(p.in) == 0 && p.State == StateActive {
				p.State = StatePending
			}
		}
		delete(sp.jump.sites, addr)
		delete(sp.jump.int3Only, addr)
	}
}

// takeOutJumps puts the original code back at every jump site of a space
// (detach); the pads stay, for the threads inside them.
func (e *Engine) takeOutJumps(sp *space) error {
	if sp.jump == nil {
		return nil
	}
	host := e.ab.jump
	var errs []error
	// signals held for threads inside pads go in as they leave: now
	for tid := range sp.jump.holding {
		if th := e.threads[tid]; th != nil {
			th.heldPad = false
		}
		if host != nil {
			host.SyscallStops(tid, false)
			e.fail(host.UnblockPadSignals(tid), "give thread %d its signal mask back", tid)
		}
	}
	clear(sp.jump.holding)
	if !sp.detached && host != nil {
		// the held bytes at 0, and out of the journal
		for _, a := range sp.jump.held {
			if err := e.unplant(sp, a, []byte{0}); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for addr, site := range sp.jump.sites {
		if !sp.detached && host != nil {
			if err := e.unplant(sp, addr, site.orig); err != nil {
				errs = append(errs, err)
			}
		}
		delete(sp.jump.sites, addr)
	}
	return errors.Join(errs...)
}

// padSignal handles a signal for a thread whose rip is in a pad. It
// reports whether it did.
func (e *Engine) padSignal(th *thread, ev Event) bool {
	sp := e.spaces[th.space]
	if sp == nil || sp.jump == nil || len(sp.jump.pads) == 0 {
		return false
	}
	var r Regs
	if e.tgt.GetRegs(th.tid, &r) != nil {
		return false
	}
	pc := r[rpn.RegRIP]
	bp := sp.padAt(pc)
	if bp == nil {
		return false
	}
	if !ev.Async {
		if slow, ok := bp.p.TSC[pc]; ok && ev.Sig == sigSEGV {
			// the process traps rdtsc (PR_SET_TSC, PR_TSC_SIGSEGV):
			// this hit reads the time with clock_gettime, and from now
			// on every pad of the region does; the process never sees
			// the fault
			if rg := sp.jump.rg; rg != nil && rg.mem.Bytes[pad.OffNoTSC] == 0 {
				rg.mem.Bytes[pad.OffNoTSC] = 1
				e.warn(fmt.Sprintf("process %d traps rdtsc: its pads read the time with clock_gettime (about 0.1 µs a record more)", th.space))
			}
			r[rpn.RegRIP] = slow
			e.fail(e.tgt.SetRegs(th.tid, &r), "send thread %d to the system-call clock of its pad", th.tid)
			e.resume(th.tid, 0)
			return true
		}
		if h, ok := bp.p.Fixups[pc]; ok {
			// a probe's memory access faulted: its program raises
			// invalid-address, the process never sees the fault
			r[rpn.RegRIP] = h
			e.fail(e.tgt.SetRegs(th.tid, &r), "send thread %d to the fault handler of its pad", th.tid)
			e.resume(th.tid, 0)
			return true
		}
		if orig, ok := bp.p.Displaced[pc]; ok {
			if tw, ok := bp.p.Pending[pc]; ok {
				// the copy run with records pending: they are dropped
				// (as the int3 route drops a faulting step's), the pad
				// stack freed, and the thread moves to the same
				// instruction of the other copy, which needs none
				e.freePadStack(sp, r[rpn.RegRSP]-uint64(tw.Delta))
				r[rpn.RegRIP] = tw.A
			}
			if orig == bp.site.addr {
				// the first covered instruction faulted: its handler
				// sees the original address (and a return runs it again
				// there, the probe included, as on the int3 route)
				r[rpn.RegRIP] = orig
			}
			e.fail(e.tgt.SetRegs(th.tid, &r), "move thread %d to %#x for its fault", th.tid, r[rpn.RegRIP])
			e.resume(th.tid, ev.Sig)
			return true
		}
		e.warn(fmt.Sprintf("signal %d in the pad of %#x at %#x: delivered there", ev.Sig, bp.site.addr, pc))
		e.resume(th.tid, ev.Sig)
		return true
	}
	// an asynchronous signal
	th.regs = r
	if leave, ok := e.padExit(th, bp, pc); ok {
		// past the held check: the pad's state is gone and the
		// registers are the thread's (but for what padExit finished):
		// move the thread out, deliver there
		e.leavePad(th, bp, leave)
		e.resume(th.tid, ev.Sig)
		return true
	}
	if e.padToChecked(th, bp, pc) {
		e.fail(e.tgt.SetRegs(th.tid, &th.regs), "move thread %d to the checked copy of its pad", th.tid)
	}
	// anywhere before: held until the thread leaves the pad. Its
	// asynchronous signals are blocked (their record in the liveness
	// page, for a recovery) and this one goes back to the kernel, pending
	// with its own siginfo (resumed with a signal it blocks, the thread
	// has it requeued); the held flag makes the thread stop for gprobes
	// at the pad's exit, at a system call it now stops at.
	if th.heldPad || e.inert(ev) {
		// already held: it joins the others; inert: delivered here, it
		// runs nothing (sent again, a SIGCONT would discard the stop
		// signals pending in the process)
		e.resume(th.tid, ev.Sig)
		return true
	}
	host := e.ab.jump
	if err := host.BlockPadSignals(th.tid); err != nil {
		e.warn(fmt.Sprintf("a signal for thread %d inside a pad is delivered there: %v", th.tid, err))
		e.resume(th.tid, ev.Sig)
		return true
	}
	th.heldPad = true
	host.SyscallStops(th.tid, true)
	sp.jump.holding[th.tid] = true
	e.setHeld(sp, 1)
	e.resume(th.tid, ev.Sig)
	return true
}

// padExit finishes for a thread at pc, past its pad's last held check
// (Popf, Lea, Back: popfq, lea 128(%rsp),%rsp, jmp Final), what is left
// before Final, in th.regs, and returns where in Final..FinalEnd it is; ok
// is false elsewhere.
func (e *Engine) padExit(th *thread, bp *builtPad, pc uint64) (uint64, bool) {
	p := bp.p
	switch {
	case pc >= p.Final && pc < p.FinalEnd:
		return pc, true
	case pc == p.Popf:
		var f [8]byte
		if e.tgt.ReadMem(th.space, th.regs[rpn.RegRSP], f[:]) != nil {
			return 0, false
		}
		th.regs[rpn.RegRFLAGS] = binary.LittleEndian.Uint64(f[:])
		th.regs[rpn.RegRSP] += 8 + 128
		return p.Final, true
	case pc == p.Lea:
		th.regs[rpn.RegRSP] += 128
		return p.Final, true
	case pc == p.Back:
		return p.Final, true
	}
	return 0, false
}

// padToChecked moves a thread gprobes is about to hold a signal for, that
// would otherwise leave its pad without passing a held check (the fast
// path: past its first check, or in the first copy of the covered
// instructions), to the copy followed by the check, in th.regs; it
// reports whether it moved it. Past the check's jne (taken with the flag
// clear: ZF set) it finishes the pops the thread has left (pop %rbp, pop
// %rax, popfq, lea 128(%rsp),%rsp) for it.
func (e *Engine) padToChecked(th *thread, bp *builtPad, pc uint64) bool {
	p := bp.p
	if c, ok := p.Holding[pc]; ok {
		th.regs[rpn.RegRIP] = c
		return true
	}
	from := -1
	if pc == p.Checked && th.regs[rpn.RegRFLAGS]&0x40 != 0 {
		from = 0
	}
	for i, a := range p.Unwind {
		if pc == a {
			from = i
		}
	}
	if from < 0 {
		return false
	}
	var w [8]byte
	for i := from; i < 3; i++ {
		if e.tgt.ReadMem(th.space, th.regs[rpn.RegRSP], w[:]) != nil {
			return false
		}
		v := binary.LittleEndian.Uint64(w[:])
		switch i {
		case 0:
			th.regs[rpn.RegRBP] = v
		case 1:
			th.regs[rpn.RegRAX] = v
		case 2:
			th.regs[rpn.RegRFLAGS] = v
		}
		th.regs[rpn.RegRSP] += 8
	}
	th.regs[rpn.RegRSP] += 128
	th.regs[rpn.RegRIP] = p.CopyC
	return true
}

// setHeld sets or clears the held byte of every pad area of a space.
func (e *Engine) setHeld(sp *space, v byte) {
	for _, a := range sp.jump.held {
		e.fail(e.tgt.WriteMem(sp.id, a, []byte{v}), "set the pads' held flag")
	}
}

// padSyscall handles a system-call stop (EvSyscall) of a thread gprobes
// holds signals for: at the exit of its pad's stop (Pad.Sys) it leaves
// the pad, registers its own (rax, rcx, r11 and the flags from its stack,
// rsp back over them and its red zone), its signal mask back: the held
// signals are delivered outside the pad. Any other system call it makes
// on the way (the pads' own, its programs'), and the stop's entry, it
// goes on from, still stopping at system calls.
func (e *Engine) padSyscall(th *thread) {
	sp := e.spaces[th.space]
	host := e.ab.jump
	if e.tgt.GetRegs(th.tid, &th.regs) != nil || sp == nil || sp.jump == nil || host == nil {
		e.resume(th.tid, 0)
		return
	}
	pc := th.regs[rpn.RegRIP] - 2
	bp := sp.padAt(pc)
	if bp == nil && sp.jump.holding[th.tid] {
		// it left the pad another way (a handler of a fault in the pad
		// that did not return): nothing to stop for any more
		e.padRelease(sp, th)
		e.resume(th.tid, 0)
		return
	}
	const enosys = ^uint64(37) // -ENOSYS: rax at a system call's entry
	if bp == nil || bp.p.Sys != pc || th.regs[rpn.RegRAX] == enosys || !sp.jump.holding[th.tid] {
		if !sp.jump.holding[th.tid] {
			host.SyscallStops(th.tid, false)
		}
		e.resume(th.tid, 0)
		return
	}
	var w [32]byte
	if err := e.tgt.ReadMem(th.space, th.regs[rpn.RegRSP], w[:]); err != nil {
		e.fail(err, "read the registers thread %d left below its stack", th.tid)
		e.resume(th.tid, 0)
		return
	}
	th.regs[rpn.RegR11] = binary.LittleEndian.Uint64(w[0:])
	th.regs[rpn.RegRCX] = binary.LittleEndian.Uint64(w[8:])
	th.regs[rpn.RegRAX] = binary.LittleEndian.Uint64(w[16:])
	th.regs[rpn.RegRFLAGS] = binary.LittleEndian.Uint64(w[24:])
	th.regs[rpn.RegRSP] += 32 + 128
	e.leavePad(th, bp, bp.p.Final)
	e.fail(host.EndSyscall(th.tid), "end the stop of thread %d", th.tid)
	e.padRelease(sp, th)
	e.resume(th.tid, 0)
}

// padHoldGone forgets a thread gprobes held signals for that is gone.
func (e *Engine) padHoldGone(tid, spID int) {
	if sp := e.spaces[spID]; sp != nil && sp.jump != nil && sp.jump.holding[tid] {
		delete(sp.jump.holding, tid)
		if len(sp.jump.holding) == 0 {
			e.setHeld(sp, 0)
		}
	}
}

// padRelease gives a thread gprobes held signals for inside a pad its
// mask back (its signals come as it runs) and stops its system-call stops.
func (e *Engine) padRelease(sp *space, th *thread) {
	host := e.ab.jump
	host.SyscallStops(th.tid, false)
	e.fail(host.UnblockPadSignals(th.tid), "give thread %d its signal mask back", th.tid)
	th.heldPad = false
	delete(sp.jump.holding, th.tid)
	if len(sp.jump.holding) == 0 {
		e.setHeld(sp, 0)
	}
}

// joinJump adds probe p to the jump site at addr: a new pad with every
// probe there, and the jump pointed at it (threads stopped).
func (e *Engine) joinJump(sp *space, p *eprobe, addr uint64) string {
	site := sp.jump.sites[addr]
	host := e.ab.jump
	old, oldProbes := site.pad, site.probes
	if why := e.buildPad(sp, host, sp.jump.rg, site, append(append([]*eprobe{}, site.probes...), p)); why != "" {
		return why
	}
	if why := e.repoint(sp, site); why != "" {
		e.retirePad(sp, site.pad)
		site.pad, site.probes = old, oldProbes
		return why
	}
	e.retirePad(sp, old)
	p.in[sp.id] = addr
	p.State, p.Reason = StateActive, ""
	p.How = "jump"
	return ""
}

// repoint writes the jump of a site to its (new) pad, every thread
// stopped.
func (e *Engine) repoint(sp *space, site *jumpSite) string {
	if x86.JmpTo(site.addr, site.pad.at) == nil {
		return errPadFar.Error()
	}
	stopped, _ := e.stopAll(sp.id)
	defer e.resumeStopped(stopped)
	return e.plantJumpWhy(sp, site)
}

// dropJump forgets a space's jump books when its image is gone (exec:
// its probes go back to pending, to be placed in the new image; exit).
// The region goes when no space uses it: its last records are committed,
// its counts folded into the probes', its variables copied out.
func (e *Engine) dropJump(sp *space, exec bool) {
	js := sp.jump
	if js == nil {
		return
	}
	for _, site := range js.sites {
		for _, p := range site.probes {
			delete(p.in, sp.id)
			if exec && len(p.in) == 0 && p.State == StateActive {
				p.State = StatePending
			}
		}
	}
	sp.jump = nil
	rg := js.rg
	if rg == nil {
		return
	}
	if rg.refs--; rg.refs > 0 {
		return
	}
	// every record of the space written before its end is reported (a
	// process's exit, a detach): the ring's and the queue's
	e.drainAll()
	e.js.mu.Lock()
	defer e.js.mu.Unlock()
	e.releaseRegion(rg)
}

// releaseRegion folds a region's counts into its probes', copies its
// variables out and unmaps it. Called with e.js.mu held, the ring
// drained.
func (e *Engine) releaseRegion(rg *region) {
	for i, s := range rg.sites {
		if s.p == nil {
			continue // given back (freeRegionSlots)
		}
		c := pad.LoadCounters(pad.CountersAt(rg.mem.Bytes, i))
		s.p.st.Hits += c.Hits
		s.p.st.Skipped += c.Skipped
		s.p.st.Runs += c.Runs
		s.p.st.Faults += c.Faults
		s.p.lost += c.Lost
		s.p.missed += c.Missed
		if c.Disabled != 0 {
			s.p.st.Disabled = true
		}
	}
	e.js.lostGone += rg.ring.Lost()
	for m, off := range rg.lvAt {
		if cap(m.lv) > 0 && unsafe.SliceData(m.lv) == &rg.mem.Words(off, 1)[0] {
			m.lv = append([]uint64(nil), m.lv...)
		}
	}
	e.js.moveMu.Lock()
	delete(e.js.regions, rg)
	e.js.moveMu.Unlock()
	rg.mem.Close()
}

// jumpThread enters a new thread in the records' table once the engine
// has pads anywhere.
func (e *Engine) jumpThread(tid, spID int) {
	if !e.js.started {
		return
	}
	if sp := e.spaces[spID]; sp != nil && sp.jump != nil && sp.jump.rg != nil {
		// a thread that does not keep its id where the pads read it (a
		// vfork child): they ask the kernel while it lives
		rg := sp.jump.rg
		if rg.tcbOff != 0 && e.ab.jump.TIDOffset(spID, tid) != rg.tcbOff {
			rg.odd[tid] = true
			atomic.StoreUint64(rg.mem.Word(pad.OffTCBTid), 0)
		}
	}
	e.js.mu.Lock()
	e.noteThread(tid, spID)
	e.js.mu.Unlock()
}

// demoteJump takes the jump at addr out (every thread stopped; the pad
// stays for threads inside it) and returns the probes that were there,
// no longer placed: the caller puts them on an int3, where a probe that
// cannot run in a pad joins them.
func (e *Engine) demoteJump(sp *space, addr uint64, why string) ([]*eprobe, error) {
	js := sp.jump
	site := js.sites[addr]
	stopped, _ := e.stopAll(sp.id)
	defer e.resumeStopped(stopped)
	if err := e.unplant(sp, addr, site.orig); err != nil {
		return nil, err
	}
	delete(js.sites, addr)
	e.retirePad(sp, site.pad)
	js.int3Only[addr] = why
	for _, q := range site.probes {
		delete(q.in, sp.id)
	}
	return site.probes, nil
}

// jumpThreadGone: a thread exited or exec'd: it moves to the exited
// threads the records still name (the last keepExited of them); when the
// last thread that did not keep its id in its thread control block is
// gone, the pads read it there again.
func (e *Engine) jumpThreadGone(tid int) {
	if !e.js.started {
		return
	}
	e.js.mu.Lock()
	defer e.js.mu.Unlock()
	// its records may still be in a ring, behind another thread's not
	// committed yet: it stays known a while
	if t, ok := e.js.threads[tid]; ok {
		delete(e.js.threads, tid)
		e.js.exited[tid] = exitedThread{pid: t[0], index: t[1], seq: e.js.exitSeq}
		e.js.exitSeq++
		if len(e.js.exited) > 2*keepExited {
			for k, x := range e.js.exited {
				if x.seq+keepExited < e.js.exitSeq {
					delete(e.js.exited, k)
				}
			}
		}
	}
	for rg := range e.js.regions {
		if rg.odd[tid] {
			delete(rg.odd, tid)
			if len(rg.odd) == 0 {
				atomic.StoreUint64(rg.mem.Word(pad.OffTCBTid), rg.tcbOff)
			}
		}
	}
}

// jumpCovering returns the jump site whose covered bytes hold addr past
// their first, or nil.
func (e *Engine) jumpCovering(sp *space, addr uint64) *jumpSite {
	if sp.jump == nil {
		return nil
	}
	for a, site := range sp.jump.sites {
		if addr > a && addr < a+uint64(site.plan.Len) {
			return site
		}
	}
	return nil
}

// sigSEGV is Linux's SIGSEGV: what a trapped rdtsc raises (jump pads are
// for Linux processes only).
const sigSEGV = 11

// leavePad moves a thread that is at pc, between its pad's Final and
// FinalEnd (registers all its own), out of the pad: it runs what is left
// of the last covered instruction when that is a jmp, jcc or call
// (emulated), else goes to the code after the covered bytes. A handler
// delivered then sees an address of the program's. A relocated call is a
// push of the return address then a jump: a thread after the push has
// only the jump left (the call emulated whole, its push undone first,
// stores the same return address at the same place).
func (e *Engine) leavePad(th *thread, bp *builtPad, pc uint64) {
	site := bp.site
	last := &site.plan.Covered[len(site.plan.Covered)-1]
	if x86.IsRet(last.Bytes) {
		// a pad that ends with a ret (a return probe's, a short
		// function's): done here
		th.regs[rpn.RegRIP] = last.Addr
		if !x86.EmulateInsn(last, &th.regs, mem{e, th.space}) {
			th.regs[rpn.RegRIP] = pc // it faults: in the pad, as it would have
		}
		e.fail(e.tgt.SetRegs(th.tid, &th.regs), "move thread %d out of its pad", th.tid)
		return
	}
	if orig, ok := bp.p.Displaced[bp.p.Final]; ok && orig == last.Addr && last.Class == x86.Branch {
		if bp.p.Pushed != 0 && pc == bp.p.Pushed {
			th.regs[rpn.RegRSP] += 8
		}
		th.regs[rpn.RegRIP] = last.Addr
		x86.EmulateBranch(last, &th.regs, mem{e, th.space})
	} else {
		th.regs[rpn.RegRIP] = bp.p.Ret
	}
	e.fail(e.tgt.SetRegs(th.tid, &th.regs), "move thread %d out of its pad", th.tid)
}

// closeJump releases every region and the global variables' memory the
// engine made (Close: the target is let go).
func (e *Engine) closeJump() {
	e.js.mu.Lock()
	for rg := range e.js.regions {
		e.releaseRegion(rg)
	}
	e.js.mu.Unlock()
	if e.gvShm != nil && e.opts.GVMem == nil {
		e.gv = append([]uint64(nil), e.gv...)
		e.gvShm.Close()
		e.gvShm = nil
	}
}

// moveToInt3 takes the jump at addr out and puts the probes that were
// there on an int3, in their order, with why as the reason (query's HOW).
func (e *Engine) moveToInt3(sp *space, addr uint64, why string) error {
	if site := sp.jump.sites[addr]; site != nil && site.retFn != 0 {
		return e.retPadToInt3(sp, site, why)
	}
	moved, err := e.demoteJump(sp, addr, why)
	if err != nil {
		return err
	}
	for _, q := range moved {
		if qi := sp.inst[q.src]; qi != nil {
			e.placeProbe(sp, qi, q)
		}
	}
	return nil
}

// retryTCB checks again, at ld.so's rendezvous, where the threads of a
// region made before libc set them up (an exec'd program's probes go in
// at its first instruction, fs_base still 0) keep their ids: from then on
// the pads read them there instead of asking the kernel (gettid, half of
// a hit's cost). Only with the one thread stopped here in the process:
// the others could not be checked.
func (e *Engine) retryTCB(sp *space, tid int) {
	if sp.jump == nil || sp.jump.rg == nil {
		return
	}
	rg := sp.jump.rg
	if rg.tcbOff != 0 || len(e.tgt.Threads(sp.id)) != 1 || rg.refs != 1 {
		return
	}
	if off := e.ab.jump.TIDOffset(sp.id, tid); off != 0 {
		rg.tcbOff = off
		if len(rg.odd) == 0 {
			atomic.StoreUint64(rg.mem.Word(pad.OffTCBTid), off)
		}
	}
}
