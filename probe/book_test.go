package probe_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
)

// mech is a Mechanism that places every probe at once and writes down
// what the book asked of it.
type mech struct {
	log      []string
	lv       map[*probe.Module][]uint64
	off      map[string]bool // "module minor"
	hits     map[*probe.Probe]uint64
	ended    map[*probe.Probe]bool
	growErr  error
	takeErr  error
	warnings []string
}

func newMech() *mech {
	return &mech{lv: map[*probe.Module][]uint64{}, off: map[string]bool{}, hits: map[*probe.Probe]uint64{}, ended: map[*probe.Probe]bool{}}
}

func (f *mech) logf(format string, args ...any) { f.log = append(f.log, fmt.Sprintf(format, args...)) }

func (f *mech) NewModule(m *probe.Module) { f.logf("new %s", m.Name) }
func (f *mech) GrowVars(m *probe.Module, n int) error {
	if f.growErr != nil {
		return f.growErr
	}
	f.lv[m] = append(f.lv[m], make([]uint64, n-len(f.lv[m]))...)
	f.logf("vars %s %d", m.Name, n)
	return nil
}
func (f *mech) SetSwitch(m *probe.Module, minor uint16, on bool) error {
	f.off[fmt.Sprint(m.Name, minor)] = !on
	return nil
}
func (f *mech) SwitchedOff(m *probe.Module, minor uint16) bool {
	return f.off[fmt.Sprint(m.Name, minor)]
}
func (f *mech) Place(s *probe.Source) {
	for _, p := range s.Probes {
		p.State, p.How, p.Addr = probe.StateActive, "fake", uint64(0x1000+p.Index)
	}
	f.logf("place %s %d", s.Module.Name, len(s.Probes))
}
func (f *mech) TakeOut(s *probe.Source, gone []*probe.Probe) error {
	var minors []string
	for _, p := range gone {
		minors = append(minors, fmt.Sprint(p.Def().Minor))
	}
	f.logf("take out %s %s, %d left", s.Module.Name, strings.Join(minors, ","), len(s.Probes))
	return f.takeErr
}
func (f *mech) DropModule(m *probe.Module) { f.logf("drop %s", m.Name) }
func (f *mech) Counts(p *probe.Probe, info *probe.Info) bool {
	info.Hits = f.hits[p]
	return f.ended[p]
}
func (f *mech) ReadVars(m *probe.Module, reset bool) (lv, gv []uint64, err error) {
	lv = slices.Clone(f.lv[m][:m.Vars])
	if reset {
		clear(f.lv[m])
	}
	return lv, make([]uint64, m.GVars), nil
}
func (f *mech) Warn(msg string) { f.warnings = append(f.warnings, msg) }

func module(t *testing.T, src string) *rpn.Module {
	t.Helper()
	f, err := dpdf.ParseSource("m.dpdf", []byte(src), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := compiler.Compile(f, rpn.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func minorsOf(b *probe.Book) string {
	var out []string
	for _, info := range b.Query() {
		out = append(out, fmt.Sprintf("%s:%d", info.Module, info.Minor))
	}
	return strings.Join(out, " ")
}

// TestBook: what an insert, a merge, a replace, a remove, a switch and
// getvars do to a Prober's modules, with the errors every Prober gives.
func TestBook(t *testing.T) {
	f := newMech()
	b := probe.NewBook(f)
	one := module(t, "name = m\nmodtype = user\nvars = 2\ngvars = 1\noffset = 0x10\nminor = 1\nexit\noffset = 0x20\nminor = 2\nenabled = no\nexit\n")
	if err := probe.LoadPack(nil); err == nil || err.Error() != "insert: a pack of no build" {
		t.Errorf("LoadPack of nothing: %v", err)
	}
	s, err := b.Insert([]*rpn.Module{one}, probe.InsertNew)
	if err != nil {
		t.Fatal(err)
	}
	infos := b.Infos(s)
	if len(infos) != 2 || infos[0].State != probe.StateActive || infos[1].State != probe.StateDisabled ||
		infos[1].Reason != probe.ReasonSwitchedOff(2) || infos[0].Address != 0x1000 || infos[0].How != "fake" {
		t.Fatalf("insert: %+v", infos)
	}
	_, err = b.Insert([]*rpn.Module{one}, probe.InsertNew)
	if !errors.Is(err, probe.ErrModuleIn) || err.Error() != "insert m: module already inserted: use --merge to add these probes to it, or --replace to replace it" {
		t.Errorf("second insert: %v", err)
	}
	kern := module(t, "name = m\nmodtype = kernel\noffset = 0x10\nexit\n")
	if _, err := b.Insert([]*rpn.Module{kern}, probe.InsertMerge); err == nil || err.Error() != "insert m --merge: modtype or arch differ from the module in" {
		t.Errorf("merge of another modtype: %v", err)
	}

	// a merge: its minors replace the module's, the variables stay and
	// grow, its switches are as its file says
	f.lv[b.Module("m")][1] = 42
	f.hits[b.Module("m").Sources[0].Probes[0]] = 7
	two := module(t, "name = m\nmodtype = user\nvars = 3\noffset = 0x30\nminor = 2\nexit\noffset = 0x40\nminor = 3\nexit\n")
	if _, err := b.Insert([]*rpn.Module{two}, probe.InsertMerge); err != nil {
		t.Fatal(err)
	}
	if got := minorsOf(b); got != "m:1 m:2 m:3" {
		t.Errorf("after the merge: %s", got)
	}
	q := b.Query()
	if q[0].Hits != 7 || q[1].State != probe.StateActive || q[1].Location != "0x30" {
		t.Errorf("after the merge: %+v", q)
	}
	lv, gv, err := b.Vars("m", true)
	if err != nil || fmt.Sprint(lv) != "[0 42 0]" || len(gv) != 1 {
		t.Errorf("vars: %v %v %v", lv, gv, err)
	}
	if _, _, err := b.Vars("x", false); !errors.Is(err, probe.ErrNoModule) || err.Error() != `no module "x"` {
		t.Errorf("vars of no module: %v", err)
	}

	// switches: a minor the module lacks switches nothing
	if _, err := b.Switch("m", []uint16{1, 9}, false); !errors.Is(err, probe.ErrNoMinor) || err.Error() != "module m: no probe with that minor 9" {
		t.Errorf("switch of minor 9: %v", err)
	}
	if n, err := b.Switch("m", nil, false); n != 3 || err != nil {
		t.Errorf("switch all off: %d %v", n, err)
	}
	f.ended[b.Module("m").Sources[0].Probes[0]] = true
	if q := b.Query(); q[0].Reason != probe.ReasonEnded || q[2].Reason != probe.ReasonSwitchedOff(3) {
		t.Errorf("ended beats switched off: %+v", q)
	}

	// a remove by minor; the module goes with its last probe
	f.log = nil
	if n, err := b.Remove("m", []uint16{1}); n != 1 || err != nil {
		t.Errorf("remove minor 1: %d %v", n, err)
	}
	if len(b.Module("m").Sources) != 1 {
		t.Errorf("the first source has no probe left and stays: %d sources", len(b.Module("m").Sources))
	}
	f.takeErr = errors.New("the code could not be restored")
	if n, err := b.Remove("m", []uint16{2, 3}); n != 2 || err == nil || b.Module("m") != nil {
		t.Errorf("remove minors 2 and 3: %d %v, modules %v", n, err, b.Names())
	}
	f.takeErr = nil
	if want := "take out m 1, 0 left|take out m 2,3, 0 left|drop m"; strings.Join(f.log, "|") != want {
		t.Errorf("mechanism: %q, want %q", f.log, want)
	}
	if _, err := b.Remove("m", nil); !errors.Is(err, probe.ErrNoModule) {
		t.Errorf("remove of no module: %v", err)
	}

	// a replace takes the module out first, its errors a warning
	b.Insert([]*rpn.Module{one}, probe.InsertNew)
	f.log, f.takeErr = nil, errors.New("busy")
	if _, err := b.Insert([]*rpn.Module{two}, probe.InsertReplace); err != nil {
		t.Fatal(err)
	}
	if want := "take out m 1,2, 0 left|drop m|new m|vars m 3|place m 2"; strings.Join(f.log, "|") != want {
		t.Errorf("replace: %q, want %q", f.log, want)
	}
	if len(f.warnings) != 1 || f.warnings[0] != "insert m --replace: the module's probes are out of the books, not all of its code is restored: busy" {
		t.Errorf("warnings %q", f.warnings)
	}
	f.takeErr = nil

	// a module whose variables cannot be made does not stay
	f.growErr = errors.New("no memory")
	if _, err := b.Insert([]*rpn.Module{module(t, "name = n\nmodtype = user\nvars = 1\noffset = 1\nexit\n")}, probe.InsertNew); err == nil ||
		err.Error() != "insert n: no memory" || b.Module("n") != nil {
		t.Errorf("insert without room for variables: %v, modules %v", err, b.Names())
	}
	// one that is in stays as it was
	if _, err := b.Insert([]*rpn.Module{module(t, "name = m\nmodtype = user\nvars = 9\noffset = 1\nexit\n")}, probe.InsertMerge); err == nil || minorsOf(b) != "m:2 m:3" {
		t.Errorf("merge without room for variables: %v, probes %s", err, minorsOf(b))
	}
	f.growErr = nil

	if err := b.DropAll(); err != nil || len(b.Modules()) != 0 {
		t.Errorf("drop all: %v %v", err, b.Names())
	}
}

// TestWait: a pending probe's reason; an unload's stays until the module
// is back.
func TestWait(t *testing.T) {
	p := &probe.Probe{State: probe.StatePending}
	p.Wait(probe.ReasonNotLoaded("ext4"), false)
	p.Wait("another", false)
	if p.Reason != "kernel module ext4 is not loaded" {
		t.Errorf("reason %q", p.Reason)
	}
	p.Wait(probe.ReasonUnloaded("ext4"), true)
	p.Wait(probe.ReasonNotLoaded("ext4"), false)
	if p.Reason != "kernel module ext4 was unloaded; its probes go in again when it is loaded" {
		t.Errorf("reason %q", p.Reason)
	}
	p.State = probe.StateActive
	p.Wait("x", true)
	if p.Reason == "x" {
		t.Error("an active probe got a pending reason")
	}
}
