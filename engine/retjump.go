package engine

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gprobes/gprobes/x86"
)

// Return probes on jump pads (docs/engine.md, "Return probes on jump
// pads"). On a process, a return probe whose calls need no tracking (no
// probe of the function reads instance variables or sets maxactive, and
// the function cannot be left by a jump) runs at every return of the
// function; each of its rets then gets a jump pad instead of an int3: the
// jump covers the ret followed by alignment fill, or the instructions
// that end with it (x86.PlanRetJump), and the pad runs the instructions
// before the ret, then the probes with the registers after the ret (as
// the int3 route's emulated ret gives them), then the ret. The pads are
// the entry pads' (placeJump, buildPad with pad.Spec.Return): every rule
// of the jump route holds for them. A ret that cannot take a pad keeps
// its int3, and HOW names it.

// retPadsWhy says why the rets of fn cannot take pads at all ("" when
// they may), for probes that need no tracking; none reports that the
// target takes no pads (a guest), where HOW stays the int3 route's own.
func (e *Engine) retPadsWhy(fn *retFunc, probes []*eprobe) (why string, none bool) {
	if e.ab.jump == nil || e.os.Kernel() || e.opts.Route == RouteInt3 {
		return "", true
	}
	switch {
	case fn.goCode:
		return "Go code: goroutine stacks are too small for a pad's state, and the runtime moves them", false
	case fn.nout > 0:
		return fmt.Sprintf("the function can be left by a jump (%d %s out): its calls are tracked from the entry, on the int3 route", fn.nout, plural(fn.nout, "jump")), false
	case fn.entryIn:
		return "a return probe on it reads instance variables or sets maxactive: its calls are tracked from the entry, on the int3 route", false
	}
	for _, p := range probes {
		if needsEntry(p) {
			return "a return probe on it reads instance variables or sets maxactive: its calls are tracked from the entry, on the int3 route", false
		}
	}
	return "", false
}

// retProbesOf is every return probe on fn, in the order they run.
func retProbesOf(fn *retFunc) []*eprobe {
	var out []*eprobe
	for _, t := range fn.trackers {
		out = append(out, t.probes...)
	}
	return out
}

// retPadTry puts the ret at ret of fn (code: the function's original
// bytes) on a jump pad with probes: "" when it is in, else why not (the
// ret then takes an int3).
func (e *Engine) retPadTry(sp *space, inst *instance, fn *retFunc, code []byte, ret uint64, probes []*eprobe) string {
	host := e.ab.jump
	js := e.jumpSpace(sp)
	if js.no != "" {
		return js.no
	}
	if len(sp.calls.sites[ret]) > 0 {
		return "another probed function shares this ret"
	}
	if sp.bps[ret] != nil {
		return "an int3 probe is at the ret already"
	}
	plan := x86.PlanRetJump(code, fn.entry, ret, e.fillAfter(sp, inst, fn.entry-inst.bias, fn.end), 64)
	if !plan.OK() {
		return plan.Reason
	}
	first := plan.Covered[0].Addr
	lo, hi := x86.CoveredRange(plan, first)
	if inst.ld.Entries == nil {
		return "what else enters the function is unknown"
	}
	ents, err := inst.ld.Entries()
	if err != nil {
		return fmt.Sprintf("what else enters the function is unknown: %v", err)
	}
	if en, ok := ents.Inside(lo-inst.bias, hi-inst.bias); ok {
		return en.Describe(inst.bias, func(a uint64) string {
			if s, off, ok := inst.ld.Symbols.Nearest(a); ok {
				if off == 0 {
					return s.Name
				}
				return fmt.Sprintf("%s+%#x", s.Name, off)
			}
			return ""
		})
	}
	end := first + uint64(plan.Len)
	for a := range sp.bps {
		if a >= first && a < end {
			return fmt.Sprintf("another breakpoint (%#x) is inside the covered bytes", a)
		}
	}
	for a, s := range js.sites {
		if a < end && a+uint64(s.plan.Len) > first {
			return fmt.Sprintf("the jump of the probe at %#x overlaps", a)
		}
	}
	site := &jumpSite{addr: first, plan: plan, retFn: fn.entry, ret: ret, orig: make([]byte, plan.Len)}
	if err := e.readOriginal(sp, first, site.orig); err != nil {
		return fmt.Sprintf("read the covered bytes: %v", err)
	}
	if why := e.placeJump(sp, host, site, probes); why != "" {
		return why
	}
	fn.pads[ret] = first
	return ""
}

// fillAfter is the bytes from a function's end (end, in the space) to the
// next symbol, 16 at most (what a jump over a ret can use): its alignment
// fill, or nil. link is the function's link-time address.
func (e *Engine) fillAfter(sp *space, inst *instance, link, end uint64) []byte {
	set := inst.ld.Symbols
	if set == nil {
		return nil
	}
	next, ok := set.Next(link)
	if !ok || next.Addr+inst.bias <= end {
		return nil
	}
	b := make([]byte, min(next.Addr+inst.bias-end, 16))
	if e.readOriginal(sp, end, b) != nil {
		return nil
	}
	return b
}

// retPadSite is the jump site of fn's ret at ret, or nil.
func (sp *space) retPadSite(fn *retFunc, ret uint64) *jumpSite {
	if sp.jump == nil || fn.pads == nil {
		return nil
	}
	a, ok := fn.pads[ret]
	if !ok {
		return nil
	}
	if s := sp.jump.sites[a]; s != nil && s.retFn == fn.entry && s.ret == ret {
		return s
	}
	return nil
}

// retPadToInt3 takes a return probe's pad out (every thread stopped; the
// pad stays for threads inside it) and puts an int3 on its ret, with the
// function's return probes, why being HOW's.
func (e *Engine) retPadToInt3(sp *space, site *jumpSite, why string) error {
	fn := sp.calls.funcs[site.retFn]
	stopped, _ := e.stopAll(sp.id)
	err := e.unplant(sp, site.addr, site.orig)
	e.resumeStopped(stopped)
	if err != nil {
		return err
	}
	delete(sp.jump.sites, site.addr)
	e.retirePad(sp, site.pad)
	if fn == nil {
		return nil
	}
	delete(fn.pads, site.ret)
	fn.padWhy[site.ret] = why
	if err := e.ensureSite(sp, site.ret); err != nil {
		e.warn(fmt.Sprintf("return probe on %s: the ret at %#x left its jump pad and takes no int3 (%v): its returns there are not seen", fn.name, site.ret, err))
		fn.padWhy[site.ret] = why + "; no int3 either: " + err.Error()
	} else if bp := sp.bps[site.ret]; bp != nil {
		bp.probes = append(bp.probes, retProbesOf(fn)...)
	}
	e.retHow(fn)
	return nil
}

// retPadsOff moves every ret of fn on a pad to an int3 (a probe that
// needs the calls tracked came).
func (e *Engine) retPadsOff(sp *space, fn *retFunc, why string) error {
	for _, ret := range sortedKeys(fn.pads) {
		if site := sp.retPadSite(fn, ret); site != nil {
			if err := e.retPadToInt3(sp, site, why); err != nil {
				return err
			}
		}
	}
	fn.padsOff = why
	return nil
}

// retPadsRebuild gives every pad of fn a new pad with fn's return probes
// as they are now (one came or went), or takes it out when none is left.
func (e *Engine) retPadsRebuild(sp *space, fn *retFunc) {
	probes := retProbesOf(fn)
	if len(probes) == 0 {
		e.retPadsDrop(sp, fn)
		return
	}
	host := e.ab.jump
	for _, ret := range sortedKeys(fn.pads) {
		site := sp.retPadSite(fn, ret)
		if site == nil {
			continue
		}
		old, oldProbes := site.pad, site.probes
		why := e.buildPad(sp, host, sp.jump.rg, site, probes)
		if why == "" {
			if why = e.repoint(sp, site); why != "" {
				e.retirePad(sp, site.pad)
				site.pad, site.probes = old, oldProbes
			}
		}
		if why != "" {
			if err := e.retPadToInt3(sp, site, why); err != nil {
				e.warn(fmt.Sprintf("return probe on %s: the pad at %#x: %v", fn.name, site.addr, err))
			}
			continue
		}
		e.retirePad(sp, old)
	}
	e.retHow(fn)
}

// retPadsDrop puts back the code at every pad of fn (its last probe went).
func (e *Engine) retPadsDrop(sp *space, fn *retFunc) {
	if len(fn.pads) == 0 {
		return
	}
	for _, ret := range sortedKeys(fn.pads) {
		site := sp.retPadSite(fn, ret)
		delete(fn.pads, ret)
		if site == nil {
			continue
		}
		delete(sp.jump.sites, site.addr)
		if sp.detached {
			continue
		}
		stopped, _ := e.stopAll(sp.id)
		err := e.unplant(sp, site.addr, site.orig)
		e.resumeStopped(stopped)
		if err != nil {
			e.warn(fmt.Sprintf("return probe on %s: put back the code at %#x: %v", fn.name, site.addr, err))
			continue // the jump may still lead to the pad: not retired
		}
		e.retirePad(sp, site.pad)
	}
}

// retPadCovering is the return probe's jump site whose covered bytes hold
// addr (its first included), or nil: an offset probe there moves it to an
// int3.
func (e *Engine) retPadCovering(sp *space, addr uint64) *jumpSite {
	if sp.jump == nil {
		return nil
	}
	for a, s := range sp.jump.sites {
		if s.retFn != 0 && addr >= a && addr < a+uint64(s.plan.Len) {
			return s
		}
	}
	return nil
}

// retHow sets the HOW of fn's return probes.
func (e *Engine) retHow(fn *retFunc) {
	h := fn.howText(e)
	for _, t := range fn.trackers {
		for _, q := range t.probes {
			q.How = h
		}
	}
}

// padHow is HOW for a function whose rets may take pads (a process
// target): base is the int3 route's description ("ret: 2 returns, no entry
// stop").
func (fn *retFunc) padHow(base string) string {
	if len(fn.pads) == 0 {
		why := fn.padsOff
		if why == "" {
			var sites []string
			for _, ret := range sortedKeys(fn.padWhy) {
				sites = append(sites, fmt.Sprintf("the ret at %s: %s", fn.at(ret), fn.padWhy[ret]))
			}
			why = strings.Join(sites, "; ")
		}
		if why == "" {
			why = "return probes stay on the int3 route"
		}
		return "int3 " + base + ": " + why
	}
	s := fmt.Sprintf("jump ret: %d of %d %s on jump pads", len(fn.pads), fn.nret, plural(fn.nret, "return"))
	if len(fn.pads) == fn.nret {
		s = fmt.Sprintf("jump ret: %d %s on jump pads", fn.nret, plural(fn.nret, "return"))
	}
	s += ", no entry stop"
	for _, ret := range sortedKeys(fn.padWhy) {
		if _, ok := fn.pads[ret]; !ok {
			s += fmt.Sprintf("; int3 at the ret at %s: %s", fn.at(ret), fn.padWhy[ret])
		}
	}
	return s
}

// at names an address of fn: 0x401136 (f+0x16).
func (fn *retFunc) at(a uint64) string {
	return fmt.Sprintf("%#x (%s+%#x)", a, fn.name, a-fn.entry)
}

func sortedKeys[V any](m map[uint64]V) []uint64 {
	out := make([]uint64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
