package xen

import (
	"fmt"

	"github.com/gprobes/gprobes/engine"
)

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
