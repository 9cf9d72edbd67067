package xen

import (
	"encoding/hex"
	"fmt"
	"os"
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
	case "", RouteDebug:
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
