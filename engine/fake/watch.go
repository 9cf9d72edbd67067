package fake

import (
	"fmt"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/rpn"
)

// WatchTarget is the fake process with debug registers (engine.Watcher):
// an access of an instruction the fake runs (push, pop, call, ret and
// the two movs) to a watched range stops the thread with a trap after
// the instruction, as a CPU's data breakpoint does; WatchHit names the
// registers that fired. The registers are the process's (the fake starts
// no threads, so none goes without them). An access gprobes makes
// through WriteMem or ReadMem fires none, as on a CPU.
type WatchTarget struct{ *Target }

var _ engine.Watcher = WatchTarget{}

// DebugRegs: the fake uses none itself.
func (w WatchTarget) DebugRegs() [engine.NumWatch]string { return [engine.NumWatch]string{} }

func (w WatchTarget) SetWatch(space, slot int, wa engine.Watch) error {
	if space != Pid || slot < 0 || slot >= engine.NumWatch {
		return fmt.Errorf("fake: no debug register %d in space %d", slot, space)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.watches[slot] = &wa
	return nil
}

func (w WatchTarget) ClearWatch(space, slot int) error {
	if space != Pid || slot < 0 || slot >= engine.NumWatch {
		return fmt.Errorf("fake: no debug register %d in space %d", slot, space)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.watches[slot] = nil
	return nil
}

// WatchThread: the fake's registers are the process's already.
func (w WatchTarget) WatchThread(tid, space int) error { return nil }

func (w WatchTarget) WatchHit(tid int) (uint8, bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	th, err := w.thread(tid)
	if err != nil {
		return 0, false, err
	}
	fired, other := th.fired, th.firedStep
	th.fired, th.firedStep = 0, false
	return fired, other, nil
}

// clearWatches: the process is gone, and its debug registers with it.
func (t *Target) clearWatches() { t.watches = [engine.NumWatch]*engine.Watch{} }

// Watched is what debug register slot watches, nil when it is off.
func (t *Target) Watched(slot int) *engine.Watch {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w := t.watches[slot]; w != nil {
		c := *w
		return &c
	}
	return nil
}

// access notes an instruction's access of n bytes at addr: the debug
// registers it meets fire. A detached thread keeps them, as a process
// does after PTRACE_DETACH: it dies of the trap (step).
func (t *Target) access(th *Thread, addr uint64, n int, write bool) {
	for slot, w := range t.watches {
		if w == nil || (!write && w.Mode != rpn.WatchReadWrite) {
			continue
		}
		if addr < w.Addr+uint64(w.Len) && w.Addr < addr+uint64(n) {
			th.fired |= 1 << slot
		}
	}
}
