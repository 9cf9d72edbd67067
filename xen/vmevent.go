package xen

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// The vm_event route (GPROBES_XEN_ROUTE=vmevent, HVM and PVH domains):
// Xen's monitor ring instead of debugging mode, the way introspection tools
// (LibVMI, DRAKVUF, xen-access) take an HVM guest's events, and the only
// way on a hypervisor built without CONFIG_GDBSX, whose debugging mode
// reports nothing. With the monitor's debug-exception event enabled
// (synchronous), a #DB of the guest (a debug-register breakpoint, a
// single-step) pauses its vCPU and puts a request on a ring page shared
// with dom0, announced on an event channel. The monitor pauses the whole
// domain, which is what Xen's debugging mode does at a debug trap
// (domain_pause_for_debugger), answers the request, which lets the vCPU's
// own pause go, and wakes the targets as VIRQ_DEBUGGER would: from there
// the stop is handled exactly as on the debugging-mode route, and the
// domain runs on when the engine resumes it (one unpause per stop). The
// #DB is not given to the guest.
//
// Layouts: Xen 4.17's public vm_event.h (VM_EVENT_INTERFACE_VERSION 7),
// io/ring.h and domctl.h, checked with gcc's offsetof.
const (
	vmEventVersion = 7

	vmReqSize      = 400 // vm_event_request_t and vm_event_response_t
	vmRingEntries  = 8   // (4096 - 64) / 400, rounded down to a power of 2
	vmRingOff      = 64  // ring[] in the shared ring page
	vmOffFlags     = 4
	vmOffReason    = 8
	vmOffVCPU      = 12
	vmOffDebugGFN  = 24 // u.debug_exception.gfn
	vmOffPending   = 32 // u.debug_exception.pending_dbg
	vmOffInsnLen   = 40
	vmOffType      = 44
	vmOffRegs      = 56 // data.regs.x86
	vmOffRegRFLAGS = vmOffRegs + 128
	vmOffRegDR6    = vmOffRegs + 136
	vmOffRegRIP    = vmOffRegs + 152
	vmOffRegCR3    = vmOffRegs + 176

	vmFlagVCPUPaused = 1 << 0
	vmDR6Causes      = 0x400f // %dr6 B0-B3 and BS

	vmReasonSoftwareBreakpoint = 6
	vmReasonSingleStep         = 7
	vmReasonDebugException     = 9

	hvmParamMonitorRingPFN = 28

	domctlVMEventOp  = 56
	domctlMonitorOp  = 77
	vmEventEnable    = 0
	vmEventDisable   = 1
	vmEventOpMonitor = 2 // XEN_DOMCTL_VM_EVENT_OP_MONITOR

	monitorOpEnable       = 0
	monitorOpDisable      = 1
	monitorEventSoftBreak = 3 // XEN_DOMCTL_MONITOR_EVENT_SOFTWARE_BREAKPOINT
	monitorEventDebug     = 5 // XEN_DOMCTL_MONITOR_EVENT_DEBUG_EXCEPTION
)

// VMRequest is a vm_event request of the monitor ring.
type VMRequest [vmReqSize]byte

func (r *VMRequest) u32(off int) uint32 { return binary.LittleEndian.Uint32(r[off:]) }
func (r *VMRequest) u64(off int) uint64 { return binary.LittleEndian.Uint64(r[off:]) }

// Version, Flags, Reason, VCPU, RIP, DR6, CR3, PendingDbg and InsnLen of
// the request.
func (r *VMRequest) Version() uint32    { return r.u32(0) }
func (r *VMRequest) Flags() uint32      { return r.u32(vmOffFlags) }
func (r *VMRequest) Reason() uint32     { return r.u32(vmOffReason) }
func (r *VMRequest) VCPU() int          { return int(r.u32(vmOffVCPU)) }
func (r *VMRequest) RIP() uint64        { return r.u64(vmOffRegRIP) }
func (r *VMRequest) DR6() uint64        { return r.u64(vmOffRegDR6) }
func (r *VMRequest) CR3() uint64        { return r.u64(vmOffRegCR3) }
func (r *VMRequest) PendingDbg() uint64 { return r.u64(vmOffPending) }
func (r *VMRequest) InsnLen() uint32    { return r.u32(vmOffInsnLen) }

func (r *VMRequest) String() string {
	return fmt.Sprintf("vm_event v%d reason %d vCPU %d flags %#x rip %#x dr6 %#x pending_dbg %#x", r.Version(), r.Reason(), r.VCPU(), r.Flags(), r.RIP(), r.DR6(), r.PendingDbg())
}

// response answers a request: the vCPU the request paused runs again (as
// far as the monitor is concerned), nothing else changed and no event
// given to the guest.
func (r *VMRequest) response() VMRequest {
	var rsp VMRequest
	binary.LittleEndian.PutUint32(rsp[0:], vmEventVersion)
	binary.LittleEndian.PutUint32(rsp[vmOffFlags:], r.Flags()&vmFlagVCPUPaused)
	binary.LittleEndian.PutUint32(rsp[vmOffReason:], r.Reason())
	binary.LittleEndian.PutUint32(rsp[vmOffVCPU:], uint32(r.VCPU()))
	return rsp
}

// vmRing is the back end of the shared ring page (io/ring.h): dom0 takes
// requests and puts responses. Xen is the front end.
type vmRing struct {
	page    []byte
	reqCons uint32 // next request to take
	rspProd uint32 // next response slot
}

// The shared ring's indexes: req_prod, req_event, rsp_prod, rsp_event.
func (g *vmRing) idx(i int) *uint32 { return (*uint32)(unsafe.Pointer(&g.page[4*i])) }

// init is SHARED_RING_INIT and BACK_RING_INIT: empty, notifications
// wanted at the next index.
func (g *vmRing) init() {
	clear(g.page[:vmRingOff])
	atomic.StoreUint32(g.idx(1), 1)
	atomic.StoreUint32(g.idx(3), 1)
	g.reqCons, g.rspProd = 0, 0
}

// take returns the requests Xen has put since the last take.
func (g *vmRing) take() []VMRequest {
	var reqs []VMRequest
	for {
		prod := atomic.LoadUint32(g.idx(0))
		for ; g.reqCons != prod; g.reqCons++ {
			var r VMRequest
			off := vmRingOff + int(g.reqCons%vmRingEntries)*vmReqSize
			copy(r[:], g.page[off:off+vmReqSize])
			reqs = append(reqs, r)
		}
		// RING_FINAL_CHECK_FOR_REQUESTS: ask to be told of the next one,
		// then look once more
		atomic.StoreUint32(g.idx(1), g.reqCons+1)
		if atomic.LoadUint32(g.idx(0)) == g.reqCons {
			return reqs
		}
	}
}

// put queues responses and publishes them (RING_PUSH_RESPONSES).
func (g *vmRing) put(rsps []VMRequest) {
	for _, rsp := range rsps {
		off := vmRingOff + int(g.rspProd%vmRingEntries)*vmReqSize
		copy(g.page[off:off+vmReqSize], rsp[:])
		g.rspProd++
	}
	atomic.StoreUint32(g.idx(2), g.rspProd)
}

// vmHypervisor is what the monitor asks of the hypervisor: *Hypervisor,
// or a replay of recorded answers in the tests.
type vmHypervisor interface {
	Pause(dom uint16) error
	HVMParam(dom uint16, index uint32) (uint64, error)
	VMEventOp(dom uint16, op uint32) (port uint32, err error)
	MonitorOp(dom uint16, op, event uint32, sync bool) error
	GetContext(dom uint16, vcpu int, ctx *Context) error
	SetContext(dom uint16, vcpu int, ctx *Context) error
	mapRing(dom uint16, gfn uint64) ([]byte, error)
	unmapRing([]byte)
}

// vmChannel is the event channel to Xen's end of the ring.
type vmChannel interface {
	Bind(dom uint16, port uint32) error
	// Wait returns true when the channel fired, false when woken or out
	// of time.
	Wait() (bool, error)
	Notify() error
	Wake()
	Close() error
}

// vmMonitor is a domain's monitor ring, served by a goroutine.
type vmMonitor struct {
	hv     vmHypervisor
	ch     vmChannel
	dom    uint16
	ring   vmRing
	wake   func() // the targets' wake-up (wakeAll)
	record func(VMRequest)

	mu     sync.Mutex
	closed bool
	err    error // what ended the goroutine
	done   chan struct{}
	events int // requests answered
}

// startMonitor enables the monitor ring of a domain and its debug-exception
// events, and serves them until close.
func startMonitor(hv vmHypervisor, ch vmChannel, dom uint16, wake func(), record func(VMRequest)) (*vmMonitor, error) {
	m := &vmMonitor{hv: hv, ch: ch, dom: dom, wake: wake, record: record, done: make(chan struct{})}
	gfn, err := hv.HVMParam(dom, hvmParamMonitorRingPFN)
	if err != nil {
		return nil, fmt.Errorf("vm_event: the monitor ring's frame: %w", err)
	}
	if gfn == 0 {
		return nil, errors.New("vm_event: the domain has no monitor ring frame (HVM_PARAM_MONITOR_RING_PFN is 0)")
	}
	page, err := hv.mapRing(dom, gfn)
	if err != nil {
		return nil, fmt.Errorf("vm_event: map the monitor ring (frame %#x; another monitor, xen-access, may have taken it out of the guest's memory): %w", gfn, err)
	}
	m.ring.page = page
	m.ring.init()
	port, err := hv.VMEventOp(dom, vmEventEnable)
	if err != nil {
		hv.unmapRing(page)
		return nil, fmt.Errorf("vm_event: enable the monitor ring (EBUSY: another monitor has it): %w", err)
	}
	if err := ch.Bind(dom, port); err != nil {
		_, derr := hv.VMEventOp(dom, vmEventDisable)
		hv.unmapRing(page)
		return nil, errors.Join(fmt.Errorf("vm_event: bind event channel %d of the ring: %w", port, err), derr)
	}
	if err := hv.MonitorOp(dom, monitorOpEnable, monitorEventDebug, true); err != nil {
		ch.Close()
		_, derr := hv.VMEventOp(dom, vmEventDisable)
		hv.unmapRing(page)
		return nil, errors.Join(fmt.Errorf("vm_event: debug-exception events: %w", err), derr)
	}
	trace("vm_event: monitor ring at frame %#x, Xen's port %d", gfn, port)
	go m.serve()
	return m, nil
}

// serve answers the requests as they come: the domain paused first, then
// the vCPU let go, then the targets woken.
func (m *vmMonitor) serve() {
	defer close(m.done)
	for {
		_, err := m.ch.Wait()
		m.mu.Lock()
		closed := m.closed
		if err != nil {
			m.err = err
		}
		m.mu.Unlock()
		if closed || err != nil {
			return
		}
		if err := m.handle(true); err != nil {
			m.mu.Lock()
			m.err = err
			m.mu.Unlock()
			return
		}
	}
}

// handle takes the requests on the ring and answers them; with stops, a
// debug exception pauses the domain for the target, which then handles
// it as a stop.
func (m *vmMonitor) handle(stops bool) error {
	reqs := m.ring.take()
	if len(reqs) == 0 {
		return nil
	}
	rsps := make([]VMRequest, 0, len(reqs))
	for i := range reqs {
		r := &reqs[i]
		trace("%v", r)
		if m.record != nil {
			m.record(*r)
		}
		if stops && r.Reason() == vmReasonDebugException && r.Flags()&vmFlagVCPUPaused != 0 {
			// the debug trap's pause, which the target undoes as it
			// resumes the stop
			if err := m.hv.Pause(m.dom); err != nil {
				return err
			}
			// VMX reports the #DB's causes in pending_dbg and leaves
			// %dr6 alone (SVM has updated it): into %dr6, where the
			// target looks
			if p := r.PendingDbg() & vmDR6Causes; p != 0 {
				var ctx Context
				if err := m.hv.GetContext(m.dom, r.VCPU(), &ctx); err != nil {
					return err
				}
				if ctx.DebugReg(6)&p != p {
					ctx.SetDebugReg(6, ctx.DebugReg(6)|p)
					if err := m.hv.SetContext(m.dom, r.VCPU(), &ctx); err != nil {
						return err
					}
				}
			}
		}
		rsps = append(rsps, r.response())
	}
	m.ring.put(rsps)
	if err := m.ch.Notify(); err != nil {
		return err
	}
	m.mu.Lock()
	m.events += len(reqs)
	m.mu.Unlock()
	if stops {
		m.wake()
	}
	return nil
}

// close turns the events off, answers what is left on the ring and
// disables it. The domain keeps the pauses of stops not handled yet.
func (m *vmMonitor) close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	err := m.hv.MonitorOp(m.dom, monitorOpDisable, monitorEventDebug, false)
	m.ch.Wake()
	<-m.done
	if e := m.handle(false); e != nil && err == nil {
		err = e
	}
	if _, e := m.hv.VMEventOp(m.dom, vmEventDisable); e != nil && err == nil {
		err = e
	}
	m.ch.Close()
	m.hv.unmapRing(m.ring.page)
	return err
}
