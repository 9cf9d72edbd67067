package engine

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/x86"
)

// The engine's breakpoints, in one place (delve's BreakpointMap is the
// model): everything that answers "is this trap ours?" — the breakpoints
// of each address space, the addresses taken out while a thread may
// still report a stop there, the out-of-line slots, the copies a fork
// inherits — and the only code that writes what the engine plants into
// a target: int3s, jumps to pads (plantJump, unplant) and debug registers
// (setWatch, clearWatch). TestOneWriter holds it to that. A breakpoint has a physical part (one address, its original
// instruction, its slot: breakpoint) and logical parts (the DPDF probes
// at that address: probe). Every failure of the target is returned or,
// where no caller can act on it, said through Options.Warn and on the
// probes it concerns: a breakpoint that could not go back in after a step
// turns its probes to refused, with the reason, never silently off.
//
// A backend that classifies stops before the engine sees them (gdbtarget:
// a vCPU past an int3 after ^C to gdbsx) asks these books through
// Owner (OwnerAware). What stays in a backend is how a breakpoint is made
// (an int3 byte, a Z packet, a debug register) and what only it can know:
// xen keeps, for breakpoints taken out, which mechanism each one used (a
// byte, or a debug register), since it reads a stop differently for each.

// owner is the engine's Owner for backends.
type owner struct{ e *Engine }

func (o owner) Ours(space int, addr uint64) bool {
	sp := o.e.spaces[space]
	return sp != nil && sp.ours(addr)
}

// space is one address space (a process, or a guest's kernel) and what
// the engine put there.
type space struct {
	id         int
	bps        map[uint64]*breakpoint
	removed    map[uint64]bool // taken out while a thread may still report a stop there
	inst       map[*rpn.Module]*instance
	xol        []*xolArea
	rendezvous []uint64 // the engine's breakpoints where loaded modules change; nil until the OS names some
	detached   bool
	noXOL      bool                // the target cannot map out-of-line slots
	unmapped   bool                // what gprobes mapped is unmapped (areas.go): detached
	jump       *jumpState          // jump pads (jump.go), nil until a probe tries one
	calls      *spaceCalls         // return probes (retprobe.go), nil until one goes in
	usdt       map[*eprobe]*usdtIn // usdt probes in this space: their sites and semaphores (usdt.go)
}

// breakpoint is a physical breakpoint: one address, its original
// instruction, its out-of-line slot and the probes there.
type breakpoint struct {
	addr     uint64
	insn     x86.Insn // Bytes holds the original bytes
	slot     uint64
	probes   []*eprobe
	internal func(th *thread)
}

func (e *Engine) newSpace(id int) *space {
	sp := &space{id: id, bps: map[uint64]*breakpoint{}, removed: map[uint64]bool{}, inst: map[*rpn.Module]*instance{}}
	e.spaces[id] = sp
	return sp
}

// ours reports whether addr holds a breakpoint of the engine's, or held
// one until a thread's stop there could still be on its way.
func (sp *space) ours(addr uint64) bool { return sp.bps[addr] != nil || sp.removed[addr] }

// plant puts a breakpoint into the target and records it.
func (e *Engine) plant(sp *space, bp *breakpoint) error {
	if err := e.tgt.InsertBreakpoint(sp.id, bp.addr, bp.insn.Bytes); err != nil {
		return fmt.Errorf("insert the breakpoint at %#x: %w", bp.addr, err)
	}
	sp.bps[bp.addr] = bp
	delete(sp.removed, bp.addr)
	return nil
}

// takeOut restores the original code at addr and remembers that a
// breakpoint was there: a thread that hit it just before still reports
// the stop. In a space already let go, only the books change.
func (e *Engine) takeOut(sp *space, addr uint64) error {
	bp := sp.bps[addr]
	if bp == nil {
		return nil
	}
	delete(sp.bps, addr)
	sp.removed[addr] = true
	if sp.detached {
		return nil
	}
	if err := e.tgt.RemoveBreakpoint(sp.id, addr, bp.insn.Bytes); err != nil {
		return fmt.Errorf("restore the original code at %#x: %w", addr, err)
	}
	e.retireSlot(sp, bp)
	return nil
}

// retireSlot gives a breakpoint's slot back: used again once no thread
// can be in it (reclaim).
func (e *Engine) retireSlot(sp *space, bp *breakpoint) {
	if bp.slot == 0 {
		return
	}
	for _, a := range sp.xol {
		if a.holds(bp.slot) {
			a.retire(bp.slot, x86.SlotSize)
			break
		}
	}
	bp.slot = 0
}

// takeOutAll restores every breakpoint of a space (detach).
func (e *Engine) takeOutAll(sp *space) error {
	var errs []error
	for addr := range sp.bps {
		if err := e.takeOut(sp, addr); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// takeOutPlanted takes out of a space everything the engine planted there
// (detach), in this order: a usdt probe's semaphores back to what the
// program had, the jumps (the pads stay, for threads inside them), the
// int3s, the debug registers. Each failure is returned; the rest goes on.
func (e *Engine) takeOutPlanted(sp *space) []error {
	var errs []error
	for _, err := range []error{e.releaseSemaphores(sp), e.takeOutJumps(sp), e.takeOutAll(sp), e.takeOutWatches(sp)} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// forgetPlanted forgets what the engine planted in space id (sp, nil if
// it has none) whose image is gone: the kernel took it all with the
// image, nothing is written. After exec its probes not in any other space
// go back to pending, to be placed in the new image; after an exit the
// space goes.
func (e *Engine) forgetPlanted(id int, sp *space, exec bool) {
	e.watchGone(id)
	e.callsSpaceGone(sp)
	if sp == nil {
		return
	}
	e.dropJump(sp, exec)
	for _, bp := range sp.bps {
		for _, p := range bp.probes {
			delete(p.in, id)
			if exec && len(p.in) == 0 && p.State == StateActive {
				p.State = StatePending
			}
		}
	}
}

// unmapPlanted forgets what the engine planted in the code of a module no
// longer loaded as it was in a space (dlclose, a guest module's unload):
// the code is gone, nothing is written back (a target that keeps
// breakpoints apart from the code forgets them: forget). The module's
// probes there go back to pending if in no other space.
func (e *Engine) unmapPlanted(sp *space, src *rpn.Module, inst *instance) {
	in := inst.ld.Exec
	e.watchUnmapped(sp, src)
	e.callsUnmapped(sp, src, inst)
	e.usdtUnmapped(sp, src)
	e.jumpUnmapped(sp, in)
	for addr, bp := range sp.bps {
		if bp.internal != nil || (in != nil && !in(addr)) {
			continue
		}
		keep := bp.probes[:0]
		for _, p := range bp.probes {
			if p.src == src {
				delete(p.in, sp.id)
				if len(p.in) == 0 && p.State == StateActive {
					p.State = StatePending
				}
				continue
			}
			keep = append(keep, p)
		}
		bp.probes = keep
		if len(bp.probes) == 0 {
			e.forget(sp, addr)
		}
	}
}

// forget drops a breakpoint whose code is gone (its module unloaded):
// nothing is written back. A target that keeps breakpoints apart from
// the code (a stub's list, debug registers) forgets it too.
func (e *Engine) forget(sp *space, addr uint64) {
	delete(sp.bps, addr)
	delete(sp.removed, addr)
	if f := e.ab.forgetter; f != nil && !sp.detached {
		if err := f.ForgetBreakpoint(sp.id, addr); err != nil {
			e.warn(fmt.Sprintf("forget the breakpoint at %#x, in code unloaded: %v", addr, err))
		}
	}
}

// removeForeign takes out a breakpoint the engine did not plant (a
// stub's, left by an earlier client).
func (e *Engine) removeForeign(sp *space, addr uint64) error {
	if err := e.tgt.RemoveBreakpoint(sp.id, addr, nil); err != nil {
		return fmt.Errorf("remove a breakpoint at %#x that is not ours: %w", addr, err)
	}
	return nil
}

// lift takes a breakpoint out for a moment (a step in place); lower puts
// it back. A breakpoint that cannot go back turns its probes to refused,
// with the reason, and is forgotten: its probes are off, and query says
// why.
func (e *Engine) lift(sp *space, bp *breakpoint) error {
	if err := e.tgt.RemoveBreakpoint(sp.id, bp.addr, bp.insn.Bytes); err != nil {
		return fmt.Errorf("take the breakpoint at %#x out for a step in place: %w", bp.addr, err)
	}
	return nil
}

func (e *Engine) lower(sp *space, bp *breakpoint) {
	if sp.bps[bp.addr] != bp || sp.detached {
		return // taken out meanwhile
	}
	if err := e.tgt.InsertBreakpoint(sp.id, bp.addr, bp.insn.Bytes); err != nil {
		reason := fmt.Sprintf("the breakpoint at %#x could not go back in after a step: %v", bp.addr, err)
		delete(sp.bps, bp.addr)
		for _, p := range bp.probes {
			delete(p.in, sp.id)
			if len(p.in) == 0 {
				p.State, p.Reason = StateRefused, reason
			}
		}
		e.warn(reason)
	}
}

// forked gives a new address space, a copy of its parent's, the parent's
// breakpoints: its memory holds the same int3s and slots.
func (e *Engine) forked(child, parent int) {
	sp := e.newSpace(child)
	ps := e.spaces[parent]
	if ps == nil {
		return
	}
	for addr, bp := range ps.bps {
		cp := *bp
		cp.probes = append([]*eprobe{}, bp.probes...)
		if bp.internal != nil {
			cp.internal = e.rendezvousHandler(sp)
		}
		sp.bps[addr] = &cp
		for _, p := range bp.probes {
			p.in[child] = addr
		}
	}
	for k, v := range ps.inst {
		sp.inst[k] = v
	}
	for _, a := range ps.xol {
		c := *a
		c.free = append([]span(nil), a.free...)
		c.retired = append([]span(nil), a.retired...)
		sp.xol = append(sp.xol, &c)
	}
	sp.rendezvous = slices.Clone(ps.rendezvous) // nil stays nil: not asked yet
	if pj := ps.jump; pj != nil {
		// the same pads (its memory is a copy) and the same region
		// (shared memory is shared across fork): records carry their
		// thread, so the child's are told apart
		cj := &jumpState{rg: pj.rg, sites: map[uint64]*jumpSite{}, pads: append([]*builtPad{}, pj.pads...),
			held: append([]uint64{}, pj.held...), no: pj.no, holding: map[int]bool{}, int3Only: map[uint64]string{}, pool: pj.pool}
		for a, why := range pj.int3Only {
			cj.int3Only[a] = why
		}
		for _, a := range pj.areas {
			c := *a
			c.free = append([]span(nil), a.free...)
			c.retired = append([]span(nil), a.retired...)
			cj.areas = append(cj.areas, &c)
		}
		for addr, s := range pj.sites {
			c := *s
			c.probes = append([]*eprobe{}, s.probes...)
			cj.sites[addr] = &c
			for _, p := range s.probes {
				p.in[child] = addr
			}
		}
		if cj.rg != nil {
			cj.rg.refs++
		}
		sp.jump = cj
	}
	e.watchForked(child, parent)
	e.callsForked(sp, ps)
	e.usdtForked(sp, ps)
}

// prepareSlot gives a breakpoint its out-of-line slot and writes the
// displaced instruction there.
func (e *Engine) prepareSlot(sp *space, bp *breakpoint) error {
	slot, err := e.allocSlot(sp, bp.addr)
	if err != nil {
		return err
	}
	if slot == 0 {
		return ErrNoXOL
	}
	code, err := x86.PrepareXOL(&bp.insn, slot, true)
	if err != nil {
		return fmt.Errorf("prepare the out-of-line copy of `%s`: %v", bp.insn.String(), err)
	}
	if err := e.tgt.WriteMem(sp.id, slot, code); err != nil {
		return fmt.Errorf("write the out-of-line slot: %v", err)
	}
	bp.slot = slot
	return nil
}

const xolAreaSize = 64 << 10

// allocSlot finds a free slot within 2 GiB of addr, mapping a new area
// if needed.
func (e *Engine) allocSlot(sp *space, addr uint64) (uint64, error) {
	for try := 0; try < 2; try++ {
		for _, a := range sp.xol {
			if nearArea(a.base, a.size, addr) {
				if s, ok := a.take(x86.SlotSize); ok {
					return s, nil
				}
			}
		}
		// slots given back may serve before a new area is mapped
		if try == 0 && e.reclaim(sp) == 0 {
			break
		}
	}
	if sp.noXOL {
		return 0, nil
	}
	mapper, ok := e.ab.xol, e.ab.xol != nil
	if !ok {
		sp.noXOL = true
		return 0, nil
	}
	var base uint64
	err := e.withStoppedThread(sp.id, func(tid int) error {
		var err error
		base, err = mapper.AllocXOL(sp.id, tid, addr, xolAreaSize)
		return err
	})
	if errors.Is(err, ErrNoXOL) {
		sp.noXOL = true
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("map the out-of-line area: %v", err)
	}
	a := &xolArea{base: base, size: xolAreaSize, used: x86.SlotSize}
	sp.xol = append(sp.xol, a)
	if !nearArea(base, xolAreaSize, addr) {
		e.warn(fmt.Sprintf("process %d: no room for an out-of-line area within ±2 GiB of %#x: mapped at %#x (slots serve instructions with no RIP-relative operand there)", sp.id, addr, base))
	}
	return base, nil
}

func near(a, b uint64) bool {
	d := int64(a - b)
	return d > -(1<<31)+xolAreaSize && d < (1<<31)-xolAreaSize
}

// errPadFar: a jump reaches ±2 GiB, and the pad is farther.
var errPadFar = errors.New("the pad is beyond ±2 GiB of the probe")

// plantJump writes a site's jump to its pad over the bytes it covers (past
// the jump, int3s: never run, nothing lands there), journaled with the
// bytes as they were; every thread of the space is stopped. errPadFar
// when the pad is out of reach.
func (e *Engine) plantJump(sp *space, site *jumpSite) error {
	jmp := x86.JmpTo(site.addr, site.pad.at)
	if len(jmp) != x86.JumpLen {
		return errPadFar
	}
	patch := append([]byte(nil), site.orig...)
	copy(patch, jmp)
	for i := x86.JumpLen; i < len(patch); i++ {
		patch[i] = 0xcc
	}
	return e.ab.jump.Patch(sp.id, site.addr, patch, site.orig)
}

// plantJumpWhy is plantJump saying why not, for query's HOW.
func (e *Engine) plantJumpWhy(sp *space, site *jumpSite) string {
	switch err := e.plantJump(sp, site); {
	case err == errPadFar:
		return err.Error()
	case err != nil:
		return fmt.Sprintf("write the jump: %v", err)
	}
	return ""
}

// unplant puts back what a patch covered (a jump's bytes; a pad area's
// held byte, 0) and takes it out of the journal.
func (e *Engine) unplant(sp *space, addr uint64, orig []byte) error {
	return e.ab.jump.Unpatch(sp.id, addr, orig)
}

// setWatch makes debug register slot watch w in a space; clearWatch turns
// it off.
func (e *Engine) setWatch(space, slot int, w Watch) error {
	return e.ab.watcher.SetWatch(space, slot, w)
}

func (e *Engine) clearWatch(space, slot int) error {
	return e.ab.watcher.ClearWatch(space, slot)
}
