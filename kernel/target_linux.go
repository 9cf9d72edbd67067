//go:build linux

package kernel

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
)

// Options configure the kernel target.
type Options struct {
	Sink probe.Sink
	// Warn receives problems that concern no single command; nil drops
	// them.
	Warn func(msg string)
	// RingSize is each module's ring buffer, bytes (a power of two, a
	// multiple of the page size); 0: DefaultRingSize.
	RingSize int
	// PID, when not zero, restricts every probe to one process (root PID
	// namespace): other processes' hits are not hits of the probe.
	PID int
	// Children: with PID, the processes it starts from then on (and
	// theirs) count too (bpf.Follow).
	Children bool
	// Symbols: a vmlinux with DWARF (file:line locations), System.map.
	Symbols []string
	// Poll is how often the module list is read for pending modules (0:
	// one second).
	Poll time.Duration
}

// DefaultRingSize is a module's ring buffer unless Options.RingSize says:
// 16 MiB. A program commits without waiting for gprobes' reader (which
// it wakes once, when 64 KiB wait), so the ring is what absorbs a burst:
// 300,000 getppid hits logging two words as fast as they came lost about
// a third of their records with 1 MiB here, none with 16 MiB.
const DefaultRingSize = 16 << 20

// Target is the running kernel.
type Target struct {
	opts    Options
	mu      sync.Mutex // everything below; the readers call the Sink without it
	modules []*module
	gv      *ebpf.Map
	gvWords int
	syms    *ksyms
	kmem    *kmem
	mech    bpf.Mechanisms
	closed  bool
	ended   chan struct{}
	stop    chan struct{}
	poller  sync.WaitGroup
	readers sync.WaitGroup
	lost    uint64 // records lost by modules removed since
	// follow: with Options.PID, that process and every process it
	// starts, kept in the kernel (bpf.Follow); nil when it could not be
	// made (then the probes count Options.PID's hits alone)
	follow *bpf.Follow
}

// module is one inserted module: its sources (one per insert, --merge
// adds), sharing the lv map.
type module struct {
	name   string
	header rpn.Header
	srcs   []*source
	lv     *ebpf.Map // shared by the sources; nil without vars
	sw     *ebpf.Map // the switches, shared by the sources (switch_linux.go)
	gvars  int
	// kmod: a kernel module's name ("" for the kernel image)
	kmod string
}

// source is one inserted rpn.Module: its maps, programs and ring reader.
type source struct {
	mod *module
	src *rpn.Module // the build placed (or to place): one of builds
	// builds are the pack's builds of the source, one when it is not a
	// pack of several: place takes the running build's (build_linux.go)
	builds []*rpn.Module
	prog   *rpn.Program // relocated for the running kernel; nil while pending
	maps   *bpf.Maps
	reader *bpf.Reader
	done   chan struct{}          // the reader goroutine ended
	stop   *atomic.Bool           // tells the reader to drain and end
	btf    *btf.Cache             // while place loads the source's programs
	iv     map[int]*bpf.IVOptions // the probes with a part in calls' instances (iv_linux.go), by index; nil if none
	probes []*bprobe              // those not removed
	// all are the source's probes by their index in src (a record's
	// probe id), set before its reader starts and never changed: the
	// reader reads it without the lock
	all []*bprobe
}

// bprobe is the kernel target's logical probe: one DPDF probe of an
// inserted source, its program and its link.
type bprobe struct {
	s      *source
	idx    int
	state  probe.State
	reason string
	how    string
	addr   uint64
	prog   *ebpf.Program
	link   link.Link
	// last counters read while the program was loaded (kept across an
	// unload of its kernel module)
	base bpf.Counters
}

func (p *bprobe) def() *rpn.Probe { return &p.s.src.Probes[p.idx] }

// Start checks that this kernel and process can run eBPF probes and
// opens the target. It touches nothing in the kernel but the maps it
// makes.
func Start(o Options) (*Target, error) {
	if err := bpf.Available(); err != nil {
		return nil, fmt.Errorf("kernel target: %w", err)
	}
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	if o.RingSize <= 0 {
		o.RingSize = DefaultRingSize
	}
	t := &Target{opts: o, ended: make(chan struct{}), stop: make(chan struct{})}
	t.mech = probeMechanisms()
	t.removeStale()
	var err error
	if t.gv, err = bpf.NewGV(); err != nil {
		return nil, fmt.Errorf("kernel target: the gv map: %w", err)
	}
	if t.kmem, err = newKmem(); err != nil {
		t.warn(fmt.Sprintf("kernel text cannot be read through eBPF (%v): opcode checks refuse, instruction boundaries are left to kprobes", err))
		t.kmem = nil
	}
	if t.syms, err = loadKsyms(o.Symbols); err != nil {
		t.gv.Close()
		if t.kmem != nil {
			t.kmem.close()
		}
		return nil, fmt.Errorf("kernel target: %w", err)
	}
	if o.PID != 0 && o.Children {
		if t.follow, err = bpf.NewFollow(uint32(o.PID)); err != nil {
			t.warn(fmt.Sprintf("the processes process %d starts are not probed, only it: %v", o.PID, err))
		}
	}
	t.poller.Add(1)
	go t.poll()
	return t, nil
}

func (t *Target) warn(msg string) {
	if t.opts.Warn != nil {
		t.opts.Warn(msg)
	}
}

// Release: the kernel was never held.
func (t *Target) Release() error { return nil }

// Ended is closed by Close: the kernel does not end.
func (t *Target) Ended() <-chan struct{} { return t.ended }

// EndReason is "" while the target is open.
func (t *Target) EndReason() string {
	select {
	case <-t.ended:
		return "closed"
	default:
		return ""
	}
}

// Pid is 0: the kernel is no process.
func (t *Target) Pid() int { return 0 }

// Modules lists the inserted modules' names.
func (t *Target) Modules() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, m := range t.modules {
		out = append(out, m.name)
	}
	return out
}

func (t *Target) module(name string) *module {
	for _, m := range t.modules {
		if m.name == name {
			return m
		}
	}
	return nil
}

// Insert loads a module's probes into the kernel.
func (t *Target) Insert(m *rpn.Module, mode probe.InsertMode) ([]probe.Info, error) {
	return t.InsertPack([]*rpn.Module{m}, mode)
}

// InsertPack is Insert of a pack of several builds of one module: the
// build of the running kernel, or of the kernel module as it is loaded,
// is placed (and at each load of the module, that load's).
func (t *Target) InsertPack(builds []*rpn.Module, mode probe.InsertMode) ([]probe.Info, error) {
	if len(builds) == 0 {
		return nil, errors.New("insert: a pack of no build")
	}
	for _, b := range builds {
		if _, err := rpn.Load(b); err != nil {
			return nil, fmt.Errorf("insert %s: %v", b.Name, err)
		}
	}
	m := builds[0]
	if m.ModType != rpn.ModKernel {
		return nil, fmt.Errorf("insert %s: modtype %s: the kernel target probes kernel code (modtype = kernel)", m.Name, m.ModType)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errors.New("insert " + m.Name + ": the kernel target is closed")
	}
	mod := t.module(m.Name)
	switch {
	case mod != nil && mode == probe.InsertNew:
		return nil, fmt.Errorf("insert %s: %w: use --merge to add these probes to it, or --replace to replace it", m.Name, probe.ErrModuleIn)
	case mod != nil && mode == probe.InsertReplace:
		t.dropModule(mod)
		mod = nil
	case mod != nil && mode == probe.InsertMerge:
		if mod.header.Arch != m.Arch {
			return nil, fmt.Errorf("insert %s --merge: arch differs from the module in", m.Name)
		}
	}
	kmod := ""
	if n := strings.ToLower(m.Name); n != "vmlinux" && n != "kernel" {
		kmod = m.Name
		if !t.syms.known(kmod) {
			return nil, fmt.Errorf("insert %s: no kernel module %s is loaded, built in or installed (/proc/modules, /sys/module, /lib/modules/%s/modules.dep)", m.Name, m.Name, t.syms.release)
		}
	}
	if mod == nil {
		mod = &module{name: m.Name, header: m.Header, kmod: kmod}
		t.modules = append(t.modules, mod)
	}
	if err := t.growLV(mod, int(m.Vars)); err != nil {
		if len(mod.srcs) == 0 {
			t.modules = t.modules[:len(t.modules)-1]
		}
		return nil, fmt.Errorf("insert %s: %w", m.Name, err)
	}
	mod.gvars = max(mod.gvars, int(m.GVars))
	t.gvWords = max(t.gvWords, int(m.GVars))
	if mode == probe.InsertMerge {
		for i := range m.Probes {
			t.removeProbes(mod, []uint16{m.Probes[i].Minor})
		}
	}
	if err := t.switchInsert(mod, m); err != nil {
		if len(mod.srcs) == 0 {
			t.dropModule(mod)
		}
		return nil, fmt.Errorf("insert %s: %w", m.Name, err)
	}
	s := &source{mod: mod, src: m, builds: builds}
	for i := range m.Probes {
		s.probes = append(s.probes, &bprobe{s: s, idx: i, state: probe.StatePending})
	}
	s.all = slices.Clone(s.probes)
	mod.srcs = append(mod.srcs, s)
	if kmod == "" || t.syms.loaded(kmod) {
		t.place(s)
	} else {
		for _, p := range s.probes {
			p.reason = "kernel module " + kmod + " is not loaded"
		}
	}
	var out []probe.Info
	for _, p := range s.probes {
		out = append(out, t.info(p))
	}
	return out, nil
}

// growLV makes (or grows) a module's lv map: the sources of a module
// share it, the words already counted kept.
func (t *Target) growLV(mod *module, n int) error {
	if n == 0 {
		return nil
	}
	if mod.lv != nil && int(mod.lv.ValueSize()) >= n*8 {
		return nil
	}
	mp, err := bpf.NewLV(n)
	if err != nil {
		return err
	}
	if mod.lv != nil {
		old, err := bpf.ReadWords(mod.lv)
		if err == nil {
			bpf.WriteWords(mp, old)
		}
		// the sources already in keep the old map: re-place them on the
		// new one
		mod.lv.Close()
		mod.lv = mp
		for _, s := range mod.srcs {
			if s.prog != nil {
				t.unplace(s)
				t.place(s)
			}
		}
		return nil
	}
	mod.lv = mp
	return nil
}

// place resolves a source for the running kernel, loads its programs and
// attaches them; a probe that cannot go in is refused with its reason.
func (t *Target) place(s *source) {
	refuse := func(reason string) {
		for _, p := range s.probes {
			p.state, p.reason = probe.StateRefused, reason
		}
	}
	if err := t.selectBuild(s); err != nil {
		refuse(err.Error())
		return
	}
	// a probe whose push d, names what the kernel lacks is refused,
	// alone (refused)
	prog, refused, err := t.resolver(symEnv{k: t.syms, kmod: s.mod.kmod}).Relocate(s.src)
	if err != nil {
		refuse(err.Error())
		return
	}
	s.iv = t.ivRoles(s, prog)
	maps, err := bpf.NewMaps(s.src, bpf.MapOptions{RingSize: t.opts.RingSize, GV: t.gv, LV: s.mod.lv, Switch: s.mod.sw, IV: len(s.iv) > 0})
	if err != nil {
		refuse(err.Error())
		return
	}
	rd, err := bpf.NewReader(maps)
	if err != nil {
		maps.Close()
		refuse("the ring buffer's reader: " + err.Error())
		return
	}
	s.prog, s.maps, s.reader = prog, maps, rd
	// the kernel's BTF decoded once for the source's fentry programs,
	// not once a program
	s.btf = btf.NewCache()
	defer func() { s.btf = nil }()
	for _, p := range s.probes {
		if why := refused[p.idx]; why != "" {
			p.state, p.reason = probe.StateRefused, why
			continue
		}
		if err := t.attach(p); err != nil {
			p.state, p.reason = probe.StateRefused, err.Error()
			if p.prog != nil {
				p.prog.Close()
				p.prog = nil
			}
			continue
		}
		p.state, p.reason = probe.StateActive, ""
	}
	s.done, s.stop = make(chan struct{}), new(atomic.Bool)
	t.readers.Add(1)
	go t.read(s, rd, s.stop, s.done)
}

// unplace closes a source's links, programs and maps (its probes pending
// again, their counts kept), after its ring is read to the end.
func (t *Target) unplace(s *source) {
	for _, p := range s.probes {
		if p.prog != nil {
			if c, err := t.counters(p); err == nil {
				p.base = c
			}
		}
	}
	closeLinks(s.probes)
	for _, p := range s.probes {
		if p.prog != nil {
			p.prog.Close()
			p.prog = nil
		}
		if p.state == probe.StateActive || p.state == probe.StateDisabled {
			p.state = probe.StatePending
		}
	}
	if s.reader != nil {
		// nothing commits any more: the reader drains what is left and
		// stops (it takes no lock: waiting here is safe)
		s.stop.Store(true)
		<-s.done
		s.reader.Close()
		s.reader = nil
	}
	if s.maps != nil {
		s.maps.Close()
		s.maps = nil
	}
	s.prog = nil
}

// read hands a source's records to the Sink until the source is
// unplaced (stop), then reads what is left and returns.
func (t *Target) read(s *source, rd *bpf.Reader, stop *atomic.Bool, done chan struct{}) {
	defer t.readers.Done()
	defer close(done)
	for {
		stopping := stop.Load()
		if stopping {
			rd.SetDeadline(time.Now()) // what is there, then done
		} else {
			rd.SetDeadline(time.Now().Add(readSlice))
		}
		r, err := rd.Read()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && !stopping {
				continue
			}
			if !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, os.ErrClosed) {
				t.warn(fmt.Sprintf("module %s: reading its records: %v", s.mod.name, err))
			}
			return
		}
		if t.opts.Sink != nil {
			t.opts.Sink.Commit(t.record(s, &r))
		}
	}
}

// readSlice is how long a reader waits before it looks whether it is to
// stop.
const readSlice = 100 * time.Millisecond

// record is a ring record as a probe.Record.
func (t *Target) record(s *source, r *bpf.Record) *probe.Record {
	rec := &probe.Record{
		Time: time.Unix(0, int64(r.TS)), Kind: probe.RecordLog, Module: s.mod.name, Major: r.Major, Minor: r.Minor,
		Pid: int(r.PID), Tid: int(r.TID), CPU: int(r.CPU), Exit: r.Exit, Truncated: r.Truncated,
	}
	if int(r.Probe) < len(s.all) {
		p := s.all[r.Probe]
		rec.Location, rec.Address, rec.Probe = p.def().Loc.Text, p.addr, probe.KindName(p.def())
	}
	if r.Exception != rpn.ExNone {
		rec.Kind = probe.RecordException
		rec.Exception = r.Exception.String()
		rec.PC = r.PC
		if pos, ok := s.src.LineFor(r.PC); ok {
			rec.Line = s.src.PosString(pos)
		}
		if r.Exception == rpn.ExInvalidAddress {
			rec.Address = r.Addr
		}
		return rec
	}
	if r.Exit == rpn.ExitTrace {
		rec.Kind = probe.RecordTrace
	}
	rec.Data = append([]byte(nil), r.Log...)
	return rec
}

// Query lists every probe, in insertion order, with the kernel's counts.
func (t *Target) Query() []probe.Info {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []probe.Info
	for _, m := range t.modules {
		for _, s := range m.srcs {
			for _, p := range s.probes {
				out = append(out, t.info(p))
			}
		}
	}
	return out
}

// counters reads a probe's counters from its maps and its program's
// statistics, added to what it counted before an unload.
func (t *Target) counters(p *bprobe) (bpf.Counters, error) {
	c := p.base
	if p.prog == nil || p.s.maps == nil {
		return c, nil
	}
	k, err := p.s.maps.ProbeCounters(p.idx)
	if err != nil {
		return c, err
	}
	if st, err := p.prog.Stats(); err == nil {
		k.Missed = st.RecursionMisses
	}
	if p.link != nil {
		k.Missed += linkMissed(p.link)
	}
	c.Hits += k.Hits
	c.Skipped += k.Skipped
	c.Runs += k.Runs
	c.Faults += k.Faults
	c.Lost += k.Lost
	c.Missed += k.Missed
	c.Disabled = k.Disabled
	return c, nil
}

func (t *Target) info(p *bprobe) probe.Info {
	d := p.def()
	c, _ := t.counters(p)
	info := probe.Info{Module: p.s.mod.name, Minor: d.Minor, Location: d.Loc.Text, Kind: probe.KindName(d), Address: p.addr, State: p.state,
		Reason: p.reason, How: p.how, Hits: c.Hits, Skipped: c.Skipped, Faults: c.Faults, Missed: c.Missed, Lost: c.Lost, Spaces: boolInt(p.link != nil),
		Writes: rpn.WriteKinds(rpn.ProbeWrites(p.s.src, p.idx))}
	t.disabledInfo(p, c, &info) // max hits or rem, or switched off
	return info
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Vars returns a module's lv and the gv words it uses.
func (t *Target) Vars(name string, reset bool) (lv, gv []uint64, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.module(name)
	if m == nil {
		return nil, nil, errors.New("no module " + name)
	}
	return t.vars(m, reset)
}

func (t *Target) vars(m *module, reset bool) (lv, gv []uint64, err error) {
	if m.lv != nil {
		if lv, err = bpf.ReadWords(m.lv); err != nil {
			return nil, nil, err
		}
		lv = lv[:m.header.Vars]
	}
	all, err := bpf.ReadWords(t.gv)
	if err != nil {
		return nil, nil, err
	}
	gv = all[:m.gvars]
	if reset {
		if m.lv != nil {
			bpf.WriteWords(m.lv, make([]uint64, len(lv)))
		}
		bpf.WriteWords(t.gv, make([]uint64, m.gvars))
	}
	return lv, gv, nil
}

// GV is the kernel target's global variables, the first n.
func (t *Target) GV(n int) []uint64 {
	all, err := bpf.ReadWords(t.gv)
	if err != nil {
		return nil
	}
	return all[:min(n, len(all))]
}

// Remove takes a module's probes out (those with the given minors, or
// all); the module goes when none is left.
func (t *Target) Remove(name string, minors []uint16) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.module(name)
	if m == nil {
		return 0, errors.New("no module " + name)
	}
	n := t.removeProbes(m, minors)
	left := 0
	for _, s := range m.srcs {
		left += len(s.probes)
	}
	if left == 0 {
		t.dropModule(m)
	}
	return n, nil
}

// removeProbes takes out the probes of m with the given minors (all for
// nil): a source whose every probe goes is unplaced.
func (t *Target) removeProbes(m *module, minors []uint16) int {
	n := 0
	for _, s := range m.srcs {
		var keep, gone []*bprobe
		for _, p := range s.probes {
			if minors == nil || containsMinor(minors, p.def().Minor) {
				gone = append(gone, p)
			}
		}
		closeLinks(gone)
		for _, p := range s.probes {
			if minors == nil || containsMinor(minors, p.def().Minor) {
				if c, err := t.counters(p); err == nil {
					t.lost += c.Lost
				}
				if p.prog != nil {
					p.prog.Close()
					p.prog = nil
				}
				p.state = probe.StateRemoved
				n++
				continue
			}
			keep = append(keep, p)
		}
		if len(keep) == 0 {
			t.unplace(s)
		}
		s.probes = keep
	}
	var srcs []*source
	for _, s := range m.srcs {
		if len(s.probes) > 0 {
			srcs = append(srcs, s)
		}
	}
	m.srcs = srcs
	return n
}

func containsMinor(list []uint16, v uint16) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// dropModule takes a whole module out.
func (t *Target) dropModule(m *module) {
	t.removeProbes(m, nil)
	if m.lv != nil {
		m.lv.Close()
		m.lv = nil
	}
	if m.sw != nil {
		m.sw.Close()
		m.sw = nil
	}
	for i, x := range t.modules {
		if x == m {
			t.modules = append(t.modules[:i], t.modules[i+1:]...)
			break
		}
	}
}

// Lost counts the records the modules' rings had no room for.
func (t *Target) Lost() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.lost
	for _, m := range t.modules {
		for _, s := range m.srcs {
			for _, p := range s.probes {
				c, _ := t.counters(p)
				n += c.Lost
			}
		}
	}
	return n
}

// Close takes every probe out, reads the rings to their end and returns
// the last variables and probes.
func (t *Target) Close() (probe.Final, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return probe.Final{}, nil
	}
	t.closed = true
	close(t.stop)
	t.mu.Unlock()
	t.poller.Wait()
	t.mu.Lock()
	var f probe.Final
	// links first: nothing commits once they are closed
	var all []*bprobe
	for _, m := range t.modules {
		for _, s := range m.srcs {
			all = append(all, s.probes...)
		}
	}
	closeLinks(all)
	for _, m := range t.modules {
		for _, s := range m.srcs {
			for _, p := range s.probes {
				f.Probes = append(f.Probes, t.info(p))
			}
		}
		lv, gv, _ := t.vars(m, false)
		f.Vars = append(f.Vars, probe.ModuleVars{Name: m.name, LV: lv, GV: gv})
	}
	for _, m := range t.modules {
		for _, s := range m.srcs {
			t.unplace(s)
		}
		if m.lv != nil {
			m.lv.Close()
		}
		if m.sw != nil {
			m.sw.Close()
		}
	}
	t.modules = nil
	if t.follow != nil {
		if n := t.follow.Full(); n > 0 {
			t.warn(fmt.Sprintf("%d processes started while %d were followed were not probed (at most %d at once)", n, bpf.FollowMax, bpf.FollowMax))
		}
		t.follow.Close()
	}
	t.gv.Close()
	if t.kmem != nil {
		t.kmem.close()
	}
	close(t.ended)
	t.mu.Unlock()
	t.readers.Wait()
	return f, nil
}

var _ probe.Prober = (*Target)(nil)

// CountPrograms counts the eBPF programs loaded in the kernel whose name
// starts with prefix (every gprobes program is named gp_...): what a test
// of "nothing left behind" asks the kernel.
func CountPrograms(prefix string) (int, error) {
	n := 0
	var id ebpf.ProgramID
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // gone meanwhile
		}
		info, err := p.Info()
		p.Close()
		if err == nil && strings.HasPrefix(info.Name, prefix) {
			n++
		}
	}
}
