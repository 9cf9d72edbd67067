package engine

import "github.com/gprobes/gprobes/rpn"

// Prober is what the daemon and `gprobes run` drive for one target: an
// Engine (a target that stops at its hits, driven through Target), or a
// target whose probes run without stopping anything, which plugs in beside
// the engine with the same life and the same answers (package kernel: the
// running kernel through eBPF).
//
// The life: Insert, Release (the target runs), Query, Vars, Remove and
// Modules while it runs, Ended/EndReason when it ends by itself, Close
// (every probe out, the last look at variables and probes).
type Prober interface {
	Insert(m *rpn.Module, mode InsertMode) ([]ProbeInfo, error)
	Release() error
	Remove(name string, minors []uint16) (int, error)
	// Switch switches a module's probes on or off (gprobes enable and
	// disable): those with the given minors, or all; it returns how many
	// probes that concerns. A minor no probe of the module has is an
	// error (ErrNoMinor) and switches nothing.
	Switch(name string, minors []uint16, on bool) (int, error)
	Modules() []string
	Query() []ProbeInfo
	// Vars returns a module's local variables and the global ones it
	// uses; reset zeroes them after reading.
	Vars(name string, reset bool) (lv, gv []uint64, err error)
	Ended() <-chan struct{}
	EndReason() string
	// Lost counts the records the target dropped before gprobes could
	// take them (a full ring).
	Lost() uint64
	// Pid is the process started or attached (0 for a kernel).
	Pid() int
	Close() (Final, error)
}

var _ Prober = (*Engine)(nil)

// SymbolAdder is a Prober that takes more symbol files after it started
// (a guest kernel: every insert may bring its own).
type SymbolAdder interface {
	AddSymbols(paths []string) error
}

// AddSymbols gives the target's OS more symbol files, if it takes them.
func (e *Engine) AddSymbols(paths []string) error {
	return e.WithTarget(func(tg Target) error {
		if g, ok := tg.OS().(SymbolLoader); ok {
			return g.AddSymbols(paths)
		}
		return nil
	})
}
