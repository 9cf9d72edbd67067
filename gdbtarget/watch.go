package gdbtarget

import (
	"errors"
	"fmt"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/gdbremote"
	"github.com/gprobes/gprobes/rpn"
)

// Watch probes through a stub: its watchpoints, Z2 (writes) and Z4 (reads
// and writes). QEMU's gdbstub sets them in every vCPU (under TCG in its
// softmmu, any number, checked on each access: the engine keeps to four
// like every target); a hit stops the vCPU after the instruction that made
// the access, with "watch:ADDR" or "awatch:ADDR" in the stop reply (ADDR
// the start of the watchpoint that matched first), and rip on the next
// instruction. QEMU does not put them into the guest's debug registers:
// the guest's own use of those is untouched. A stub without watchpoints
// answers Z2 empty (gdbsx): the watch is refused, naming it.
//
// The stop names one watchpoint, the first in QEMU's list that matches
// (the one set last comes first): a write into a w watch's bytes that an
// rw watch also covers would be reported "awatch" if the rw one came
// first, and look like a read. So every Z2 is set again after a Z4: a
// write the Z2 covers says "watch", and fires the w watches there and the
// rw ones that overlap it; "awatch" is a read, or a write outside every w
// watch, and fires the rw watches there.

var _ engine.Watcher = (*Target)(nil)

// DebugRegs: the stub's watchpoints are its own; none is in use by gprobes
// for anything else.
func (t *Target) DebugRegs() [engine.NumWatch]string { return [engine.NumWatch]string{} }

func watchKind(m rpn.WatchMode) gdbremote.WatchKind {
	if m == rpn.WatchReadWrite {
		return gdbremote.WatchAccess
	}
	return gdbremote.WatchWrite
}

// SetWatch asks the stub for a watchpoint (Z2 or Z4).
func (t *Target) SetWatch(space, slot int, w engine.Watch) error {
	if slot < 0 || slot >= engine.NumWatch {
		return fmt.Errorf("no debug register DR%d", slot)
	}
	if err := t.ClearWatch(space, slot); err != nil {
		return err
	}
	if err := t.conn.SetWatchpoint(watchKind(w.Mode), w.Addr, w.Len); err != nil {
		if errors.Is(err, gdbremote.ErrUnsupported) {
			return fmt.Errorf("the stub has no watchpoints (%v): gdbsx has none; the native target xen:DOMID watches a Xen guest", err)
		}
		return err
	}
	t.watch[slot] = &w
	if w.Mode == rpn.WatchReadWrite {
		// the w ones before it in the stub's list again
		for _, o := range t.watch {
			if o == nil || o.Mode != rpn.WatchWrite {
				continue
			}
			if err := t.conn.ClearWatchpoint(gdbremote.WatchWrite, o.Addr, o.Len); err != nil {
				return err
			}
			if err := t.conn.SetWatchpoint(gdbremote.WatchWrite, o.Addr, o.Len); err != nil {
				return err
			}
		}
	}
	return nil
}

// ClearWatch takes the stub's watchpoint out (z2 or z4).
func (t *Target) ClearWatch(space, slot int) error {
	if slot < 0 || slot >= engine.NumWatch {
		return fmt.Errorf("no debug register DR%d", slot)
	}
	w := t.watch[slot]
	if w == nil {
		return nil
	}
	t.watch[slot] = nil
	if t.gone || t.detach {
		return nil
	}
	return t.conn.ClearWatchpoint(watchKind(w.Mode), w.Addr, w.Len)
}

// WatchThread: a stub's watchpoints are in every vCPU already.
func (t *Target) WatchThread(tid, space int) error { return nil }

// WatchHit says which watches the last stop of a vCPU fired, from its
// stop reply (above).
func (t *Target) WatchHit(tid int) (uint8, bool, error) {
	ws, ok := t.watchStop[tid]
	if !ok {
		return 0, false, nil
	}
	delete(t.watchStop, tid)
	return t.watchFired(ws), false, nil
}

// watchStopOf is what a stop reply said of a watchpoint.
type watchStopOf struct {
	reason string // "watch", "awatch", "rwatch"
	addr   uint64 // the start of the watchpoint
}

func (t *Target) watchFired(ws watchStopOf) uint8 {
	in := func(w *engine.Watch, a uint64) bool { return a >= w.Addr && a < w.Addr+uint64(w.Len) }
	var fired uint8
	if ws.reason == "watch" {
		// a write, into the bytes of the w watch at addr
		lo, hi := ws.addr, ws.addr+1
		for _, w := range t.watch {
			if w != nil && w.Mode == rpn.WatchWrite && w.Addr == ws.addr {
				hi = max(hi, w.Addr+uint64(w.Len))
			}
		}
		for i, w := range t.watch {
			switch {
			case w == nil:
			case w.Mode == rpn.WatchWrite && in(w, ws.addr),
				w.Mode == rpn.WatchReadWrite && w.Addr < hi && lo < w.Addr+uint64(w.Len):
				fired |= 1 << i
			}
		}
		return fired
	}
	for i, w := range t.watch {
		if w != nil && w.Mode == rpn.WatchReadWrite && in(w, ws.addr) {
			fired |= 1 << i
		}
	}
	return fired
}

// isWatchStop reports whether a stop reply is a watchpoint's.
func isWatchStop(st gdbremote.Stop) bool {
	switch st.Reason {
	case "watch", "rwatch", "awatch":
		return true
	}
	return false
}
