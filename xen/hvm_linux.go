package xen

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"
)

// Routes of an HVM or PVH domain's events (GPROBES_XEN_ROUTE).
const (
	RouteDebug   = "debug"   // debugging mode: Xen pauses the domain at a debug trap, VIRQ_DEBUGGER (the default)
	RouteVMEvent = "vmevent" // Xen's monitor ring (vmevent.go)
)

// setupHVM takes an HVM or PVH domain (hvm.go): its breakpoint mode, and
// its route.
func (t *Target) setupHVM() error {
	mode, err := hvmBreakpoints(t.opts.Breakpoints)
	if err != nil {
		return err
	}
	t.hvm = t.opts.Breakpoints
	t.opts.Breakpoints = mode
	route := os.Getenv("GPROBES_XEN_ROUTE")
	trace("an HVM or PVH domain: breakpoints %s (asked %s), route %q", mode, t.hvm, route)
	switch route {
	case "":
		return fmt.Errorf("an HVM or PVH domain: name the route of its events, GPROBES_XEN_ROUTE=%s (debugging mode: a hypervisor with CONFIG_GDBSX; a debugger attached with gdbsx shares it) or %s (Xen's monitor ring: one client a domain, so not while LibVMI or DRAKVUF watch it); both are proven in the lab under QEMU 10.0 TCG, not on hardware (docs/xen.md, \"HVM and PVH domains\")", RouteDebug, RouteVMEvent)
	case RouteDebug:
		return nil
	case RouteVMEvent:
	default:
		return fmt.Errorf("GPROBES_XEN_ROUTE=%s: want %s or %s", route, RouteDebug, RouteVMEvent)
	}
	if mode != BreakDR {
		return fmt.Errorf("GPROBES_XEN_ROUTE=vmevent takes debug-register probes only (breakpoints auto or dr): software-breakpoint events are not used")
	}
	ch, err := openVMChannel()
	if err != nil {
		return err
	}
	m, err := startMonitor(t.hv, ch, t.dom, wakeAll, vmRecorder())
	if err != nil {
		ch.Close()
		return err
	}
	t.vme = m
	return nil
}

// vmRecorder appends each request, in hex, to the file
// GPROBES_XEN_VMEVENT_RECORD names (the lab's recording for the replay
// tests).
func vmRecorder() func(VMRequest) {
	path := os.Getenv("GPROBES_XEN_VMEVENT_RECORD")
	if path == "" {
		return nil
	}
	return func(r VMRequest) {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return
		}
		fmt.Fprintln(f, hex.EncodeToString(r[:]))
		f.Close()
	}
}

// closeHVM ends the vm_event route: events off, the ring answered and
// disabled.
func (t *Target) closeHVM() {
	if t.vme == nil {
		return
	}
	if err := t.vme.close(); err != nil {
		trace("vm_event: close: %v", err)
	}
	t.vme = nil
}

// drHint completes the refusal of a fifth probe address in mode dr.
func (t *Target) drHint() string {
	if t.hvm == BreakAuto {
		return hvmFull
	}
	return ""
}

// addressSize is the guest's word size. Xen answers get_address_size for
// PV domains only (EOPNOTSUPP for HVM); the HVM guest kernels gprobes
// probes are 64-bit ones in long mode.
func addressSize(hv *Hypervisor, dom uint16, info DomainInfo) (int, error) {
	if info.HVM() {
		return 64, nil
	}
	return hv.AddressSize(dom)
}

// StepResult is how a single-step of an HVM vCPU came back (StepEvent).
type StepResult struct {
	Route               string
	RIPBefore, RIPAfter uint64
	DR6                 uint64 // the vCPU's %dr6 at the stop
	Request             string // the vm_event request, hex (route vmevent)
	After               time.Duration
}

// StepEvent sets the trap flag of vCPU 0 of an HVM or PVH domain and
// waits for the #DB to come back to dom0 by route (RouteDebug: debugging
// mode pauses the domain; RouteVMEvent: a request on the monitor ring),
// then clears it and lets the domain go. It is the lab's probe of which
// events QEMU TCG delivers for an HVM guest (lab/xenlab/xenrecord).
func StepEvent(dom int, route string, timeout time.Duration) (res StepResult, err error) {
	res = StepResult{Route: route}
	hv, err := OpenHypervisor()
	if err != nil {
		return res, err
	}
	defer hv.Close()
	d := uint16(dom)
	reqs := make(chan VMRequest, 8)
	switch route {
	case RouteDebug:
		if err := hv.SetDebugging(d, true); err != nil {
			return res, err
		}
		defer func() { err = errors.Join(err, hv.SetDebugging(d, false)) }()
	case RouteVMEvent:
		ch, err := openVMChannel()
		if err != nil {
			return res, err
		}
		m, err := startMonitor(hv, ch, d, func() {}, func(r VMRequest) {
			select {
			case reqs <- r:
			default:
			}
		})
		if err != nil {
			ch.Close()
			return res, err
		}
		defer func() { err = errors.Join(err, m.close()) }()
	default:
		return res, fmt.Errorf("route %q", route)
	}
	var ctx Context
	if err := hv.Pause(d); err != nil {
		return res, err
	}
	if err := hv.GetContext(d, 0, &ctx); err != nil {
		return res, errors.Join(err, hv.Unpause(d))
	}
	res.RIPBefore = ctx.RIP()
	ctx.SetRFLAGS(ctx.RFLAGS() | flagTF)
	if err := hv.SetContext(d, 0, &ctx); err != nil {
		return res, errors.Join(err, hv.Unpause(d))
	}
	start := time.Now()
	if err := hv.Unpause(d); err != nil {
		return res, err
	}
	// the stop: the domain paused by the #DB (debugging mode), or by the
	// monitor as it answered the request
	deadline := start.Add(timeout)
	for {
		select {
		case r := <-reqs:
			res.Request = hex.EncodeToString(r[:])
		default:
		}
		info, err := hv.Info(d)
		if err != nil {
			return res, err
		}
		if info.Paused() && (route == RouteDebug || res.Request != "") {
			break
		}
		if time.Now().After(deadline) {
			// no #DB came back: take the trap flag out again
			perr := hv.Pause(d)
			if perr == nil {
				if perr = hv.GetContext(d, 0, &ctx); perr == nil {
					ctx.SetRFLAGS(ctx.RFLAGS() &^ flagTF)
					perr = hv.SetContext(d, 0, &ctx)
				}
				perr = errors.Join(perr, hv.Unpause(d))
			}
			if perr != nil {
				perr = fmt.Errorf("and taking the trap flag out: %w", perr)
			}
			return res, errors.Join(fmt.Errorf("no #DB of the single-step came back by route %s in %v", route, timeout), perr)
		}
		time.Sleep(time.Millisecond)
	}
	res.After = time.Since(start)
	if err := hv.GetContext(d, 0, &ctx); err != nil {
		return res, err
	}
	res.RIPAfter, res.DR6 = ctx.RIP(), ctx.DebugReg(6)
	ctx.SetRFLAGS(ctx.RFLAGS() &^ flagTF)
	ctx.SetDebugReg(6, ctx.DebugReg(6)&^vmDR6Causes)
	if err := hv.SetContext(d, 0, &ctx); err != nil {
		return res, err
	}
	return res, hv.Unpause(d)
}
