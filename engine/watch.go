package engine

import (
	"fmt"
	"strings"
	"time"

	pb "github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/x86"
)

// Watch probes (`watch = EXPR,LEN,MODE`, docs/language.md): the program runs right
// after an instruction wrote (w) or read or wrote (rw) any of the LEN
// bytes at EXPR. They are x86's data breakpoints: debug registers DR0-DR3
// hold the addresses, DR7 their lengths and kinds of access, and a hit is
// a trap (the access has completed, rip is the next instruction) whose
// DR6 names the register. So there is no displaced instruction: the
// program runs, its records commit at once, the thread runs on.
//
// The engine owns the registers of a target: each watch probe gets one of
// the four at insert, for the life of the probe, in every address space
// it goes in (a process and its fork children use the same register
// number). A fifth is refused with the four users named, and so is a
// watch when the backend uses registers itself (xen's debug-register
// breakpoints for code probes: Watcher.DebugRegs). A backend that has
// data breakpoints implements Watcher: ptrace (PTRACE_POKEUSER of the
// thread's u_debugreg, every thread), gdbtarget (the stub's Z2/Z4
// watchpoints), xen (the vCPUs' debug registers). docs/engine.md,
// "Watch probes", has what each does and what it cannot see.

// NumWatch is how many watch probes a target takes: x86's four debug
// registers (DR0-DR3).
const NumWatch = 4

// Watch is what a debug register watches.
type Watch struct {
	Addr uint64
	Len  int           // 1, 2, 4 or 8; Addr is a multiple of it
	Mode rpn.WatchMode // rpn.WatchWrite or rpn.WatchReadWrite
}

func (w Watch) String() string {
	return fmt.Sprintf("%s %d bytes at %#x", w.Mode, w.Len, w.Addr)
}

// DR7 is the control bits of DR7 for debug register slot as a data
// breakpoint on w: its R/W field (01 writes, 11 reads and writes) and its
// LEN field (00 1 byte, 01 2, 11 4, 10 8), without the enable bits
// (local: 1<<(2*slot); global: 2<<(2*slot)).
func (w Watch) DR7(slot int) uint64 {
	rw := uint64(1)
	if w.Mode == rpn.WatchReadWrite {
		rw = 3
	}
	var ln uint64
	switch w.Len {
	case 2:
		ln = 1
	case 4:
		ln = 3
	case 8:
		ln = 2
	}
	return (rw | ln<<2) << (16 + 4*slot)
}

// watchBooks are the engine's debug registers: the watch probe holding
// each one.
type watchBooks struct {
	slots [NumWatch]*eprobe
}

func isWatch(p *eprobe) bool { return p.def().Kind == rpn.ProbeWatch }

// watching reports whether any watch probe holds a register.
func (e *Engine) watching() bool {
	for _, p := range e.watch.slots {
		if p != nil {
			return true
		}
	}
	return false
}

// slotOf is the register of a watch probe, -1 when it has none.
func (e *Engine) slotOf(p *eprobe) int {
	for i, q := range e.watch.slots {
		if q == p {
			return i
		}
	}
	return -1
}

// watchInsert gives every new watch probe a debug register of its own,
// refusing the probes that cannot have one (the target has none, or all
// four are taken) with the reason. It runs at insert, before placement:
// a watch whose module is not loaded yet keeps its register meanwhile,
// so the fifth is refused at once, never when a library appears.
func (e *Engine) watchInsert(added []*eprobe) {
	w, ok := e.ab.watcher, e.ab.watcher != nil
	for _, p := range added {
		if !isWatch(p) || p.State != StatePending {
			continue
		}
		if !ok {
			p.State, p.Reason = StateRefused, "watch probes need debug registers, which this target does not give"
			continue
		}
		d := p.def()
		if d.Loc.Kind == rpn.LocAbsolute && d.WatchLen != 0 && d.Loc.Addr%uint64(d.WatchLen) != 0 {
			p.State, p.Reason = StateRefused, misaligned(d, d.Loc.Addr)
			continue
		}
		own := w.DebugRegs()
		slot := -1
		for i := range e.watch.slots {
			if e.watch.slots[i] == nil && own[i] == "" {
				slot = i
				break
			}
		}
		if slot < 0 {
			var users []string
			for i := range e.watch.slots {
				if q := e.watch.slots[i]; q != nil {
					users = append(users, fmt.Sprintf("DR%d watch = %s (%s minor %d)", i, q.def().Loc.Text, q.mod.Name, q.def().Minor))
				} else {
					users = append(users, fmt.Sprintf("DR%d %s", i, own[i]))
				}
			}
			p.State, p.Reason = StateRefused, fmt.Sprintf(noRegister+"%s: a target has four, for watches and debug-register breakpoints together, and all are in use (%s); remove one", d.Loc.Text, strings.Join(users, "; "))
			continue
		}
		e.watch.slots[slot] = p
	}
}

// noRegister starts the reason of a watch refused for want of a register.
const noRegister = "no debug register left for watch = "

// watchSettle runs after an insert has placed its probes: a watch refused
// for want of a register gets one that a watch of the same insert, refused
// at placement (its address unaligned, say), gave back. Without it, which
// watch is refused would depend on the order of the module's probes.
func (e *Engine) watchSettle(s *pb.Source, added []*eprobe) {
	for _, p := range added {
		if !isWatch(p) || p.State != StateRefused || !strings.HasPrefix(p.Reason, noRegister) {
			continue
		}
		p.State, p.Reason = StatePending, ""
		e.watchInsert([]*eprobe{p})
		if e.slotOf(p) < 0 {
			continue
		}
		for _, id := range e.sortedSpaces() {
			if sp := e.spaces[id]; !sp.detached {
				e.placeModule(sp, s, []*eprobe{p})
			}
		}
	}
}

func misaligned(d *rpn.Probe, addr uint64) string {
	return fmt.Sprintf("watch = %s: address %#x is not a multiple of its length %d (a debug register watches an aligned range: watch the aligned bytes around it)", d.Loc.Text, addr, d.WatchLen)
}

// placeWatch resolves a watch probe's address in one space and programs
// its debug register there.
func (e *Engine) placeWatch(sp *space, inst *instance, p *eprobe) {
	if _, ok := p.in[sp.id]; ok {
		return
	}
	slot := e.slotOf(p)
	if slot < 0 {
		return // refused at insert
	}
	d := inst.def(p)
	refuse := func(format string, args ...any) {
		if len(p.in) == 0 {
			// in no space: refused for good, and its register is free
			// for another watch (watchSettle)
			p.State, p.Reason = StateRefused, fmt.Sprintf(format, args...)
			e.watchRemoved(p)
		}
	}
	link, err := e.linkAddr(d, inst)
	if err != nil {
		refuse("%v", err)
		return
	}
	addr := link + inst.bias
	p.Addr = addr
	if addr%uint64(d.WatchLen) != 0 {
		refuse("%s", misaligned(d, addr))
		return
	}
	if e.os.Kernel() && addr < 1<<63 {
		// a guest's debug registers would fire in whichever process
		// uses that user address, and Xen hands a user-mode #DB to the
		// guest kernel, which would signal the process
		refuse("watch = %s: %#x is not a kernel address: a guest kernel's watch watches kernel memory", d.Loc.Text, addr)
		return
	}
	buf := make([]byte, d.WatchLen)
	if err := e.tgt.ReadMem(sp.id, addr, buf); err != nil {
		refuse("watch = %s: nothing is mapped at %#x: %v", d.Loc.Text, addr, err)
		return
	}
	w := Watch{Addr: addr, Len: int(d.WatchLen), Mode: d.WatchMode}
	if err := e.setWatch(sp.id, slot, w); err != nil {
		refuse("watch = %s: debug register DR%d: %v", d.Loc.Text, slot, err)
		return
	}
	p.in[sp.id] = addr
	p.State, p.Reason = StateActive, ""
	p.How = fmt.Sprintf("watch DR%d", slot)
}

// unplaceWatch turns a watch probe's register off in one space.
func (e *Engine) unplaceWatch(sp *space, p *eprobe) error {
	slot := e.slotOf(p)
	if sp == nil || sp.detached || slot < 0 {
		return nil
	}
	if err := e.clearWatch(sp.id, slot); err != nil {
		return fmt.Errorf("turn debug register DR%d (watch = %s) off: %w", slot, p.def().Loc.Text, err)
	}
	return nil
}

// watchRemoved gives a removed watch probe's register back.
func (e *Engine) watchRemoved(p *eprobe) {
	if i := e.slotOf(p); i >= 0 {
		e.watch.slots[i] = nil
	}
}

// takeOutWatches turns every register of a space off (detach): a process
// keeps its debug registers after PTRACE_DETACH, and would die of the
// next hit's SIGTRAP.
func (e *Engine) takeOutWatches(sp *space) error {
	var errs []string
	for _, p := range e.watch.slots {
		if p == nil {
			continue
		}
		if _, in := p.in[sp.id]; !in {
			continue
		}
		if err := e.unplaceWatch(sp, p); err != nil {
			errs = append(errs, err.Error())
		}
		delete(p.in, sp.id)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// watchThread gives a new thread its space's watches.
func (e *Engine) watchThread(tid, spID int) {
	if !e.watching() {
		return
	}
	if w := e.ab.watcher; w != nil {
		e.fail(w.WatchThread(tid, spID), "debug registers of new thread %d (its watches would not fire)", tid)
	}
}

// watchForked gives a fork child its parent's watches: its memory is a
// copy, and the kernel gives the child's thread no debug registers.
func (e *Engine) watchForked(child, parent int) {
	sp := e.spaces[child]
	for slot, p := range e.watch.slots {
		if p == nil {
			continue
		}
		addr, in := p.in[parent]
		if !in || sp == nil {
			continue
		}
		d := p.def()
		w := Watch{Addr: addr, Len: int(d.WatchLen), Mode: d.WatchMode}
		if err := e.setWatch(child, slot, w); err != nil {
			e.warn(fmt.Sprintf("watch = %s in child %d: debug register DR%d: %v", d.Loc.Text, child, slot, err))
			continue
		}
		p.in[child] = addr
	}
}

// watchGone forgets the watches of a space whose image is gone (exec,
// exit): the kernel cleared its debug registers. After exec they go in
// again where their module is.
func (e *Engine) watchGone(id int) {
	for _, p := range e.watch.slots {
		if p == nil {
			continue
		}
		if _, in := p.in[id]; !in {
			continue
		}
		delete(p.in, id)
		if len(p.in) == 0 && p.State == StateActive {
			p.State = StatePending
		}
	}
}

// watchUnmapped turns off the watches of a module no longer loaded as it
// was in a space (dlclose): their addresses may hold anything now.
func (e *Engine) watchUnmapped(sp *space, src *rpn.Module) {
	for _, p := range e.watch.slots {
		if p == nil || p.src != src {
			continue
		}
		if _, in := p.in[sp.id]; !in {
			continue
		}
		if err := e.unplaceWatch(sp, p); err != nil {
			e.warn(err.Error())
		}
		delete(p.in, sp.id)
		if len(p.in) == 0 && p.State == StateActive {
			p.State = StatePending
		}
	}
}

// watchTrap handles the watch part of a trap: it asks the target which
// registers fired and runs their probes. A stop that was a watch alone
// is finished here (commit, resume) and it reports true; a watch during
// an out-of-line step leaves its records to the step's commit; a watch
// with another reason (a code breakpoint) commits and leaves the rest to
// the usual path.
func (e *Engine) watchTrap(th *thread) bool {
	if !e.watching() {
		return false
	}
	w, ok := e.ab.watcher, e.ab.watcher != nil
	if !ok {
		return false
	}
	fired, other, err := w.WatchHit(th.tid)
	if err != nil || fired == 0 {
		return false
	}
	fired = e.watchImplied(th.space, fired)
	if err := e.tgt.GetRegs(th.tid, &th.regs); err != nil {
		return false
	}
	real := th.regs
	next, mine, moved := e.watchNext(th)
	if !mine {
		// a probe program's own access, in a jump pad: not the
		// program's, not counted
		if !other && th.step == nil {
			e.resume(th.tid, 0)
			return true
		}
		return false
	}
	th.regs[rpn.RegRIP] = next
	given := th.regs
	recs := e.runWatches(th, fired, nil)
	changed := th.regs != given
	if moved || th.step != nil || other {
		// registers belong to a pad, a slot or the stop's other handler
		if changed {
			e.warn(fmt.Sprintf("thread %d: a watch probe's register writes are dropped: the thread was in gprobes' code (a pad or an out-of-line step) or stopped for a breakpoint too", th.tid))
		}
		th.regs = real
	}
	if th.step != nil {
		for _, r := range recs {
			th.step.recs = append(th.step.recs, r)
			th.step.keepOnFault = append(th.step.keepOnFault, true) // the access completed
		}
		return false
	}
	if other {
		e.commitAll(th, recs)
		sp := e.spaces[th.space]
		return sp != nil && sp.detached // exit 4: left stopped
	}
	if changed {
		e.fail(e.tgt.SetRegs(th.tid, &th.regs), "write thread %d's registers as its watch probe left them", th.tid)
	}
	e.commitAll(th, recs)
	if sp := e.spaces[th.space]; sp != nil && sp.detached {
		return true // exit 4: left stopped
	}
	e.resume(th.tid, 0)
	return true
}

// watchImplied adds to the registers that fired the rw watches covering
// every byte of a w watch that fired: that access was a write into their
// bytes too. A CPU sets the DR6 bit of each register whose condition was
// met, and this changes nothing; QEMU's emulation of x86 (TCG: the Xen
// lab's guests) sets only the first matching register's, and the xen
// backend orders the registers w before rw so that the first is the w one.
func (e *Engine) watchImplied(space int, fired uint8) uint8 {
	for i, p := range e.watch.slots {
		if p == nil || fired&(1<<i) == 0 || p.def().WatchMode != rpn.WatchWrite {
			continue
		}
		a, in := p.in[space]
		if !in {
			continue
		}
		for j, q := range e.watch.slots {
			if q == nil || q.def().WatchMode != rpn.WatchReadWrite {
				continue
			}
			if b, in := q.in[space]; in && b <= a && a+uint64(p.def().WatchLen) <= b+uint64(q.def().WatchLen) {
				fired |= 1 << j
			}
		}
	}
	return fired
}

// watchNext is the address of the instruction after the one that made
// the access, as a watch probe's push r,rip reads it: the thread's rip,
// except in gprobes' own code. In an out-of-line slot it is the original
// instruction's next; in a jump pad, the next of the covered instruction
// that made it (moved): rip is right after a relocated covered
// instruction (a trap follows the instruction), or inside the last one's
// code when it transfers control (a call pushes in two steps). Anywhere
// else in a pad the access was the pad's own, a probe program's or its
// commit's (mine false).
func (e *Engine) watchNext(th *thread) (next uint64, mine, moved bool) {
	rip := th.regs[rpn.RegRIP]
	if st := th.step; st != nil && st.bp.slot != 0 && rip == st.bp.slot+uint64(st.bp.insn.Len) {
		return st.bp.addr + uint64(st.bp.insn.Len), true, true
	}
	sp := e.spaces[th.space]
	if sp == nil || sp.jump == nil {
		return rip, true, false
	}
	bp := sp.padAt(rip - 1)
	if bp == nil {
		return rip, true, false
	}
	origNext := func(orig uint64) uint64 {
		for _, in := range bp.site.plan.Covered {
			if in.Addr == orig {
				return orig + uint64(in.Len)
			}
		}
		return orig
	}
	for at, orig := range bp.p.Displaced {
		if at == bp.p.Final && rip > at && rip <= bp.p.FinalEnd {
			return origNext(orig), true, true
		}
		var code [16]byte
		if at >= rip || e.tgt.ReadMem(th.space, at, code[:]) != nil {
			continue
		}
		if in, err := x86.Decode(code[:], at, 64); err == nil && at+uint64(in.Len) == rip {
			return origNext(orig), true, true
		}
	}
	return rip, false, true
}

// runWatches runs the probes of the registers that fired, in register
// order, and returns their records (exceptions committed at once).
func (e *Engine) runWatches(th *thread, fired uint8, recs []Record) []Record {
	sp := e.spaces[th.space]
	if sp == nil {
		return recs
	}
	th.env.now = time.Now()
	th.env.sysHave = 0
	e.gvLock.Lock()
	defer e.gvLock.Unlock()
	for slot, p := range e.watch.slots {
		if p == nil || fired&(1<<slot) == 0 || p.State != StateActive {
			continue
		}
		addr, in := p.in[th.space]
		inst := sp.inst[p.src]
		if !in || inst == nil {
			continue
		}
		r := e.runProbe(th, inst, p)
		if r == nil {
			continue // switched off (switch.go)
		}
		rec := e.record(th, p, addr, r)
		switch {
		case r.Outcome == rpn.OutcomeException:
			e.commit(&rec)
		case r.Commits():
			rec.KeepOnFault = true // the access has completed
			recs = append(recs, rec)
		}
	}
	return recs
}

// watchedMem is the memory the x86 emulator runs a displaced instruction
// on, noting what it touched: an emulated access is the program's, but no
// debug register sees it.
type watchedMem struct {
	x86.Mem
	n   int
	acc [2]struct {
		addr  uint64
		size  int
		write bool
	}
}

func (m *watchedMem) note(addr uint64, size int, write bool) {
	if m.n < len(m.acc) {
		m.acc[m.n].addr, m.acc[m.n].size, m.acc[m.n].write = addr, size, write
		m.n++
	}
}

func (m *watchedMem) Read(addr uint64, p []byte) bool {
	m.note(addr, len(p), false)
	return m.Mem.Read(addr, p)
}

func (m *watchedMem) Write(addr uint64, p []byte) bool {
	m.note(addr, len(p), true)
	return m.Mem.Write(addr, p)
}

// watchMem wraps the emulator's memory when watches are in, nil otherwise.
func (e *Engine) watchMem(th *thread, m x86.Mem) *watchedMem {
	if !e.watching() {
		return nil
	}
	return &watchedMem{Mem: m}
}

// watchEmulated runs the watch probes an emulated instruction's accesses
// hit, as its debug registers would have (th.regs are after the
// instruction: rip is the next one), appending their records to recs.
func (e *Engine) watchEmulated(th *thread, m *watchedMem, recs []Record) []Record {
	if m == nil || m.n == 0 {
		return recs
	}
	var fired uint8
	for slot, p := range e.watch.slots {
		if p == nil {
			continue
		}
		addr, in := p.in[th.space]
		if !in {
			continue
		}
		d := p.def()
		for _, a := range m.acc[:m.n] {
			if (a.write || d.WatchMode == rpn.WatchReadWrite) && a.addr < addr+uint64(d.WatchLen) && addr < a.addr+uint64(a.size) {
				fired |= 1 << slot
			}
		}
	}
	if fired == 0 {
		return recs
	}
	real := th.regs
	recs = e.runWatches(th, fired, recs)
	if th.regs != real {
		e.warn(fmt.Sprintf("thread %d: a watch probe's register writes are dropped: its access was an instruction gprobes emulated for a probe", th.tid))
		th.regs = real
	}
	return recs
}

// watchStepped runs the watch probes of a step in place (a guest's
// displaced instruction stepped with its breakpoint out), appending their
// records to the step's.
func (e *Engine) watchStepped(th *thread, recs []Record) []Record {
	if !e.watching() {
		return recs
	}
	w, ok := e.ab.watcher, e.ab.watcher != nil
	if !ok {
		return recs
	}
	fired, _, err := w.WatchHit(th.tid)
	if err != nil || fired == 0 {
		return recs
	}
	fired = e.watchImplied(th.space, fired)
	var saved Regs
	if e.tgt.GetRegs(th.tid, &saved) != nil {
		return recs
	}
	th.regs = saved
	recs = e.runWatches(th, fired, recs)
	th.regs = saved
	return recs
}
