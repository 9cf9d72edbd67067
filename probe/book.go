package probe

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gprobes/gprobes/rpn"
)

// Book is what a Prober keeps of what was inserted: modules in insertion
// order, each with its sources (one an insert; --merge adds one) and
// their logical probes, each probe's state as query shows it. It decides
// what an insert, a merge, a replace and a remove do, which minors a
// switch reaches, which module's variables getvars reads, and words every
// answer and error, the same whatever runs the probes; the Prober's
// Mechanism does what touches the target: make room for variables, set
// switches, place probes, take them out, count hits.
//
// A Book is not safe for concurrent use: its Prober calls it from one
// place at a time (the engine from its loop, the kernel target under its
// lock), and the Mechanism is called back from there.
type Book struct {
	mech Mechanism
	mods []*Module
}

// Mechanism is what runs a Book's probes: the stop-based engine's
// breakpoints, pads and watches, the kernel's eBPF programs.
type Mechanism interface {
	// NewModule is told of a module's first insert, before anything
	// else of it: it may set m.Impl.
	NewModule(m *Module)
	// GrowVars makes room for n local variable words of m, keeping the
	// values of those it has (a merge may bring more).
	GrowVars(m *Module, n int) error
	// SetSwitch switches minor of m on or off.
	SetSwitch(m *Module, minor uint16, on bool) error
	// SwitchedOff reports whether minor of m is switched off.
	SwitchedOff(m *Module, minor uint16) bool
	// Place puts a new source's probes in where they can go, leaving
	// the others pending or refused with their reason.
	Place(s *Source)
	// TakeOut takes probes of s out of the target (a remove, the minors
	// a merge replaces, a replace): s.Probes no longer has them. When
	// s.Probes is empty the source is done with.
	TakeOut(s *Source, gone []*Probe) error
	// DropModule frees what the mechanism kept for a module gone.
	DropModule(m *Module)
	// Counts fills a probe's counts in info (hits, skipped, faults,
	// lost, missed, dropped, spaces) and reports whether max hits or rem
	// ended it.
	Counts(p *Probe, info *Info) (ended bool)
	// ReadVars reads m's local variables (m.Vars words) and the global
	// ones it uses (m.GVars words), zeroing them after when reset.
	ReadVars(m *Module, reset bool) (lv, gv []uint64, err error)
	// Warn reports a problem no command returns.
	Warn(msg string)
}

// Module is one inserted module.
type Module struct {
	Name   string
	Header rpn.Header // of its first insert
	// Sources are its inserts in order; one whose every probe was
	// removed is gone.
	Sources []*Source
	Vars    int // local variable words: the most any source has
	GVars   int // global variable words it uses
	Impl    any // the Mechanism's
}

// Source is one insert into a module: the builds of one DPDF (a pack of
// several, or one) and its probes.
type Source struct {
	Module *Module
	// Builds are the pack's builds; the first stands for them all in
	// what every build shares (names, minors, locations as written).
	Builds []*rpn.Module
	// Probes are those not removed, in order.
	Probes []*Probe
	// All are every probe by its index in the builds (a record's probe
	// number), never changed once the source is in: a reader of records
	// may use it without the Prober's lock.
	All  []*Probe
	Impl any // the Mechanism's
}

// First is the build that stands for the source.
func (s *Source) First() *rpn.Module { return s.Builds[0] }

// Probe is a logical probe: one DPDF probe of a source.
type Probe struct {
	Source *Source
	Index  int    // in the source's builds
	State  State  // as query shows it, before its counts
	Reason string // why it is pending, refused, gone
	How    string // how it runs: emulate, boost, step, branch, jump, tracepoint, fentry, kprobe...
	Addr   uint64 // where it is (the last space it went into)
	File   string // the file its module's name resolved to (the last space it went into)
	Impl   any    // the Mechanism's
}

// Def is the probe's definition as the source's first build has it.
func (p *Probe) Def() *rpn.Probe { return &p.Source.Builds[0].Probes[p.Index] }

// Module is the probe's module.
func (p *Probe) Module() *Module { return p.Source.Module }

// NewBook makes an empty book for a Prober's mechanism.
func NewBook(m Mechanism) *Book { return &Book{mech: m} }

// LoadPack checks the builds of a pack before they go into a book:
// there is one at least, and each passes rpn.Load's verification.
func LoadPack(builds []*rpn.Module) error {
	if len(builds) == 0 {
		return errors.New("insert: a pack of no build")
	}
	for _, m := range builds {
		if _, err := rpn.Load(m); err != nil {
			return fmt.Errorf("insert %s: %v", m.Name, err)
		}
	}
	return nil
}

// Module is the module of that name, or nil.
func (b *Book) Module(name string) *Module {
	for _, m := range b.mods {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// Modules are the modules in insertion order.
func (b *Book) Modules() []*Module { return b.mods }

// Names are the modules' names in insertion order.
func (b *Book) Names() []string {
	var out []string
	for _, m := range b.mods {
		out = append(out, m.Name)
	}
	return out
}

// Probes are every probe not removed, in insertion order.
func (b *Book) Probes() []*Probe {
	var out []*Probe
	for _, m := range b.mods {
		out = append(out, m.Probes()...)
	}
	return out
}

// Probes are the module's probes not removed, in insertion order.
func (m *Module) Probes() []*Probe {
	var out []*Probe
	for _, s := range m.Sources {
		out = append(out, s.Probes...)
	}
	return out
}

// noModule is the error for a name no insert gave.
func noModule(name string) error { return fmt.Errorf("%w %q", ErrNoModule, name) }

// Insert enters a pack's builds (checked by LoadPack) as a new source of
// the module they name, as mode says, and has the mechanism place its
// probes. It returns the source; its probes' Info is the insert's answer.
func (b *Book) Insert(builds []*rpn.Module, mode InsertMode) (*Source, error) {
	first := builds[0]
	name := first.Name
	m := b.Module(name)
	switch {
	case m != nil && mode == InsertNew:
		return nil, fmt.Errorf("insert %s: %w: use --merge to add these probes to it, or --replace to replace it", name, ErrModuleIn)
	case m != nil && mode == InsertReplace:
		if err := b.drop(m); err != nil {
			b.mech.Warn(fmt.Sprintf("insert %s --replace: the module's probes are out of the books, not all of its code is restored: %v", name, err))
		}
		m = nil
	case m != nil && mode == InsertMerge:
		if m.Header.ModType != first.ModType || m.Header.Arch != first.Arch {
			return nil, fmt.Errorf("insert %s --merge: modtype or arch differ from the module in", name)
		}
	}
	if m == nil {
		m = &Module{Name: name, Header: first.Header}
		b.mods = append(b.mods, m)
		b.mech.NewModule(m)
	}
	// a module that fails before its first source is in goes
	failed := func(err error) (*Source, error) {
		if len(m.Sources) == 0 {
			if derr := b.drop(m); derr != nil {
				b.mech.Warn(fmt.Sprintf("insert %s: %v", name, derr))
			}
		}
		return nil, fmt.Errorf("insert %s: %w", name, err)
	}
	if int(first.Vars) > m.Vars {
		if err := b.mech.GrowVars(m, int(first.Vars)); err != nil {
			return failed(err)
		}
		m.Vars = int(first.Vars)
	}
	m.GVars = max(m.GVars, int(first.GVars))
	if mode == InsertMerge {
		// the new source's probes replace those with their minors
		var minors []uint16
		for i := range first.Probes {
			if mi := first.Probes[i].Minor; !slices.Contains(minors, mi) {
				minors = append(minors, mi)
			}
		}
		if _, err := b.remove(m, minors); err != nil {
			b.mech.Warn(fmt.Sprintf("insert %s --merge: %v", name, err))
		}
	}
	// enabled = no inserts a minor switched off, and a minor the file
	// has inserts switched on again (a merge's probes start as their file
	// says, whatever the minor's probes before them were switched to)
	for i := range first.Probes {
		d := &first.Probes[i]
		if err := b.mech.SetSwitch(m, d.Minor, !d.Disabled); err != nil {
			return failed(err)
		}
	}
	s := &Source{Module: m, Builds: builds}
	for i := range first.Probes {
		s.Probes = append(s.Probes, &Probe{Source: s, Index: i, State: StatePending})
	}
	s.All = slices.Clone(s.Probes)
	m.Sources = append(m.Sources, s)
	b.mech.Place(s)
	return s, nil
}

// remove takes out m's probes with the given minors (all for none),
// source by source; a source left without probes goes. It returns how
// many went; the errors are the mechanism's, the probes are out of the
// book all the same.
func (b *Book) remove(m *Module, minors []uint16) (int, error) {
	n := 0
	var errs []error
	srcs := m.Sources[:0]
	for _, s := range m.Sources {
		var keep, gone []*Probe
		for _, p := range s.Probes {
			if len(minors) == 0 || slices.Contains(minors, p.Def().Minor) {
				gone = append(gone, p)
			} else {
				keep = append(keep, p)
			}
		}
		if len(gone) > 0 {
			s.Probes = keep
			if err := b.mech.TakeOut(s, gone); err != nil {
				errs = append(errs, err)
			}
			for _, p := range gone {
				p.State = StateRemoved
			}
			n += len(gone)
		}
		if len(s.Probes) > 0 {
			srcs = append(srcs, s)
		}
	}
	clear(m.Sources[len(srcs):])
	m.Sources = srcs
	return n, errors.Join(errs...)
}

// drop takes a whole module out.
func (b *Book) drop(m *Module) error {
	_, err := b.remove(m, nil)
	b.mech.DropModule(m)
	if i := slices.Index(b.mods, m); i >= 0 {
		b.mods = slices.Delete(b.mods, i, i+1)
	}
	return err
}

// Remove takes out a module's probes with the given minors, or all of
// them; the module goes with its last probe. It returns how many went.
func (b *Book) Remove(name string, minors []uint16) (int, error) {
	m := b.Module(name)
	if m == nil {
		return 0, noModule(name)
	}
	n, err := b.remove(m, minors)
	if len(m.Sources) == 0 {
		if derr := b.drop(m); derr != nil {
			err = errors.Join(err, derr)
		}
	}
	return n, err
}

// DropAll takes every module out (a Prober's Close).
func (b *Book) DropAll() error {
	var errs []error
	for len(b.mods) > 0 {
		if err := b.drop(b.mods[0]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Switch switches a module's probes on or off: those with the given
// minors, or all. It returns how many probes that concerns; a minor no
// probe of the module has is an error (ErrNoMinor) and switches nothing.
func (b *Book) Switch(name string, minors []uint16, on bool) (int, error) {
	m := b.Module(name)
	if m == nil {
		return 0, noModule(name)
	}
	var have []uint16
	for _, p := range m.Probes() {
		have = append(have, p.Def().Minor)
	}
	var err error
	n, serr := SwitchMinors(name, have, minors, func(mi uint16) {
		if e := b.mech.SetSwitch(m, mi, on); e != nil && err == nil {
			err = e
		}
	})
	if serr != nil {
		return 0, serr
	}
	return n, err
}

// Vars reads a module's local variables and the global ones it uses,
// zeroing them after when reset.
func (b *Book) Vars(name string, reset bool) (lv, gv []uint64, err error) {
	m := b.Module(name)
	if m == nil {
		return nil, nil, noModule(name)
	}
	return b.mech.ReadVars(m, reset)
}

// Info is a probe as query shows it: what the book keeps, the
// mechanism's counts, and the disabled state of a probe in that max hits
// or rem ended, or that is switched off.
func (b *Book) Info(p *Probe) Info {
	d := p.Def()
	info := Info{Module: p.Module().Name, Minor: d.Minor, Location: d.Loc.Text, File: p.File, Kind: KindName(d), Address: p.Addr,
		State: p.State, Reason: p.Reason, How: p.How, Writes: rpn.WriteKinds(rpn.ProbeWrites(p.Source.First(), p.Index)),
		Log: rpn.FormatLayouts(rpn.LogLayouts(p.Source.First(), p.Index)), Format: d.Format}
	ended := b.mech.Counts(p, &info)
	info.Disable(ended, !ended && b.mech.SwitchedOff(p.Module(), d.Minor))
	return info
}

// Disable gives an Info of a probe in (active) the disabled state it has:
// ended by max hits or rem, for good, or switched off.
func (info *Info) Disable(ended, off bool) {
	if info.State != StateActive && info.State != StateDisabled {
		return
	}
	switch {
	case ended:
		info.State, info.Reason = StateDisabled, ReasonEnded
	case off:
		info.State, info.Reason = StateDisabled, ReasonSwitchedOff(info.Minor)
	}
}

// Query is every probe as query shows it, in insertion order.
func (b *Book) Query() []Info {
	var out []Info
	for _, p := range b.Probes() {
		out = append(out, b.Info(p))
	}
	return out
}

// Infos are a source's probes as the insert answers.
func (b *Book) Infos(s *Source) []Info {
	var out []Info
	for _, p := range s.Probes {
		out = append(out, b.Info(p))
	}
	return out
}

// Final is the last look: every probe and every module's variables.
// Errors reading variables are reported to the mechanism's Warn.
func (b *Book) Final() Final {
	f := Final{Probes: b.Query()}
	for _, m := range b.mods {
		lv, gv, err := b.mech.ReadVars(m, false)
		if err != nil {
			b.mech.Warn(fmt.Sprintf("module %s: its variables at the end: %v", m.Name, err))
		}
		f.Vars = append(f.Vars, ModuleVars{Name: m.Name, LV: lv, GV: gv})
	}
	return f
}

// Wait gives a pending probe the reason it waits. unloaded is the reason
// of a module that was loaded and went: it stays until the module is back;
// another is given only to a probe without one.
func (p *Probe) Wait(reason string, unloaded bool) {
	if p.State == StatePending && (unloaded || p.Reason == "") {
		p.Reason = reason
	}
}

// ReasonNotLoaded and ReasonUnloaded are a pending probe's reason when its
// kernel module is not loaded, and when it was loaded and went (a guest's
// kernel, the running kernel alike).
func ReasonNotLoaded(kmod string) string { return "kernel module " + kmod + " is not loaded" }

// ReasonUnloaded: see ReasonNotLoaded.
func ReasonUnloaded(kmod string) string {
	return "kernel module " + kmod + " was unloaded; its probes go in again when it is loaded"
}
