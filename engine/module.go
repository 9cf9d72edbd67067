package engine

import (
	"errors"
	"fmt"

	"github.com/gprobes/gprobes/engine/entries"
	pb "github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/symbols"
	"github.com/gprobes/gprobes/usdt"
	"github.com/gprobes/gprobes/x86"
)

// The engine keeps its modules and logical probes in a probe.Book, as
// every Prober does: the book decides what an insert, a merge, a replace,
// a remove, a switch and getvars do, and answers query; the engine is its
// Mechanism (mech, below): it places the probes of a source in every
// space, takes them out, keeps the variables and switches, and counts.

// Module is the engine's part of an inserted module (its probe.Module's
// Impl): its local variables and switches.
type Module struct {
	*pb.Module
	// lv are its local variables: in a jump pads' region once a pad
	// uses them (jump.go), else gprobes' own memory
	lv []uint64
	// sw are its switches, a byte per minor (switch.go); swBlock its
	// block in the switch memory, -1 when gprobes' own memory
	sw      []byte
	swBlock int
}

// eprobe is the engine's logical probe: the book's (its source, index,
// state, reason, how, address), and where the engine placed it and what
// it counted.
type eprobe struct {
	*pb.Probe
	mod *Module     // its module's engine part
	src *rpn.Module // its source's first build: the key of a space's instances
	st  rpn.ProbeState
	// lost are records a jump pad's ring dropped, from regions gone
	lost uint64
	in   map[int]uint64 // space -> address where it is inserted

	// a retprobe's calls beyond maxactive, and calls whose return was
	// never seen (retprobe.go)
	missed, dropped uint64
}

func (p *eprobe) def() *rpn.Probe { return p.Def() }

// ep is the engine's part of a probe of its book.
func ep(p *pb.Probe) *eprobe { return p.Impl.(*eprobe) }

// probes are the engine's parts of every probe of its book not removed,
// in insertion order.
func (e *Engine) probes() []*eprobe {
	var out []*eprobe
	for _, p := range e.book.Probes() {
		out = append(out, ep(p))
	}
	return out
}

// instance is a compiled module placed in one space: its relocated program
// and where its file is loaded.
type instance struct {
	prog  *rpn.Program
	key   string
	ident string
	bias  uint64
	ld    *Loaded
	build *rpn.Module // the build of the pack for this file (the source itself for a pack of one)
	// refused are the probes (by index) this file cannot take, with the
	// reason: a push d, of theirs names a symbol the file lacks. The
	// module's other probes go in.
	refused map[int]string
}

// def is a probe as its build for this file has it: its location and
// expected opcode are that build's.
func (inst *instance) def(p *eprobe) *rpn.Probe { return &inst.build.Probes[p.Index] }

// Insert puts a compiled module's probes into the target. Probes that
// cannot go in are refused with a reason; the others work. Probes whose
// file is not mapped yet stay pending until it is.
func (e *Engine) Insert(m *rpn.Module, mode InsertMode) ([]ProbeInfo, error) {
	return e.InsertPack([]*rpn.Module{m}, mode)
}

// InsertPack is Insert of a pack of several builds of one module (package
// ppdf checks that they are one DPDF's): each space takes the build of the
// file it has loaded, when it loads it.
func (e *Engine) InsertPack(builds []*rpn.Module, mode InsertMode) ([]ProbeInfo, error) {
	if err := pb.LoadPack(builds); err != nil {
		return nil, err
	}
	var out []ProbeInfo
	var err error
	if derr := e.do(func() {
		if e.gone != "" {
			err = fmt.Errorf("insert %s: the target is gone (%s)", builds[0].Name, e.gone)
			return
		}
		var s *pb.Source
		if s, err = e.book.Insert(builds, mode); err == nil {
			out = e.book.Infos(s)
		}
	}); derr != nil {
		return nil, derr
	}
	return out, err
}

// mech is the engine as its book's Mechanism; every call comes from the
// loop.
type mech struct{ e *Engine }

var _ pb.Mechanism = mech{}

func (m mech) NewModule(mod *pb.Module) { mod.Impl = &Module{Module: mod, swBlock: -1} }

// GrowVars grows a module's variables in place when they are in a jump
// pads' region (room for rpn.MaxVars), where the pads read and write
// them.
func (m mech) GrowVars(mod *pb.Module, n int) error {
	em := mod.Impl.(*Module)
	if cap(em.lv) >= n {
		em.lv = em.lv[:n]
	} else {
		em.lv = append(em.lv, make([]uint64, n-len(em.lv))...)
	}
	return nil
}

func (m mech) SetSwitch(mod *pb.Module, minor uint16, on bool) error {
	em := mod.Impl.(*Module)
	m.e.switches(em)
	setSwitch(em.sw, minor, on)
	return nil
}

func (m mech) SwitchedOff(mod *pb.Module, minor uint16) bool {
	em := mod.Impl.(*Module)
	return em.sw != nil && switchedOff(em.sw, minor)
}

// Place puts a new source's probes in every space where its file is
// loaded; they stay pending where it is not. A module the target cannot
// probe at all, and a probe of a kind the engine cannot run, are refused.
func (m mech) Place(s *pb.Source) {
	e := m.e
	mod := s.Module.Impl.(*Module)
	src := s.First()
	var added []*eprobe
	for _, p := range s.Probes {
		q := &eprobe{Probe: p, mod: mod, src: src, in: map[int]uint64{}}
		p.Impl = q
		added = append(added, q)
	}
	if reason := e.unsupported(src); reason != "" {
		for _, p := range added {
			p.State, p.Reason = StateRefused, reason
			if why := e.refusedWhy(p); why != "" {
				p.Reason = why // the more precise reason
			}
		}
		return
	}
	// a probe of a kind this engine cannot run is refused, alone
	for _, p := range added {
		if why := e.refusedWhy(p); why != "" {
			p.State, p.Reason = StateRefused, why
		}
	}
	e.watchInsert(added)
	for _, id := range e.sortedSpaces() {
		sp := e.spaces[id]
		if !sp.detached {
			e.placeModule(sp, s, added)
		}
	}
	e.watchSettle(s, added)
}

// refusedWhy says why the engine cannot place probe p on this target
// (its kind, its autostacktrace, a stack its program logs), or "".
func (e *Engine) refusedWhy(p *eprobe) string {
	d := p.def()
	if why := kindRefused(d); why != "" {
		return why
	}
	if d.Kind == rpn.ProbeUSDT && e.os.Kernel() {
		return reasonUSDT
	}
	if why := e.autoStackRefused(d); why != "" {
		return why
	}
	return e.stackRefused(p.src, &p.src.Probes[p.Index])
}

// stackRefused says why a stack probe d's program logs (log ustack, log
// kstack) cannot be taken on this target, where the OS knows it at
// insert (StackRefuser), or "".
func (e *Engine) stackRefused(m *rpn.Module, d *rpn.Probe) string {
	r, ok := e.ab.refuser, e.ab.refuser != nil
	if !ok {
		return ""
	}
	for pc := d.Entry; pc < d.End && int(pc) < len(m.Code); {
		op := rpn.Opcode(m.Code[pc])
		if op == rpn.OpLogUStack || op == rpn.OpLogKStack {
			if why := r.StackRefused(op == rpn.OpLogKStack); why != "" {
				pos, _ := m.LineFor(pc)
				name := "log ustack"
				if op == rpn.OpLogKStack {
					name = "log kstack"
				}
				return fmt.Sprintf("%s (%s): %s", name, m.PosString(pos), why)
			}
		}
		pc += uint32(max(op.Len(), 1))
	}
	return ""
}

// autoStackRefused says why a probe with autostacktrace = yes cannot go
// in: its exception records would carry no stack, which is never done
// silently.
func (e *Engine) autoStackRefused(d *rpn.Probe) string {
	if !d.AutoStack {
		return ""
	}
	if e.ab.unwinder == nil {
		return "autostacktrace = yes: this target takes no stacks yet, so its exception records would carry none"
	}
	if r := e.ab.refuser; r != nil {
		if why := r.StackRefused(e.os.Kernel()); why != "" {
			return "autostacktrace = yes: " + why + "; its exception records would carry no stack"
		}
		return ""
	}
	if e.os.Kernel() {
		return "autostacktrace = yes: this target takes no kernel stacks yet, so its exception records would carry none"
	}
	return ""
}

// TakeOut takes probes off their breakpoints, pads and registers in every
// space; the original code is back where no probe is left.
func (m mech) TakeOut(s *pb.Source, gone []*pb.Probe) error {
	e := m.e
	var errs []error
	for _, q := range gone {
		p := ep(q)
		for spID, addr := range p.in {
			if err := e.unplace(e.spaces[spID], addr, p); err != nil {
				errs = append(errs, err)
			}
		}
		p.in = map[int]uint64{}
		p.State = StateRemoved
		e.watchRemoved(p)
	}
	return errors.Join(errs...)
}

func (m mech) DropModule(mod *pb.Module) { m.e.freeSwitches(mod.Impl.(*Module)) }

// Counts are a probe's hits of its int3s and of its pads (the pads'
// counters as they are now), and how many spaces it is in.
func (m mech) Counts(q *pb.Probe, info *ProbeInfo) bool {
	p := ep(q)
	info.Hits, info.Skipped, info.Faults = p.st.Hits, p.st.Skipped, p.st.Faults
	info.Lost, info.Missed, info.Dropped, info.Spaces = p.lost, p.missed, p.dropped, len(p.in)
	padEnded := m.e.jumpCounters(p, info)
	return p.st.Disabled || padEnded
}

func (m mech) ReadVars(mod *pb.Module, reset bool) (lv, gv []uint64, err error) {
	e := m.e
	em := mod.Impl.(*Module)
	e.gvLock.Lock()
	defer e.gvLock.Unlock()
	lv = append([]uint64{}, em.lv...)
	gv = append([]uint64{}, e.gv[:mod.GVars]...)
	if reset {
		clear(em.lv)
		clear(e.gv[:mod.GVars])
	}
	return lv, gv, nil
}

func (m mech) Warn(msg string) { m.e.warn(msg) }

// Why the engine's targets (processes, guest kernels through a stub or
// Xen) refuse a probe for its kind: they plant breakpoints at
// instructions, and a tracepoint is the kernel's own hook (the kernel
// target, package bpf, attaches to it). Watch probes take debug
// registers (watch.go), return probes breakpoints at a function's entry
// and returns (retprobe.go).
const (
	reasonTracepoint = "tracepoint probes run on --target kernel only"
	reasonUSDT       = "usdt probes run on user-space targets only (--target host, pid:, exec:), not in a guest kernel"
)

// kindRefused says why the engine cannot place a probe of d's kind, or
// "" for an offset, watch or return probe.
func kindRefused(d *rpn.Probe) string {
	switch d.Kind {
	case rpn.ProbeOffset, rpn.ProbeWatch, rpn.ProbeRetprobe, rpn.ProbeUSDT:
		return ""
	case rpn.ProbeTracepoint:
		return reasonTracepoint
	}
	return fmt.Sprintf("probe kind %d is not known to this gprobes", d.Kind)
}

// unsupported says why a module cannot be probed on this target at all.
func (e *Engine) unsupported(m *rpn.Module) string {
	return e.os.Check(m)
}

// UsesIO reports where a module uses port IO, for targets without an IO
// space.
func UsesIO(m *rpn.Module) (string, bool) {
	for _, p := range m.Probes {
		for pc := p.Entry; pc < p.End; {
			op := rpn.Opcode(m.Code[pc])
			if op == rpn.OpPushIO || op == rpn.OpPopIO {
				pos, _ := m.LineFor(pc)
				return m.PosString(pos), true
			}
			pc += uint32(max(op.Len(), 1))
		}
	}
	return "", false
}

// Uses reports whether a module uses one of the opcodes, and where.
func Uses(m *rpn.Module, ops ...rpn.Opcode) (string, bool) {
	for _, p := range m.Probes {
		for pc := p.Entry; pc < p.End; {
			op := rpn.Opcode(m.Code[pc])
			for _, want := range ops {
				if op == want {
					pos, _ := m.LineFor(pc)
					return m.PosString(pos), true
				}
			}
			pc += uint32(max(op.Len(), 1))
		}
	}
	return "", false
}

// placeModule inserts the given probes of src into one space, where its
// file is loaded; they stay pending where it is not.
func (e *Engine) placeModule(sp *space, s *pb.Source, probes []*eprobe) {
	src := s.First()
	placeable := probes[:0:0]
	for _, p := range probes {
		if e.refusedWhy(p) == "" {
			placeable = append(placeable, p)
		}
	}
	if probes = placeable; len(probes) == 0 {
		return
	}
	ld, ok, err := e.os.Resolve(sp.id, src.Name, src.ModType)
	// after Resolve: a guest kernel names its places once a module is
	// asked for
	e.ensureRendezvous(sp)
	if err == nil && !ok {
		e.pendingReason(sp, src.Name, probes, false)
		return // pending
	}
	var inst *instance
	if err == nil {
		inst, err = e.instance(sp, s, ld)
	}
	if err != nil {
		for _, p := range probes {
			if len(p.in) == 0 {
				p.State, p.Reason = StateRefused, err.Error()
			}
		}
		return
	}
	for _, p := range probes {
		if p.State != StateRemoved {
			p.File = ld.Key
		}
		switch {
		case p.State == StateRemoved:
		case inst.refused[p.Index] != "":
			if len(p.in) == 0 {
				p.State, p.Reason = StateRefused, inst.refused[p.Index]
			}
		case isWatch(p):
			e.placeWatch(sp, inst, p)
		case p.def().Kind == rpn.ProbeRetprobe:
			e.placeRetprobe(sp, inst, p)
		case p.def().Kind == rpn.ProbeUSDT:
			e.placeUSDT(sp, inst, p)
		default:
			e.placeProbe(sp, inst, p)
		}
	}
}

// Loaded is a module as a target found it in an address space: which
// file, where (the bias from its link-time addresses), its symbols and
// which addresses are its code.
type Loaded struct {
	Key     string // what is loaded, as a person names it (a file's path)
	Ident   string // what identifies its content (a file's device, inode, size and time): "" when Key does
	Bias    uint64
	Symbols *symbols.Set // nil when there are none
	BuildID []byte
	// Exec reports whether addr is in the module's executable code.
	Exec func(addr uint64) bool
	// Entries lists, at link-time addresses, every place where the
	// module's code may be entered other than by falling through (the
	// direct branches of all its code, symbols, unwind ranges, landing
	// pads, jump tables: package entries); computed once per file. nil
	// when the target cannot tell: no jump pads there.
	Entries func() (*entries.Set, error)
	// USDT reads the file's static probes PROVIDER:NAME (usdt.Sites) at
	// link-time addresses, and every PROVIDER:NAME it has; nil when the
	// target cannot read them (no usdt probes there).
	USDT func(provider, name string) ([]usdt.Site, []string, error)
}

// resolver resolves a loaded file's locations and relocations: its
// symbols and line table at their link-time addresses, moved by the load
// bias (probe.Resolver; where the file has no symbols, the values of build
// time, moved the same way).
func (ld *Loaded) resolver() pb.Resolver {
	r := pb.Resolver{Bias: ld.Bias}
	if set := ld.Symbols; set != nil {
		r.Env = pb.Symbols{Set: set}
		r.Lines = func(file string, line int) (uint64, error) {
			a, _, err := set.LineAddr(file, line)
			return a, err
		}
	}
	return r
}

// instance loads src for one space: it checks the build ID and relocates
// the program for where the module is.
func (e *Engine) instance(sp *space, s *pb.Source, ld *Loaded) (*instance, error) {
	src := s.First()
	if inst, ok := sp.inst[src]; ok && inst.key == ld.Key && inst.ident == ld.Ident && inst.bias == ld.Bias {
		return inst, nil
	}
	build, err := pb.SelectBuild(s.Builds, ld.BuildID, e.buildWhere(ld))
	if err != nil {
		return nil, err
	}
	// a probe whose push d, names what the file lacks is refused,
	// alone (refused)
	prog, refused, err := ld.resolver().Relocate(build)
	if err != nil {
		return nil, err
	}
	inst := &instance{prog: prog, key: ld.Key, ident: ld.Ident, bias: ld.Bias, ld: ld, build: build, refused: refused}
	sp.inst[src] = inst
	return inst, nil
}

// placeProbe resolves, checks and inserts one probe in one space.
func (e *Engine) placeProbe(sp *space, inst *instance, p *eprobe) {
	if _, ok := p.in[sp.id]; ok {
		return
	}
	d := inst.def(p)
	link, err := e.linkAddr(d, inst)
	if err == nil {
		p.Addr = link + inst.bias
		var st ProbeState
		var why string
		if st, why = e.placeAt(sp, inst, p, d, link); why != "" {
			err = &placeRefusal{st, why}
		}
	}
	if err != nil && len(p.in) == 0 {
		p.State, p.Reason = StateRefused, err.Error()
		if r, ok := err.(*placeRefusal); ok {
			p.State = r.state
		}
	}
}

// placeRefusal is why a probe could not go in at an address, and the
// state it takes (refused, or a mismatch of the expected opcode).
type placeRefusal struct {
	state ProbeState
	why   string
}

func (r *placeRefusal) Error() string { return r.why }

// placeAt checks and inserts probe p at link (a link-time address of the
// file inst is loaded from) in one space: on success p is active there
// (p.in, p.Addr, p.How) and the reason is ""; else the state and reason
// it would take, and nothing is changed.
func (e *Engine) placeAt(sp *space, inst *instance, p *eprobe, d *rpn.Probe, link uint64) (state ProbeState, reason string) {
	refuse := func(st ProbeState, format string, args ...any) {
		state, reason = st, fmt.Sprintf(format, args...)
	}
	set := inst.ld.Symbols
	addr := link + inst.bias
	// in the module's code
	if inst.ld.Exec != nil && !inst.ld.Exec(addr) {
		refuse(StateRefused, "%#x (%s) is not in an executable mapping of %s", addr, d.Loc.Text, inst.key)
		return
	}
	if site := e.retPadCovering(sp, addr); site != nil {
		// in the bytes a return probe's jump covers: its ret goes back
		// to an int3 (retjump.go), and this probe takes its own
		if err := e.moveToInt3(sp, site.addr, fmt.Sprintf("an offset probe (at %#x) is inside the bytes its jump would cover", addr)); err != nil {
			refuse(StateRefused, "the jump pad at %#x could not make way for an int3: %v", site.addr, err)
			return
		}
	}
	if site := e.jumpCovering(sp, addr); site != nil {
		// inside another probe's jump: that one moves to an int3, so
		// that this one's int3 does not land in the jump's bytes
		if err := e.moveToInt3(sp, site.addr, fmt.Sprintf("another probe (at %#x) is inside the bytes its jump would cover", addr)); err != nil {
			refuse(StateRefused, "the jump pad at %#x could not make way for an int3: %v", site.addr, err)
			return
		}
	}
	if sp.jump != nil && sp.jump.sites[addr] != nil {
		why := e.joinJump(sp, p, addr)
		if why == "" {
			p.Addr = addr
			return
		}
		// it cannot run in a pad: the probes there move to an int3,
		// in their order, and this one joins them
		if err := e.moveToInt3(sp, addr, "shares its address with a probe that cannot run in a pad ("+why+")"); err != nil {
			refuse(StateRefused, "the jump pad at %#x could not make way for an int3: %v", addr, err)
			return
		}
	}
	bp := sp.bps[addr]
	var jumpWhy string
	if bp == nil {
		code := make([]byte, 16)
		if err := e.readOriginal(sp, addr, code); err != nil {
			refuse(StateRefused, "read the code at %#x: %v", addr, err)
			return
		}
		if d.HasOpcode && code[0] != d.Opcode {
			refuse(StateMismatch, "the byte at %#x is %#02x, the probe expects opcode %#02x", addr, code[0], d.Opcode)
			return
		}
		if d.Kind == rpn.ProbeUSDT {
			// the file's note gives the site: the assembler put its
			// address on sys/sdt.h's nop, an instruction boundary with or
			// without symbols (a stripped python3 has none); a byte other
			// than the nop's means the note does not match the code
			if code[0] != usdtNop {
				refuse(StateMismatch, "the byte at %#x is %#02x, not the nop (0x90) of the static probe's site", addr, code[0])
				return
			}
		} else if err := e.checkBoundary(sp, set, inst.bias, link, addr); err != nil {
			refuse(StateRefused, "%v", err)
			return
		}
		insn, err := e.decode(code, addr)
		if err != nil {
			refuse(StateRefused, "decode the instruction at %#x: %v", addr, err)
			return
		}
		if insn.Class == x86.Refuse {
			refuse(StateRefused, "cannot probe `%s` at %#x: %s", insn.String(), addr, insn.Why)
			return
		}
		if jumpWhy = e.tryJump(sp, inst, p, addr); jumpWhy == "" {
			site := sp.jump.sites[addr]
			site.probes = []*eprobe{p}
			p.in[sp.id] = addr
			p.State, p.Reason = StateActive, ""
			p.How = "jump"
			p.Addr = addr
			return
		}
		bp = &breakpoint{addr: addr, insn: insn}
		if err := e.prepareSlot(sp, bp); err != nil && insn.Class != x86.Emulate && insn.Class != x86.Branch && !errors.Is(err, ErrNoXOL) {
			refuse(StateRefused, "%v", err)
			return
		}
		if err := e.plant(sp, bp); err != nil {
			refuse(StateRefused, "%v", err)
			return
		}
	} else if d.HasOpcode && bp.insn.Bytes[0] != d.Opcode {
		refuse(StateMismatch, "the byte at %#x is %#02x, the probe expects opcode %#02x", addr, bp.insn.Bytes[0], d.Opcode)
		return
	}
	bp.probes = append(bp.probes, p)
	p.in[sp.id] = addr
	p.State, p.Reason = StateActive, ""
	p.How = howName(bp.insn.Class)
	p.Addr = addr
	if jumpWhy != "" && e.opts.Route != RouteInt3 && !e.os.Kernel() {
		p.How = "int3 " + p.How + ": " + jumpWhy
	}
	return
}

func howName(c x86.Class) string {
	switch c {
	case x86.Emulate:
		return "emulate"
	case x86.Boost:
		return "boost"
	case x86.Step:
		return "step"
	case x86.Branch:
		return "branch"
	}
	return ""
}

// linkAddr is a probe's link-time address in the file inst is loaded
// from (probe.Resolver.Location, less the bias).
func (e *Engine) linkAddr(d *rpn.Probe, inst *instance) (uint64, error) {
	a, err := inst.ld.resolver().Location(d)
	return a - inst.ld.Bias, err
}

// readOriginal reads code with the original bytes in place of the
// engine's int3s.
func (e *Engine) readOriginal(sp *space, addr uint64, p []byte) error {
	if err := e.tgt.ReadMem(sp.id, addr, p); err != nil {
		// near the end of a mapping: read less
		for n := len(p) - 1; n > 0; n-- {
			if e.tgt.ReadMem(sp.id, addr, p[:n]) == nil {
				clear(p[n:])
				goto patch
			}
		}
		return err
	}
patch:
	for a, bp := range sp.bps {
		if a >= addr && a < addr+uint64(len(p)) {
			p[a-addr] = bp.insn.Bytes[0]
		}
	}
	if sp.jump != nil {
		// the bytes a jump covers
		end := addr + uint64(len(p))
		for a, site := range sp.jump.sites {
			for i, b := range site.orig {
				if x := a + uint64(i); x >= addr && x < end {
					p[x-addr] = b
				}
			}
		}
	}
	return nil
}

// checkBoundary decodes the enclosing function up to addr.
func (e *Engine) checkBoundary(sp *space, set *symbols.Set, bias, link, addr uint64) error {
	if set == nil {
		return fmt.Errorf("cannot check that %#x is on an instruction boundary: no symbols", addr)
	}
	fn, ok := set.SymbolAt(link)
	if !ok || fn.Size == 0 {
		if s, off, ok := set.Nearest(link); ok && off == 0 {
			_ = s
			return nil // a symbol's first byte starts an instruction
		}
		return fmt.Errorf("cannot check that %#x is on an instruction boundary: no function symbol covers it; probe a symbol or an address inside a function", addr)
	}
	start := fn.Addr + bias
	size := fn.Size
	if size > 1<<20 {
		size = 1 << 20
	}
	code := make([]byte, size)
	if err := e.readOriginal(sp, start, code); err != nil {
		return fmt.Errorf("read %s: %v", fn.Name, err)
	}
	if err := x86.CheckBoundary(code, start, addr, 64); err != nil {
		return fmt.Errorf("%s+%#x is not on an instruction boundary: %v", fn.Name, addr-start, err)
	}
	return nil
}

// withStoppedThread runs f with one stopped thread of a space. A thread
// that is stopped already is used and left stopped: the one whose event
// the engine is handling (an exec, a hit on the dynamic linker's
// rendezvous), one held until Go, one whose event waits in the queue;
// whoever stopped it resumes it. Resuming it here let a new program run
// from its exec stop while its probes were still going in, and a thread
// in the middle of a hit run on from after its int3 (a program exec'd
// with a pending probe died of SIGSEGV). Only a thread the engine
// stops for f is resumed after it.
func (e *Engine) withStoppedThread(spID int, f func(tid int) error) error {
	tids := e.tgt.Threads(spID)
	if len(tids) == 0 {
		return fmt.Errorf("no thread in %d", spID)
	}
	if th := e.threads[e.cur]; th != nil && th.space == spID && e.tgt.IsStopped(e.cur) {
		return f(e.cur)
	}
	for _, tid := range tids {
		if th := e.threads[tid]; th != nil && th.held {
			return f(tid)
		}
	}
	for _, tid := range tids {
		if e.tgt.IsStopped(tid) && !e.signalWaits(tid) {
			return f(tid)
		}
	}
	var tid int
	for _, t := range tids {
		if !e.tgt.IsStopped(t) {
			tid = t
			break
		}
	}
	if tid == 0 {
		// every thread is stopped for a signal still to deliver: running
		// f on one would swallow it
		return fmt.Errorf("every thread of %d is stopped for a signal", spID)
	}
	evs, err := e.tgt.StopThread(tid)
	if err != nil {
		e.pendingEvents = append(e.pendingEvents, evs...)
		return err
	}
	err = f(tid)
	if len(evs) == 0 {
		e.resumeQuiet(tid)
	} else {
		// it stopped for something else first: handle that as usual
		e.pendingEvents = append(e.pendingEvents, evs...)
	}
	return err
}

// signalWaits reports whether a stopped thread's queued event is a signal
// to deliver (its stop is a signal-delivery stop: stepping it would drop
// the signal).
func (e *Engine) signalWaits(tid int) bool {
	for _, ev := range e.pendingEvents {
		if ev.Tid == tid && ev.Kind == EvSignal {
			return true
		}
	}
	return false
}

// unplace takes a probe off a breakpoint, and the breakpoint out when it
// was the last probe there.
func (e *Engine) unplace(sp *space, addr uint64, p *eprobe) error {
	if sp == nil {
		return nil
	}
	if isWatch(p) {
		return e.unplaceWatch(sp, p)
	}
	if p.def().Kind == rpn.ProbeRetprobe {
		return e.unplaceRet(sp, p)
	}
	if p.def().Kind == rpn.ProbeUSDT {
		return e.unplaceUSDT(sp, p)
	}
	return e.unplaceAt(sp, addr, p)
}

// unplaceAt takes a probe off its breakpoint or jump at addr.
func (e *Engine) unplaceAt(sp *space, addr uint64, p *eprobe) error {
	if sp.jump != nil && sp.jump.sites[addr] != nil {
		return e.unplaceJump(sp, addr, p)
	}
	bp := sp.bps[addr]
	if bp == nil {
		return nil
	}
	for i, q := range bp.probes {
		if q == p {
			bp.probes = append(bp.probes[:i], bp.probes[i+1:]...)
			break
		}
	}
	if len(bp.probes) == 0 && bp.internal == nil {
		return e.takeOut(sp, addr)
	}
	return nil
}

// execed starts a space afresh after exec: the old code and its
// breakpoints are gone; the probes go in again where their files appear.
func (e *Engine) execed(id int) {
	e.forgetPlanted(id, e.spaces[id], true)
	sp := e.newSpace(id)
	e.placeAll(sp)
}

// placeAll tries every pending or active probe in a space (after exec,
// or when the dynamic linker mapped something).
func (e *Engine) placeAll(sp *space) {
	for _, m := range e.book.Modules() {
		for _, s := range m.Sources {
			var probes []*eprobe
			for _, q := range s.Probes {
				p := ep(q)
				if _, in := p.in[sp.id]; in || p.State == StateRemoved {
					continue
				}
				probes = append(probes, p)
			}
			if len(probes) > 0 && e.unsupported(s.First()) == "" {
				e.placeModule(sp, s, probes)
			}
		}
	}
}

// spaceExit forgets a space that is gone.
func (e *Engine) spaceExit(id int, how string) {
	sp := e.spaces[id]
	if sp == nil {
		return
	}
	e.forgetPlanted(id, sp, false)
	delete(e.spaces, id)
	if len(e.spaces) == 0 {
		e.targetGone("process " + how)
	}
}

// ensureRendezvous puts the engine's own breakpoints where the target says
// loaded modules change (for a process: the dynamic linker's
// _dl_debug_state, called after every dlopen and dlclose; for a guest
// kernel: where a module is about to run its init and where it is about
// to be freed), so probes in a module that appears later go in when it
// does, and come out of one that goes. While the target names no place,
// it is asked again at the next placement.
func (e *Engine) ensureRendezvous(sp *space) {
	if sp.rendezvous != nil {
		return
	}
	addrs := e.os.Rendezvous(sp.id)
	if len(addrs) == 0 {
		return
	}
	sp.rendezvous = []uint64{} // tried
	for _, addr := range addrs {
		if e.plantRendezvous(sp, addr) {
			sp.rendezvous = append(sp.rendezvous, addr)
		}
	}
}

// plantRendezvous puts one rendezvous breakpoint in, or makes the one at
// addr (a probe's) a rendezvous too.
func (e *Engine) plantRendezvous(sp *space, addr uint64) bool {
	code := make([]byte, 16)
	if err := e.readOriginal(sp, addr, code); err != nil {
		e.warn(fmt.Sprintf("modules loaded from now on get no probes: read %#x: %v", addr, err))
		return false
	}
	insn, err := e.decode(code, addr)
	if err != nil || insn.Class == x86.Refuse {
		e.warn(fmt.Sprintf("modules loaded from now on get no probes: the instruction at %#x cannot be displaced", addr))
		return false
	}
	bp := &breakpoint{addr: addr, insn: insn, internal: e.rendezvousHandler(sp)}
	if existing := sp.bps[addr]; existing != nil {
		existing.internal = bp.internal
		return true
	}
	if err := e.prepareSlot(sp, bp); err != nil && insn.Class != x86.Emulate && insn.Class != x86.Branch && !errors.Is(err, ErrNoXOL) {
		return false
	}
	if err := e.plant(sp, bp); err != nil {
		e.warn(fmt.Sprintf("modules loaded from now on get no probes: %v", err))
		return false
	}
	return true
}

// pendingReason gives probes left pending in a space the target's reason
// (a guest kernel's module not loaded, or unloaded).
func (e *Engine) pendingReason(sp *space, name string, probes []*eprobe, unloaded bool) {
	pr, ok := e.ab.pending, e.ab.pending != nil
	if !ok {
		return
	}
	why := pr.PendingReason(sp.id, name, unloaded)
	for _, p := range probes {
		if len(p.in) == 0 {
			p.Wait(why, unloaded)
		}
	}
}

// decode decodes and classifies the instruction a probe displaces, as
// kernel code for kernel targets.
func (e *Engine) decode(code []byte, addr uint64) (x86.Insn, error) {
	if e.os.Kernel() {
		return x86.DecodeKernel(code, addr, 64)
	}
	return x86.Decode(code, addr, 64)
}

func (e *Engine) rendezvousHandler(sp *space) func(*thread) {
	id := sp.id
	return func(th *thread) {
		if s := e.spaces[id]; s != nil {
			e.unmapped(s)
			e.placeAll(s)
			e.retryTCB(s, th.tid)
		}
	}
}

// unmapped forgets what the engine placed in modules that are no longer
// loaded as they were (dlclose'd, or replaced by another file or at
// another address): their int3s went with their code. Kept, a remove
// would write the old byte into whatever is mapped there now, and a
// module loaded again would get no probes. Their probes go back to
// pending in this space and placeAll puts them in where the module is now.
func (e *Engine) unmapped(sp *space) {
	for src, inst := range sp.inst {
		ld, ok, err := e.os.Resolve(sp.id, src.Name, src.ModType)
		if err == nil && ok && ld.Key == inst.key && ld.Ident == inst.ident && ld.Bias == inst.bias {
			continue
		}
		if err != nil {
			continue // cannot tell: leave it
		}
		delete(sp.inst, src)
		defer e.pendingReason(sp, src.Name, e.probesOf(src), true)
		e.unmapPlanted(sp, src, inst)
	}
}

// probesOf are the probes of one source (one insert of a module).
func (e *Engine) probesOf(src *rpn.Module) []*eprobe {
	var out []*eprobe
	for _, p := range e.probes() {
		if p.src == src {
			out = append(out, p)
		}
	}
	return out
}
