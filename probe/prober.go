package probe

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gprobes/gprobes/rpn"
)

// Prober is what the daemon and `gprobes run` drive for one target: the
// stop-based engine (package engine: a target that stops at its hits),
// or a target whose probes run without stopping anything (package
// kernel: the running kernel through eBPF).
//
// The life: Insert, Release (the target runs), Query, Vars, Remove and
// Modules while it runs, Ended/EndReason when it ends by itself, Close
// (every probe out, the last look at variables and probes).
type Prober interface {
	Insert(m *rpn.Module, mode InsertMode) ([]Info, error)
	Release() error
	Remove(name string, minors []uint16) (int, error)
	// Switch switches a module's probes on or off (gprobes enable and
	// disable): those with the given minors, or all; it returns how many
	// probes that concerns. A minor no probe of the module has is an
	// error (ErrNoMinor) and switches nothing.
	Switch(name string, minors []uint16, on bool) (int, error)
	Modules() []string
	Query() []Info
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

// InsertMode says what to do when a module of the same name is in.
type InsertMode uint8

const (
	InsertNew     InsertMode = iota // refuse if the module is in
	InsertMerge                     // add the probes to the module in, keeping its variables
	InsertReplace                   // take the module in out first
)

// ErrModuleIn is returned when a module of that name is already inserted
// and neither merge nor replace was asked for.
var ErrModuleIn = errors.New("module already inserted")

// ErrNoModule is the error for a module name no insert gave.
var ErrNoModule = errors.New("no module")

// ErrNoMinor is Switch's error when the module has no probe with the
// minors named.
var ErrNoMinor = errors.New("no probe with that minor")

// PackInserter is a Prober that takes a pack of several builds of a
// module: Insert of a pack of one build is InsertPack of it.
type PackInserter interface {
	InsertPack(builds []*rpn.Module, mode InsertMode) ([]Info, error)
}

// RemoveCloser is a Prober that removes modules and, when none is left,
// closes, in one step (engine.RemoveClose): a target that only a hit or a
// pause can stop (gdbsx ignores ^C) then needs one stop for a remove.
type RemoveCloser interface {
	RemoveClose(match func(name string) bool, minors []uint16) (n int, found, closed bool, err error)
}

// RemoveClose removes from p the modules match selects (the probes of
// minors, or all) and closes p when no module is left: through
// RemoveClose when p has it, else with Modules, Remove and Close. It
// returns the probes removed, whether a module matched, and whether p
// closed.
func RemoveClose(p Prober, match func(name string) bool, minors []uint16) (n int, found, closed bool, err error) {
	if rc, ok := p.(RemoveCloser); ok {
		return rc.RemoveClose(match, minors)
	}
	var errs []error
	for _, name := range p.Modules() {
		if !match(name) {
			continue
		}
		found = true
		k, rerr := p.Remove(name, minors)
		n += k
		errs = append(errs, rerr)
	}
	if len(p.Modules()) == 0 {
		_, cerr := p.Close()
		errs = append(errs, cerr)
		closed = true
	}
	return n, found, closed, errors.Join(errs...)
}

// InsertPack inserts the builds of a pack into p: through InsertPack when
// p takes packs, else the one build there is.
func InsertPack(p Prober, builds []*rpn.Module, mode InsertMode) ([]Info, error) {
	if pi, ok := p.(PackInserter); ok {
		return pi.InsertPack(builds, mode)
	}
	if len(builds) != 1 {
		return nil, fmt.Errorf("insert %s: this target takes a pack of one build, and this one holds %d", builds[0].Name, len(builds))
	}
	return p.Insert(builds[0], mode)
}

// CopyInserter is a Prober that can place a pack's probes on every file
// of the pack's build that processes map, not only on the file the
// module's name names (the host target: docs/global.md).
type CopyInserter interface {
	InsertPackCopies(builds []*rpn.Module, mode InsertMode) ([]Info, error)
}

// SymbolAdder is a Prober that takes more symbol files after it started
// (a guest kernel: every insert may bring its own).
type SymbolAdder interface {
	AddSymbols(paths []string) error
}

// SwitchMinors switches the minors asked for (all of have when none is)
// with set, and returns how many probes they have (have: a probe's minor
// per probe). A minor not in have is an error and switches nothing.
func SwitchMinors(name string, have, minors []uint16, set func(uint16)) (int, error) {
	if len(minors) == 0 {
		for _, mi := range have {
			if !slices.Contains(minors, mi) {
				minors = append(minors, mi)
			}
		}
	}
	var missing []string
	n := 0
	for _, mi := range minors {
		k := 0
		for _, h := range have {
			if h == mi {
				k++
			}
		}
		if k == 0 {
			missing = append(missing, fmt.Sprint(mi))
		}
		n += k
	}
	if len(missing) > 0 {
		return 0, fmt.Errorf("module %s: %w %s", name, ErrNoMinor, strings.Join(missing, ", "))
	}
	for _, mi := range minors {
		set(mi)
	}
	return n, nil
}
