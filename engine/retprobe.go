package engine

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strings"

	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/x86"
)

// Return probes (retprobe = SYMBOL) and instance variables (push iv, pop
// iv) on the engine's targets: processes, guest kernels through a GDB
// stub, Xen. docs/engine.md, "Return probes", is the whole story; in
// short:
//
//   - No return address is ever rewritten (that is what breaks Go under
//     uretprobes: bcc#1320, golang/go#22008). The function is decoded from
//     its first byte to its end (its ELF size, or the next symbol) and
//     gets a breakpoint at its entry and at each of its exits: every ret,
//     every jmp/jcc out of its body (a tail call, a return thunk, a .cold
//     part) and every indirect jmp.
//   - The entry breakpoint records a call instance: who (a thread; a
//     goroutine in Go code; the kernel stack in a guest), where (rsp at
//     entry, which points at the return address), its 8 instance
//     variables. A ret of the function with the same owner and the same
//     rsp is that call's return, under recursion too; the ret is emulated
//     and the return probes run with the registers after it (rip the
//     return address, rsp 8 higher, rax the return value).
//   - A call that leaves the body otherwise (a tail call) is caught at its
//     return address in the caller, a breakpoint planted when a call first
//     leaves that way ("caller" sites), with the registers after the
//     return as well.
//   - Instances are bounded (maxactive per owner, calls beyond counted as
//     missed) and never leak: a return or an entry at a higher (or the
//     same) stack position drops the deeper ones (longjmp, exceptions,
//     a goroutine that panicked), and a thread's exit drops its own, each
//     counted as dropped.

const (
	// maxCalls bounds the instances of one tracker in one space, over
	// every owner: goroutines that ended with calls in flight leave
	// instances no thread exit takes away. Past it the oldest go,
	// counted as dropped.
	maxCalls = 1 << 16
	// kernelStackBlock is the granule of a guest kernel's stacks (task
	// stacks are THREAD_SIZE, 16 KiB, and aligned to it; the IRQ stack
	// is 16 KiB too): instances of one kernel stack are ordered by rsp,
	// whatever vCPU or task runs on it.
	kernelStackBlock = 16 << 10
)

// siteKind is what a breakpoint address means to a return probe.
type siteKind uint8

const (
	siteEntry     siteKind = iota + 1 // the function's first instruction: a call begins
	siteRet                           // a ret of the function: emulated, then the return probes run
	siteThunk                         // a jmp/jcc to a return thunk (jmp __x86_return_thunk): a return, the jump runs as it is
	siteOut                           // a jmp/jcc out of the body or an indirect jmp: the call may leave the body
	siteMorestack                     // Go: a call of runtime.morestack, after which the call starts again at the entry
	siteCaller                        // a return address in a caller: calls that left the body return here
)

var siteNames = [...]string{siteEntry: "entry", siteRet: "ret", siteThunk: "return thunk", siteOut: "jump out", siteMorestack: "morestack", siteCaller: "caller"}

// retSite is one meaning of one breakpoint address for one function.
type retSite struct {
	fn     *retFunc
	kind   siteKind
	target uint64 // siteThunk: the thunk
}

// spaceCalls is what a space holds for return probes.
type spaceCalls struct {
	funcs map[uint64]*retFunc  // by entry address
	sites map[uint64][]retSite // by breakpoint address
}

// retFunc is one probed function in one space: its breakpoints and, per
// module, the calls tracked.
type retFunc struct {
	entry, end uint64
	name       string
	goCode     bool
	addrs      []uint64 // every breakpoint address it uses
	entryIn    bool     // the entry has a breakpoint (some tracker needs it)
	callers    map[uint64]bool
	nret       int // rets and return thunks
	nthunk     int // return thunks
	nout       int // jumps out and indirect jumps
	trackers   []*callTracker
	// pads: the rets on jump pads (retjump.go), to their jump site's
	// address; padWhy: why a ret is not; padsOff: why none may be
	pads    map[uint64]uint64
	padWhy  map[uint64]string
	padsOff string
}

// callTracker is the calls of one function tracked for one module (whose
// offset probes at the function's entry share their instance variables)
// in one space.
type callTracker struct {
	fn     *retFunc
	mod    *Module
	probes []*eprobe // the module's retprobes on the function
	limit  int       // the highest maxactive of probes
	// entry: its calls are tracked from their entry (below); without,
	// every return of the function runs the probes, and no call is
	// tracked, missed or dropped
	entry  bool
	stacks map[callOwner][]*callInst
	n      int
	seq    uint64
}

// callOwner is whose stack a call is on.
type callOwner struct {
	kind uint8 // ownThread, ownG, ownStack
	id   uint64
}

const (
	ownThread = iota + 1 // a thread of a process (its tid)
	ownG                 // a goroutine (its g)
	ownStack             // a guest kernel's stack (its 16 KiB block)
)

// callInst is one call of a function in flight.
type callInst struct {
	pos     uint64 // where on its owner's stack: deeper calls have lower positions
	depth   int    // calls of its owner tracked when it began: probes with a lower maxactive missed it
	seq     uint64
	restart bool // Go: runtime.morestack called; the next entry at pos is this call again
	iv      [rpn.MaxIV]uint64
}

// where is a thread's stack at a hit, as instances are keyed.
type where struct {
	key callOwner
	pos uint64
	hi  uint64 // ownG: the goroutine stack's top
}

// rsp is the stack pointer a position stands for now (a goroutine's
// stack moves when it grows).
func (w where) rsp(pos uint64) uint64 {
	if w.key.kind == ownG {
		return w.hi - (1<<63 - pos)
	}
	return pos
}

// whereOf keys a stack pointer of a thread at a hit. Go code: the
// goroutine in r14 (Go's register ABI keeps g there), checked against its
// stack bounds, and the distance from the stack's top, which the runtime
// keeps when it moves the stack; a guest kernel: the stack block, whatever
// task or vCPU runs on it; otherwise the thread.
func (e *Engine) whereOf(th *thread, fn *retFunc, rsp uint64) where {
	switch {
	case e.os.Kernel():
		return where{key: callOwner{ownStack, rsp &^ (kernelStackBlock - 1)}, pos: rsp}
	case fn.goCode:
		g := th.regs[rpn.RegR14]
		var b [16]byte
		if g != 0 && e.tgt.ReadMem(th.space, g, b[:]) == nil {
			lo, hi := binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint64(b[8:])
			if lo < rsp && rsp <= hi && hi-lo <= 1<<30 {
				return where{key: callOwner{ownG, g}, pos: 1<<63 - (hi - rsp), hi: hi}
			}
		}
	}
	return where{key: callOwner{ownThread, uint64(th.tid)}, pos: rsp}
}

// calls returns the space's return-probe state, creating it.
func (sp *space) callsState() *spaceCalls {
	if sp.calls == nil {
		sp.calls = &spaceCalls{funcs: map[uint64]*retFunc{}, sites: map[uint64][]retSite{}}
	}
	return sp.calls
}

// placeRetprobe resolves a retprobe's function in one space, decodes it,
// plants its breakpoints and starts tracking its calls.
func (e *Engine) placeRetprobe(sp *space, inst *instance, p *eprobe) {
	if _, ok := p.in[sp.id]; ok {
		return
	}
	d := inst.def(p)
	refuse := func(format string, args ...any) {
		if len(p.in) == 0 {
			p.State, p.Reason = StateRefused, fmt.Sprintf(format, args...)
		}
	}
	link, err := e.linkAddr(d, inst)
	if err != nil {
		refuse("%v", err)
		return
	}
	addr := link + inst.bias
	p.Addr = addr
	if inst.ld.Exec != nil && !inst.ld.Exec(addr) {
		refuse("%#x (%s) is not in an executable mapping of %s", addr, d.Loc.Text, inst.key)
		return
	}
	calls := sp.callsState()
	fn := calls.funcs[addr]
	if fn == nil {
		fn, err = e.newRetFunc(sp, inst, link, addr, p)
		if err != nil {
			refuse("retprobe = %s: %v", d.Loc.Text, err)
			return
		}
	}
	if d.HasOpcode {
		if bp := sp.bps[addr]; bp != nil && bp.insn.Bytes[0] != d.Opcode {
			refuse("the byte at %#x is %#02x, the probe expects opcode %#02x", addr, bp.insn.Bytes[0], d.Opcode)
			if len(fn.trackers) == 0 {
				e.dropRetFunc(sp, fn)
			}
			return
		}
	}
	var t *callTracker
	for _, x := range fn.trackers {
		if x.mod == p.mod {
			t = x
		}
	}
	if t == nil {
		t = &callTracker{fn: fn, mod: p.mod, stacks: map[callOwner][]*callInst{}}
		fn.trackers = append(fn.trackers, t)
	}
	if !t.entry && (needsEntry(p) || fn.nout > 0) && !fn.entryIn {
		if len(fn.pads) > 0 {
			// its calls are tracked from now on: every return seen
			// where the entry's instance is found, on the int3 route
			if err := e.retPadsOff(sp, fn, fmt.Sprintf("a return probe of module %s on it reads instance variables or sets maxactive: its calls are tracked from the entry, on the int3 route", p.mod.Name)); err != nil {
				refuse("retprobe = %s: the jump pads of its returns could not make way for int3s: %v", d.Loc.Text, err)
				if len(t.probes) == 0 {
					fn.trackers = fn.trackers[:len(fn.trackers)-1]
				}
				return
			}
		}
		if err := e.plantEntry(sp, fn); err != nil {
			refuse("retprobe = %s: %v", d.Loc.Text, err)
			if len(t.probes) == 0 {
				fn.trackers = fn.trackers[:len(fn.trackers)-1]
			}
			if len(fn.trackers) == 0 {
				e.dropRetFunc(sp, fn)
			}
			return
		}
	}
	t.entry = t.entry || needsEntry(p) || fn.nout > 0
	t.probes = append(t.probes, p)
	t.limit = max(t.limit, int(d.ActiveLimit()))
	for _, a := range fn.addrs {
		if bp := sp.bps[a]; bp != nil {
			bp.probes = append(bp.probes, p)
		}
	}
	p.in[sp.id] = addr
	p.State, p.Reason = StateActive, ""
	if len(fn.pads) > 0 && !samePadProbes(sp, fn) {
		e.retPadsRebuild(sp, fn) // with this probe too
	}
	e.retHow(fn)
}

// samePadProbes reports whether fn's pads run every return probe on fn
// already (a new function's pads were built with its first probe).
func samePadProbes(sp *space, fn *retFunc) bool {
	want := retProbesOf(fn)
	for ret := range fn.pads {
		site := sp.retPadSite(fn, ret)
		if site == nil || len(site.probes) != len(want) {
			return false
		}
		for i := range want {
			if site.probes[i] != want[i] {
				return false
			}
		}
	}
	return true
}

// needsEntry reports whether a return probe needs its calls tracked from
// their entry: it reads the call's instance variables, or bounds the
// calls by a maxactive of its own. Otherwise it runs at every return of
// the function, one stop a call instead of two (as Beyla's probes on Go's
// RET instructions do), unless the function can be left by a jump (a
// tail call: its return is found from the call's entry).
func needsEntry(p *eprobe) bool {
	d := p.def()
	if d.MaxActive != 0 {
		return true
	}
	m := p.src
	for pc := d.Entry; pc < d.End && int(pc) < len(m.Code); {
		op := rpn.Opcode(m.Code[pc])
		if op == rpn.OpPushIV || op == rpn.OpPopIV {
			return true
		}
		pc += uint32(max(op.Len(), 1))
	}
	return false
}

// plantEntry puts the breakpoint on a function's entry, with its probes.
func (e *Engine) plantEntry(sp *space, fn *retFunc) error {
	if err := e.ensureSite(sp, fn.entry); err != nil {
		return err
	}
	fn.entryIn = true
	fn.addrs = append(fn.addrs, fn.entry)
	sp.calls.sites[fn.entry] = append(sp.calls.sites[fn.entry], retSite{fn: fn, kind: siteEntry})
	bp := sp.bps[fn.entry]
	for _, t := range fn.trackers {
		bp.probes = append(bp.probes, t.probes...)
	}
	return nil
}

// howText is query's HOW of a function's return probes.
func (fn *retFunc) howText(e *Engine) string {
	s := fmt.Sprintf("ret: %d %s, no entry stop", fn.nret, plural(fn.nret, "return"))
	if fn.entryIn {
		s = fmt.Sprintf("ret: entry and %d %s", fn.nret, plural(fn.nret, "return"))
	}
	if fn.nthunk > 0 {
		s += fmt.Sprintf(" (%d by a jump to a return thunk)", fn.nthunk)
	}
	if fn.nout > 0 {
		s += fmt.Sprintf(", %d %s out", fn.nout, plural(fn.nout, "jump"))
	}
	if e.ab.jump != nil && !e.os.Kernel() && e.opts.Route != RouteInt3 {
		return fn.padHow(s)
	}
	return s
}

func plural(n int, s string) string {
	if n == 1 {
		return s
	}
	return s + "s"
}

// newRetFunc decodes the function that starts at addr (link-time link)
// and plants its breakpoints.
func (e *Engine) newRetFunc(sp *space, inst *instance, link, addr uint64, p *eprobe) (*retFunc, error) {
	set := inst.ld.Symbols
	if set == nil {
		return nil, fmt.Errorf("no symbols: the function's end cannot be known")
	}
	sym, ok := set.SymbolAt(link)
	if !ok || sym.Addr != link {
		s, off, found := set.Nearest(link)
		switch {
		case !found:
			return nil, fmt.Errorf("no symbol at or before %#x", addr)
		case off != 0:
			return nil, fmt.Errorf("%#x is %s+%#x: a return probe names a function's first instruction", addr, s.Name, off)
		}
		sym = s
		if !ok || sym.Addr != link {
			sym.Size = 0 // a sized function ends before it: up to the next symbol
		}
	}
	size := sym.Size
	if size == 0 {
		// System.map, kallsyms: up to the next symbol
		next, ok := set.Next(link)
		if !ok {
			return nil, fmt.Errorf("%s has no size and no symbol follows it: its end cannot be known", sym.Name)
		}
		size = next.Addr - link
	}
	if size > 1<<20 {
		return nil, fmt.Errorf("%s is %d bytes long: more than a function (1 MiB)", sym.Name, size)
	}
	code := make([]byte, size)
	if err := e.readOriginal(sp, addr, code); err != nil {
		return nil, fmt.Errorf("read %s: %v", sym.Name, err)
	}
	exits, err := x86.FunctionExits(code, addr, 64)
	if err != nil {
		return nil, fmt.Errorf("decode %s to find its returns: %v", sym.Name, err)
	}
	fn := &retFunc{entry: addr, end: addr + size, name: sym.Name, callers: map[uint64]bool{}, pads: map[uint64]uint64{}, padWhy: map[uint64]string{}}
	fn.goCode = !e.os.Kernel() && isGo(set)
	type want struct {
		addr uint64
		site retSite
	}
	var wants []want // the entry goes in when a probe needs it (plantEntry)
	for _, x := range exits {
		s := retSite{fn: fn}
		switch x.Kind {
		case x86.ExitRet:
			s.kind = siteRet
			fn.nret++
		case x86.ExitJump:
			if e.isReturnThunk(sp, x.Target) {
				s.kind, s.target = siteThunk, x.Target
				fn.nret++
				fn.nthunk++
			} else {
				s.kind = siteOut
				fn.nout++
			}
		case x86.ExitIndirect:
			s.kind = siteOut
			fn.nout++
		case x86.ExitCall:
			if !fn.goCode {
				continue
			}
			if t, ok := set.SymbolAt(x.Target - inst.bias); !ok || !strings.HasPrefix(t.Name, "runtime.morestack") {
				continue
			}
			s.kind = siteMorestack
		}
		wants = append(wants, want{x.Addr, s})
	}
	if fn.nret == 0 && fn.nout == 0 {
		return nil, fmt.Errorf("%s has no return: no ret and no jump out of its %d bytes (a function that never returns)", sym.Name, size)
	}
	// the rets on jump pads where they can be (retjump.go)
	sp.calls.funcs[addr] = fn // seen by the pads' books while they go in
	why, none := e.retPadsWhy(fn, []*eprobe{p})
	fn.padsOff = why
	for _, w := range wants {
		if w.site.kind == siteRet && !none && why == "" {
			if pwhy := e.retPadTry(sp, inst, fn, code, w.addr, []*eprobe{p}); pwhy == "" {
				fn.addrs = append(fn.addrs, w.addr)
				sp.calls.sites[w.addr] = append(sp.calls.sites[w.addr], w.site)
				continue
			} else {
				fn.padWhy[w.addr] = pwhy
			}
		}
		if err := e.ensureSite(sp, w.addr); err != nil {
			e.dropSites(sp, fn)
			delete(sp.calls.funcs, addr)
			return nil, err
		}
		fn.addrs = append(fn.addrs, w.addr)
		sp.calls.sites[w.addr] = append(sp.calls.sites[w.addr], w.site)
	}
	sp.calls.funcs[addr] = fn
	return fn, nil
}

// isReturnThunk reports whether a jump target is a return thunk: code
// whose first instruction is a ret (__x86_return_thunk as a kernel
// without the return mitigations patches it), so that a jump there is a
// return.
func (e *Engine) isReturnThunk(sp *space, target uint64) bool {
	var b [16]byte
	if e.readOriginal(sp, target, b[:]) != nil {
		return false
	}
	return x86.IsRet(b[:])
}

// ensureSite makes sure a breakpoint of the engine's is at addr: an offset
// probe's or another function's is shared; a jump pad covering addr moves
// to an int3.
func (e *Engine) ensureSite(sp *space, addr uint64) error {
	if sp.jump != nil {
		if site := sp.jump.sites[addr]; site != nil {
			if err := e.moveToInt3(sp, addr, "a return probe's breakpoint is at this address"); err != nil {
				return fmt.Errorf("the jump pad at %#x could not make way for a return probe's int3: %v", addr, err)
			}
		} else if site := e.jumpCovering(sp, addr); site != nil {
			if err := e.moveToInt3(sp, site.addr, fmt.Sprintf("a return probe's breakpoint (at %#x) is inside the bytes its jump would cover", addr)); err != nil {
				return fmt.Errorf("the jump pad at %#x could not make way for a return probe's int3: %v", site.addr, err)
			}
		}
	}
	if sp.bps[addr] != nil {
		return nil
	}
	code := make([]byte, 16)
	if err := e.readOriginal(sp, addr, code); err != nil {
		return fmt.Errorf("read the code at %#x: %v", addr, err)
	}
	insn, err := e.decode(code, addr)
	if err != nil {
		return fmt.Errorf("decode the instruction at %#x: %v", addr, err)
	}
	if insn.Class == x86.Refuse {
		return fmt.Errorf("cannot put a breakpoint on `%s` at %#x: %s", insn.String(), addr, insn.Why)
	}
	bp := &breakpoint{addr: addr, insn: insn}
	if err := e.prepareSlot(sp, bp); err != nil && insn.Class != x86.Emulate && insn.Class != x86.Branch && !isNoXOL(err) {
		return err
	}
	return e.plant(sp, bp)
}

func isNoXOL(err error) bool { return err == ErrNoXOL }

// dropSites takes a function's breakpoints out where nothing else uses
// them, and forgets the function.
func (e *Engine) dropSites(sp *space, fn *retFunc) {
	e.retPadsDrop(sp, fn)
	calls := sp.calls
	for _, a := range fn.addrs {
		keep := calls.sites[a][:0]
		for _, s := range calls.sites[a] {
			if s.fn != fn {
				keep = append(keep, s)
			}
		}
		if len(keep) == 0 {
			delete(calls.sites, a)
		} else {
			calls.sites[a] = keep
		}
		if bp := sp.bps[a]; bp != nil && len(bp.probes) == 0 && bp.internal == nil && calls.sites[a] == nil {
			if err := e.takeOut(sp, a); err != nil {
				e.warn(err.Error())
			}
		}
	}
	if calls.funcs[fn.entry] == fn {
		delete(calls.funcs, fn.entry)
	}
}

func (e *Engine) dropRetFunc(sp *space, fn *retFunc) { e.dropSites(sp, fn) }

// unplaceRet takes a retprobe out of a space: off its function's
// breakpoints, out of its tracker (whose calls in flight are forgotten
// with the last probe), and the breakpoints out when nothing else is
// there.
func (e *Engine) unplaceRet(sp *space, p *eprobe) error {
	if sp == nil || sp.calls == nil {
		return nil
	}
	fn := sp.calls.funcs[p.in[sp.id]]
	if fn == nil {
		return nil
	}
	for i, t := range fn.trackers {
		j := -1
		for k, q := range t.probes {
			if q == p {
				j = k
			}
		}
		if j < 0 {
			continue
		}
		t.probes = append(t.probes[:j], t.probes[j+1:]...)
		if len(t.probes) == 0 {
			fn.trackers = append(fn.trackers[:i], fn.trackers[i+1:]...)
			break
		}
		t.limit = 0
		for _, q := range t.probes {
			t.limit = max(t.limit, int(q.def().ActiveLimit()))
		}
		break
	}
	for _, a := range fn.addrs {
		if bp := sp.bps[a]; bp != nil {
			for i, q := range bp.probes {
				if q == p {
					bp.probes = append(bp.probes[:i], bp.probes[i+1:]...)
					break
				}
			}
		}
	}
	if len(fn.trackers) == 0 {
		e.dropSites(sp, fn)
	} else if len(fn.pads) > 0 {
		e.retPadsRebuild(sp, fn) // without it
	} else {
		e.retHow(fn)
	}
	return nil
}

// ensureCaller watches a return address for calls of fn that left its
// body: a breakpoint there (kept while fn is probed), with fn's probes on
// it.
func (e *Engine) ensureCaller(sp *space, fn *retFunc, addr uint64) {
	if fn.callers[addr] {
		return
	}
	if err := e.ensureSite(sp, addr); err != nil {
		e.warn(fmt.Sprintf("return probe on %s: a call left it by a jump and returns to %#x, where no breakpoint can go (%v): its return is not seen", fn.name, addr, err))
		fn.callers[addr] = true // said once
		return
	}
	fn.callers[addr] = true
	fn.addrs = append(fn.addrs, addr)
	sp.calls.sites[addr] = append(sp.calls.sites[addr], retSite{fn: fn, kind: siteCaller})
	bp := sp.bps[addr]
	for _, t := range fn.trackers {
		bp.probes = append(bp.probes, t.probes...)
	}
}

// --- hits ---

// callEntries is what the entry of calls at one hit gives the offset
// probes there: the instance variables of the call, per module.
type callEntries struct {
	n    int
	mods [4]*Module
	ivs  [4]*[rpn.MaxIV]uint64
}

// ivOf points a thread's environment at the instance variables an offset
// probe sees: its module's call that began at this hit, or zeros.
func (c *callEntries) ivOf(h *hitEnv, p *eprobe) {
	h.iv = nil
	for i := 0; i < c.n; i++ {
		if c.mods[i] == p.mod {
			h.iv = c.ivs[i]
			return
		}
	}
}

// IV is the instance variables of the call a hit belongs to (push iv,
// pop iv; rpn.IVEnv): the call's own at a return probe and at an offset
// probe on the entry of a function with a return probe in the same
// module; nil anywhere else, where the machine gives each program 8 zero
// words of its own.
func (h *hitEnv) IV() *[rpn.MaxIV]uint64 { return h.iv }

var _ rpn.IVEnv = (*hitEnv)(nil)

// callsEnter begins the calls of the functions whose entry is addr, before
// the offset probes there run.
func (e *Engine) callsEnter(th *thread, sp *space, addr uint64, c *callEntries) {
	c.n = 0
	if sp.calls == nil {
		return
	}
	fn := sp.calls.funcs[addr]
	if fn == nil {
		return
	}
	w := e.whereOf(th, fn, th.regs[rpn.RegRSP])
	for _, t := range fn.trackers {
		if !t.entry {
			continue
		}
		inst := t.enter(w)
		if inst != nil && c.n < len(c.mods) {
			c.mods[c.n], c.ivs[c.n] = t.mod, &inst.iv
			c.n++
		}
	}
}

// enter begins a call at w: the deeper calls of its owner, and one at the
// same position, are gone (counted as dropped), except a Go call starting
// again after runtime.morestack. It returns nil when maxactive calls of
// the owner are in flight already (counted as missed).
func (t *callTracker) enter(w where) *callInst {
	st := t.stacks[w.key]
	for len(st) > 0 {
		last := st[len(st)-1]
		if last.pos > w.pos {
			break
		}
		if last.pos == w.pos && last.restart {
			last.restart = false
			return last
		}
		t.dropped(last)
		st = st[:len(st)-1]
		t.n--
	}
	if len(st) >= t.limit {
		for _, p := range t.probes {
			p.missed++
		}
		t.setStack(w.key, st)
		return nil
	}
	if t.n >= maxCalls {
		t.evictOldest()
		st = t.stacks[w.key] // it may have been this owner's
	}
	t.seq++
	inst := &callInst{pos: w.pos, depth: len(st), seq: t.seq}
	for _, p := range t.probes {
		if inst.depth >= int(p.def().ActiveLimit()) {
			p.missed++
		}
	}
	t.stacks[w.key] = append(st, inst)
	t.n++
	return inst
}

func (t *callTracker) setStack(k callOwner, st []*callInst) {
	if len(st) == 0 {
		delete(t.stacks, k)
	} else {
		t.stacks[k] = st
	}
}

// dropped counts a call whose return will not be seen for the probes that
// tracked it.
func (t *callTracker) dropped(c *callInst) {
	for _, p := range t.probes {
		if c.depth < int(p.def().ActiveLimit()) {
			p.dropped++
		}
	}
}

// evictOldest drops the oldest call of any owner (maxCalls reached).
func (t *callTracker) evictOldest() {
	var key callOwner
	var at int
	var oldest uint64
	found := false
	for k, st := range t.stacks {
		for i, c := range st {
			if !found || c.seq < oldest {
				key, at, oldest, found = k, i, c.seq, true
			}
		}
	}
	if !found {
		return
	}
	st := t.stacks[key]
	t.dropped(st[at])
	st = append(st[:at], st[at+1:]...)
	t.setStack(key, st)
	t.n--
}

// leave ends the call at w's position, returning it: the deeper calls of
// the owner are gone (counted). nil when no call is there (it began
// before the probe went in, or it was missed).
func (t *callTracker) leave(w where) *callInst {
	st := t.stacks[w.key]
	for len(st) > 0 && st[len(st)-1].pos < w.pos {
		t.dropped(st[len(st)-1])
		st = st[:len(st)-1]
		t.n--
	}
	var c *callInst
	if len(st) > 0 && st[len(st)-1].pos == w.pos {
		c = st[len(st)-1]
		st = st[:len(st)-1]
		t.n--
	}
	t.setStack(w.key, st)
	return c
}

// innermost is the owner's deepest call at or above w (the deeper ones
// are gone, counted).
func (t *callTracker) innermost(w where) *callInst {
	st := t.stacks[w.key]
	for len(st) > 0 && st[len(st)-1].pos < w.pos {
		t.dropped(st[len(st)-1])
		st = st[:len(st)-1]
		t.n--
	}
	t.setStack(w.key, st)
	if len(st) == 0 {
		return nil
	}
	return st[len(st)-1]
}

// dropAll forgets every call of an owner (its thread exited), counting
// them.
func (t *callTracker) dropAll(k callOwner) {
	for _, c := range t.stacks[k] {
		t.dropped(c)
		t.n--
	}
	delete(t.stacks, k)
}

// callsReturn runs the return probes of the calls that return at addr,
// after the offset probes there. At a ret it emulates the ret (the
// thread's registers are then those after it, which the caller of
// callsReturn sees as a program having moved rip); at a caller site the
// registers are after the return already.
func (e *Engine) callsReturn(th *thread, sp *space, bp *breakpoint, addr uint64, recs []Record, keep []bool) ([]Record, []bool) {
	if sp.calls == nil || th.regs[rpn.RegRIP] != addr {
		return recs, keep
	}
	sites := sp.calls.sites[addr]
	if len(sites) == 0 {
		return recs, keep
	}
	rsp := th.regs[rpn.RegRSP]
	var view Regs
	var retAddr uint64
	haveView, returned := false, false
	for _, s := range sites {
		switch s.kind {
		case siteCaller:
			// after the return: rsp is 8 above the return address's slot
			w := e.whereOf(th, s.fn, rsp-8)
			for _, t := range s.fn.trackers {
				if c := t.leave(w); c != nil {
					recs, keep = e.runReturn(th, t, c, recs, keep, true)
				}
			}
		case siteMorestack:
			w := e.whereOf(th, s.fn, rsp)
			for _, t := range s.fn.trackers {
				if !t.entry {
					continue
				}
				if c := t.innermost(w); c != nil && c.pos == w.pos {
					c.restart = true
				}
			}
		case siteOut:
			e.callLeaves(th, sp, bp, s.fn, rsp)
		case siteRet, siteThunk:
			if s.kind == siteThunk && !e.jumpsTo(th, bp, s.target) {
				continue // a jcc not taken
			}
			if !haveView {
				// the registers after the return: rip the return
				// address, rsp above it (and a ret imm16's bytes)
				var ra [8]byte
				if e.tgt.ReadMem(th.space, rsp, ra[:]) != nil {
					continue // the ret faults: the thread takes it as usual
				}
				view = th.regs
				retAddr = binary.LittleEndian.Uint64(ra[:])
				view[rpn.RegRIP] = retAddr
				view[rpn.RegRSP] = rsp + 8
				if b := bp.insn.Bytes; s.kind == siteRet && len(bp.insn.Bytes) >= 3 && b[len(b)-3] == 0xc2 {
					view[rpn.RegRSP] += uint64(binary.LittleEndian.Uint16(b[len(b)-2:]))
				}
				haveView = true
			}
			w := e.whereOf(th, s.fn, rsp)
			for _, t := range s.fn.trackers {
				var c *callInst
				if t.entry {
					if c = t.leave(w); c == nil {
						continue
					}
				}
				saved := th.regs
				th.regs = view
				recs, keep = e.runReturn(th, t, c, recs, keep, false)
				view = th.regs
				th.regs = saved
				returned = true
			}
			if returned && s.kind == siteThunk && view[rpn.RegRIP] == retAddr && view[rpn.RegRSP] == rsp+8 {
				// the programs left rip and rsp: the jump to the thunk
				// runs as it is, with what else they changed
				view[rpn.RegRIP], view[rpn.RegRSP] = addr, rsp
				th.regs = view
				returned = false
			}
		}
	}
	if returned {
		// the ret is done: the thread goes on in the caller
		th.regs = view
	}
	return recs, keep
}

// jumpsTo reports whether the branch at bp, run now, goes to target.
func (e *Engine) jumpsTo(th *thread, bp *breakpoint, target uint64) bool {
	r := th.regs
	if !x86.EmulateBranch(&bp.insn, &r, mem{e, th.space}) {
		return false
	}
	return r[rpn.RegRIP] == target
}

// callLeaves handles a jump out of fn's body (or an indirect jump, which
// may stay in it): when control leaves, the call's return is watched for
// at its return address.
func (e *Engine) callLeaves(th *thread, sp *space, bp *breakpoint, fn *retFunc, rsp uint64) {
	r := th.regs
	var ok bool
	switch bp.insn.Class {
	case x86.Branch:
		ok = x86.EmulateBranch(&bp.insn, &r, mem{e, th.space})
	default:
		ok = x86.EmulateInsn(&bp.insn, &r, mem{e, th.space})
	}
	if !ok {
		return
	}
	if to := r[rpn.RegRIP]; to >= fn.entry && to < fn.end {
		return // a switch, or a jcc not taken
	}
	w := e.whereOf(th, fn, rsp)
	for _, t := range fn.trackers {
		c := t.innermost(w)
		if c == nil {
			continue
		}
		var ra [8]byte
		if e.tgt.ReadMem(th.space, w.rsp(c.pos), ra[:]) != nil {
			continue
		}
		e.ensureCaller(sp, fn, binary.LittleEndian.Uint64(ra[:]))
	}
}

// runReturn runs a tracker's return probes for call c (nil for a tracker
// without entries), on the thread's registers (those after the return). Records of a caller site are kept
// whatever the instruction there does next: the return has happened.
func (e *Engine) runReturn(th *thread, t *callTracker, c *callInst, recs []Record, keep []bool, atCaller bool) ([]Record, []bool) {
	sp := e.spaces[th.space]
	for _, p := range t.probes {
		if p.State != StateActive || c != nil && c.depth >= int(p.def().ActiveLimit()) {
			continue
		}
		inst := sp.inst[p.src]
		if inst == nil {
			continue
		}
		th.env.iv = nil // no call tracked: zeros, the machine's
		if c != nil {
			th.env.iv = &c.iv
		}
		r := e.runProbe(th, inst, p)
		if r == nil {
			continue // switched off (switch.go)
		}
		rec := e.record(th, p, p.Addr, r)
		switch {
		case r.Outcome == rpn.OutcomeException:
			e.commit(&rec)
		case r.Commits():
			k := p.def().LogOnFault || atCaller
			rec.KeepOnFault = k
			recs = append(recs, rec)
			keep = append(keep, k)
		}
	}
	th.env.iv = nil
	return recs, keep
}

// --- the life of spaces and threads ---

// callsThreadGone forgets the calls in flight of a thread that exited
// (counted as dropped).
func (e *Engine) callsThreadGone(tid int) {
	k := callOwner{ownThread, uint64(tid)}
	for _, sp := range e.spaces {
		if sp.calls == nil {
			continue
		}
		for _, fn := range sp.calls.funcs {
			for _, t := range fn.trackers {
				if _, ok := t.stacks[k]; ok {
					t.dropAll(k)
				}
			}
		}
	}
}

// callsSpaceGone counts the calls in flight of a space that ended or
// exec'd as dropped.
func (e *Engine) callsSpaceGone(sp *space) {
	if sp == nil || sp.calls == nil {
		return
	}
	for _, fn := range sp.calls.funcs {
		for _, t := range fn.trackers {
			for k := range t.stacks {
				t.dropAll(k)
			}
		}
	}
}

// callsForked gives a forked space its parent's return probes: the same
// breakpoints (its memory is a copy), no call in flight (the forking
// thread's calls return in the parent; the child's returns of them are
// not seen).
func (e *Engine) callsForked(child, parent *space) {
	if parent.calls == nil {
		return
	}
	cc := child.callsState()
	fns := map[*retFunc]*retFunc{}
	for a, f := range parent.calls.funcs {
		n := &retFunc{entry: f.entry, end: f.end, name: f.name, goCode: f.goCode, addrs: append([]uint64{}, f.addrs...), entryIn: f.entryIn,
			callers: map[uint64]bool{}, nret: f.nret, nthunk: f.nthunk, nout: f.nout,
			pads: map[uint64]uint64{}, padWhy: map[uint64]string{}, padsOff: f.padsOff}
		for r, a := range f.pads {
			n.pads[r] = a // the child's copy of the jump site (forked)
		}
		for r, w := range f.padWhy {
			n.padWhy[r] = w
		}
		for c := range f.callers {
			n.callers[c] = true
		}
		for _, t := range f.trackers {
			n.trackers = append(n.trackers, &callTracker{fn: n, mod: t.mod, probes: append([]*eprobe{}, t.probes...), limit: t.limit, entry: t.entry, stacks: map[callOwner][]*callInst{}})
			for _, p := range t.probes {
				p.in[child.id] = f.entry
			}
		}
		fns[f] = n
		cc.funcs[a] = n
	}
	for a, ss := range parent.calls.sites {
		for _, s := range ss {
			if n := fns[s.fn]; n != nil {
				cc.sites[a] = append(cc.sites[a], retSite{fn: n, kind: s.kind, target: s.target})
			}
		}
	}
}

// callsUnmapped forgets what return probes had in a module that is no
// longer loaded as it was (dlclose): the functions in it (their
// breakpoints went with the code; those in other modules, a caller's
// return address, are taken out) and the return addresses watched in it.
// Their probes go back to pending.
func (e *Engine) callsUnmapped(sp *space, src *rpn.Module, inst *instance) {
	if sp.calls == nil || inst.ld.Exec == nil {
		return
	}
	in := inst.ld.Exec
	var gone []*retFunc
	for _, fn := range sp.calls.funcs {
		if in(fn.entry) {
			gone = append(gone, fn)
			continue
		}
		for c := range fn.callers {
			if in(c) {
				// the code is gone: nothing to write back
				delete(fn.callers, c)
				e.forgetSite(sp, fn, c)
			}
		}
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i].entry < gone[j].entry })
	for _, fn := range gone {
		for _, a := range fn.addrs {
			if in(a) {
				e.forgetSite(sp, fn, a)
			}
		}
		for _, t := range fn.trackers {
			for k := range t.stacks {
				t.dropAll(k)
			}
			for _, p := range t.probes {
				delete(p.in, sp.id)
				if len(p.in) == 0 && p.State == StateActive {
					p.State = StatePending
				}
				for _, a := range fn.addrs {
					if bp := sp.bps[a]; bp != nil {
						for i, q := range bp.probes {
							if q == p {
								bp.probes = append(bp.probes[:i], bp.probes[i+1:]...)
								break
							}
						}
					}
				}
			}
		}
		fn.trackers = nil
		e.dropSites(sp, fn)
	}
}

// forgetSite drops one of fn's addresses whose code is gone: no write.
func (e *Engine) forgetSite(sp *space, fn *retFunc, a uint64) {
	keep := sp.calls.sites[a][:0]
	for _, s := range sp.calls.sites[a] {
		if s.fn != fn {
			keep = append(keep, s)
		}
	}
	if len(keep) == 0 {
		delete(sp.calls.sites, a)
	} else {
		sp.calls.sites[a] = keep
	}
	for i, x := range fn.addrs {
		if x == a {
			fn.addrs = append(fn.addrs[:i], fn.addrs[i+1:]...)
			break
		}
	}
	if bp := sp.bps[a]; bp != nil && sp.calls.sites[a] == nil {
		var probes []*eprobe
		for _, p := range bp.probes {
			if p.def().Kind != rpn.ProbeRetprobe {
				probes = append(probes, p)
			}
		}
		bp.probes = probes
		if len(probes) == 0 && bp.internal == nil {
			e.forget(sp, a)
		}
	}
}

// String names a site kind (tests, warnings).
func (k siteKind) String() string {
	if int(k) < len(siteNames) && siteNames[k] != "" {
		return siteNames[k]
	}
	return fmt.Sprintf("site(%d)", uint8(k))
}
