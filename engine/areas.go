package engine

import (
	"fmt"
	"sort"
	"time"
	"unsafe"

	"github.com/gprobes/gprobes/pad"
	"github.com/gprobes/gprobes/rpn"
)

// The memory gprobes maps into a process: out-of-line areas (64 KiB of
// slots), jump pads' areas (256 KiB of pads), and the shared memory of
// each process image with pads (its region, the global variables, the
// switches). None of it is left behind: a slot or a pad given back is
// used again once no thread can be in it, and at detach everything is
// unmapped once no thread can be in any of it (docs/engine.md, "Never
// harm the target"). "No thread can be in it" is proven with every
// thread of the process stopped: no pc inside, no signal frame whose
// saved pc is inside (stackScan), and no other process sharing the
// memory (a vfork child, whose threads are not this process's).

// span is [lo, hi).
type span struct{ lo, hi uint64 }

// xolArea is an area gprobes mapped: its slots or pads are taken from
// the free spans first, then from the never-used end.
type xolArea struct {
	base, size, used uint64
	free             []span // given back and proven unused
	retired          []span // given back, maybe still in use
}

// take finds n bytes in the area.
func (a *xolArea) take(n uint64) (uint64, bool) {
	for i, f := range a.free {
		if f.hi-f.lo >= n {
			at := f.lo
			if f.hi-f.lo == n {
				a.free = append(a.free[:i], a.free[i+1:]...)
			} else {
				a.free[i].lo += n
			}
			return at, true
		}
	}
	if a.used+n <= a.size {
		at := a.base + a.used
		a.used += n
		return at, true
	}
	return 0, false
}

// retire gives [at, at+n) back, to be used again once proven unused.
func (a *xolArea) retire(at, n uint64) {
	a.retired = append(a.retired, span{at, at + n})
}

// holds reports whether addr is in the area.
func (a *xolArea) holds(addr uint64) bool { return addr >= a.base && addr < a.base+a.size }

// settle moves the retired spans no thread can be in to the free ones
// (merging neighbours); busy says whether a span may still be in use.
func (a *xolArea) settle(busy func(span) bool) int {
	n := 0
	keep := a.retired[:0]
	for _, r := range a.retired {
		if busy(r) {
			keep = append(keep, r)
			continue
		}
		a.free = append(a.free, r)
		n++
	}
	a.retired = keep
	sort.Slice(a.free, func(i, j int) bool { return a.free[i].lo < a.free[j].lo })
	merged := a.free[:0]
	for _, f := range a.free {
		if k := len(merged); k > 0 && merged[k-1].hi == f.lo {
			merged[k-1].hi = f.hi
		} else {
			merged = append(merged, f)
		}
	}
	a.free = merged
	return n
}

// nearArea reports whether an area of size bytes at base is within a
// 32-bit displacement of addr from end to end.
func nearArea(base, size, addr uint64) bool {
	return near(base, addr) && near(base+size, addr)
}

// sharedWithOther reports whether another traced process shares the
// space's memory (a vfork child and its parent): its threads, which are
// not the space's, may be anywhere in it. An answer it cannot get counts
// as yes.
func (e *Engine) sharedWithOther(sp *space, host JumpHost) bool {
	for _, o := range e.tgt.Spaces() {
		if o == sp.id || e.spaces[o] == nil || e.spaces[o].detached {
			continue
		}
		if shared, err := host.SharesMemory(sp.id, o); err != nil || shared {
			return true
		}
	}
	return false
}

// reclaim gives the retired slots and pads of a space that no thread can
// be in back to their areas (every thread stopped for the proof). It
// returns how many came back.
func (e *Engine) reclaim(sp *space) int {
	host, ok := e.ab.jump, e.ab.jump != nil
	if !ok || sp.detached {
		return 0
	}
	var areas []*xolArea
	areas = append(areas, sp.xol...)
	if sp.jump != nil {
		areas = append(areas, sp.jump.areas...)
	}
	any := false
	for _, a := range areas {
		any = any || len(a.retired) > 0
	}
	if !any || e.sharedWithOther(sp, host) {
		return 0
	}
	stopped, err := e.stopAll(sp.id)
	defer e.resumeStopped(stopped)
	if err != nil {
		return 0
	}
	var pcs []uint64
	if why := e.stackScan(sp, host, false, func(tid, kind int, at, v uint64) bool {
		pcs = append(pcs, v)
		return true
	}); why != "" {
		return 0
	}
	busy := func(s span) bool {
		for _, pc := range pcs {
			if pc >= s.lo && pc < s.hi {
				return true
			}
		}
		return false
	}
	n := 0
	for _, a := range areas {
		n += a.settle(busy)
	}
	if sp.jump != nil && n > 0 {
		// the pads given back are no longer pads
		keep := sp.jump.pads[:0]
		for _, bp := range sp.jump.pads {
			if bp.retired && !busy(span{bp.at, bp.end}) {
				continue
			}
			keep = append(keep, bp)
		}
		sp.jump.pads = keep
		if sp.jump.rg != nil {
			e.freeRegionSlots(sp.jump.rg)
		}
	}
	return n
}

// freeRegionSlots gives back the site numbers (counters) and modules'
// variables of a region that no pad of any space using the region can
// reach any more: the ring is moved out first (moveAll), so that the
// records of a site are committed as its probe's, and its counters are
// folded into the probe's.
func (e *Engine) freeRegionSlots(rg *region) {
	usedSite := map[int]bool{}
	usedMod := map[*Module]bool{}
	for _, o := range e.spaces {
		if o.jump == nil || o.jump.rg != rg {
			continue
		}
		for _, bp := range o.jump.pads {
			for _, n := range bp.sites {
				usedSite[n] = true
			}
			for _, m := range bp.mods {
				usedMod[m] = true
			}
		}
	}
	for _, m := range e.book.Modules() {
		usedMod[m.Impl.(*Module)] = true // still in: its variables stay where they are
	}
	e.moveAll()
	e.js.mu.Lock()
	defer e.js.mu.Unlock()
	for i, s := range rg.sites {
		if s.p == nil || usedSite[i] {
			continue
		}
		cp := pad.CountersAt(rg.mem.Bytes, i)
		c := pad.LoadCounters(cp)
		s.p.st.Hits += c.Hits
		s.p.st.Skipped += c.Skipped
		s.p.st.Runs += c.Runs
		s.p.st.Faults += c.Faults
		s.p.lost += c.Lost
		if c.Disabled != 0 {
			s.p.st.Disabled = true
		}
		clear(rg.mem.Bytes[pad.OffCounters+i*64 : pad.OffCounters+(i+1)*64])
		rg.sites[i] = siteRef{}
	}
	rg.publish()
	for m, off := range rg.lvAt {
		if usedMod[m] {
			continue
		}
		if cap(m.lv) > 0 && unsafe.SliceData(m.lv) == &rg.mem.Words(off, 1)[0] {
			m.lv = append([]uint64(nil), m.lv...)
		}
		clear(rg.mem.Words(off, rpn.MaxVars))
		delete(rg.lvAt, m)
		rg.lvFree = append(rg.lvFree, off)
	}
}

// unmapAreas unmaps everything gprobes mapped in a space it is letting
// go (detach: every thread stopped, the code restored), when no thread
// can be in any of it. A thread in sigOf has a signal to deliver with the
// detach and is not used to make the system calls. What cannot be
// unmapped stays, and Warn says why.
func (e *Engine) unmapAreas(sp *space, sigOf map[int][]Event) {
	host, ok := e.ab.jump, e.ab.jump != nil
	if !ok || sp == nil || sp.detached || sp.unmapped {
		return
	}
	var code, data []span
	for _, a := range sp.xol {
		code = append(code, span{a.base, a.base + a.size})
	}
	js := sp.jump
	if js != nil {
		for _, a := range js.areas {
			code = append(code, span{a.base, a.base + a.size})
		}
		if js.pool != 0 {
			data = append(data, span{js.pool, js.pool + pad.PoolSize})
		}
		if rg := js.rg; rg != nil {
			if rg.addr != 0 {
				data = append(data, span{rg.addr, rg.addr + uint64(len(rg.mem.Bytes))})
			}
			if rg.gv != 0 && e.gvShm != nil {
				data = append(data, span{rg.gv, rg.gv + uint64(len(e.gvShm.Bytes))})
			}
			if rg.sw != 0 && e.sw != nil && e.sw.mem != nil {
				data = append(data, span{rg.sw, rg.sw + uint64(len(e.sw.mem.Bytes))})
			}
			if rg.live != 0 {
				data = append(data, span{rg.live, rg.live + pad.LiveSize})
			}
		}
	}
	if len(code)+len(data) == 0 {
		return
	}
	leave := func(why string) {
		var kib uint64
		for _, s := range append(append([]span{}, code...), data...) {
			kib += (s.hi - s.lo) >> 10
		}
		e.warn(fmt.Sprintf("process %d: gprobes' %d KiB of areas stay mapped: %s", sp.id, kib, why))
	}
	if e.sharedWithOther(sp, host) {
		leave("another process shares its memory (a vfork child) and may be inside")
		return
	}
	ranges := make([][2]uint64, len(code))
	for i, s := range code {
		ranges[i] = [2]uint64{s.lo, s.hi}
	}
	e.runOut(sp, code, sigOf)
	if why := e.mayReturnInto(sp, host, ranges, "gprobes' code", false); why != "" {
		leave(why)
		return
	}
	for _, tid := range e.tgt.Threads(sp.id) {
		var r Regs
		if e.tgt.GetRegs(tid, &r) != nil {
			continue
		}
		if sp := r[rpn.RegRSP]; js != nil && js.pool != 0 && sp >= js.pool && sp < js.pool+pad.PoolSize {
			leave(fmt.Sprintf("thread %d runs on a pad's stack (rsp %#x)", tid, sp))
			return
		}
	}
	tid := 0
	for _, t := range e.tgt.Threads(sp.id) {
		if e.tgt.IsStopped(t) && len(sigOf[t]) == 0 {
			tid = t
			break
		}
	}
	if tid == 0 {
		leave("every thread has a signal to deliver")
		return
	}
	var failed []string
	for _, s := range append(code, data...) {
		if err := host.Unmap(sp.id, tid, s.lo, s.hi-s.lo); err != nil {
			failed = append(failed, fmt.Sprintf("%#x: %v", s.lo, err))
		}
	}
	if len(failed) > 0 {
		e.warn(fmt.Sprintf("process %d: unmap gprobes' areas: %v", sp.id, failed))
	}
	sp.xol = nil
	sp.unmapped = true
	if js != nil {
		js.areas, js.held, js.pads, js.pool = nil, nil, nil, 0
	}
}

// runOut lets the threads of a space whose pc is in gprobes' code (a pad,
// a slot being run through) run on a moment, and stops them again, until
// none is there: with the code restored, nothing leads back in, and each
// leaves by its jump back to the original code. A thread with a signal
// to deliver stays as it is (resumed with it, its handler would run from
// the pad). Every thread of the space is stopped before and after.
func (e *Engine) runOut(sp *space, code []span, sigOf map[int][]Event) {
	in := func(pc uint64) bool {
		for _, s := range code {
			if pc >= s.lo && pc < s.hi {
				return true
			}
		}
		return false
	}
	for round := 0; round < 100; round++ {
		var inside []int
		for _, tid := range e.tgt.Threads(sp.id) {
			var r Regs
			if len(sigOf[tid]) > 0 || !e.tgt.IsStopped(tid) || e.tgt.GetRegs(tid, &r) != nil {
				continue
			}
			if in(r[rpn.RegRIP]) {
				inside = append(inside, tid)
			}
		}
		if len(inside) == 0 {
			return
		}
		for _, tid := range inside {
			e.fail(e.tgt.Resume(tid, 0), "let thread %d out of gprobes' code", tid)
		}
		time.Sleep(time.Duration(round+1) * 20 * time.Microsecond)
		for _, tid := range inside {
			evs, err := e.tgt.StopThread(tid)
			if err != nil {
				continue // it exited
			}
			for _, ev := range evs {
				if ev.Kind == EvSignal && ev.Tid == tid {
					// delivered with the detach; it stays put now
					sigOf[tid] = append(sigOf[tid], ev)
				}
			}
		}
	}
}
