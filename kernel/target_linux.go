//go:build linux

package kernel

import (
	"cmp"
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
	// User: the host target (docs/global.md): modtype = user modules
	// too, their probes uprobes on the file the module names, in every
	// process that maps it (user_linux.go).
	User bool
}

// DefaultRingSize is a module's ring buffer unless Options.RingSize says:
// 16 MiB. A program commits without waiting for gprobes' reader (which
// it wakes once, when 64 KiB wait), so the ring is what absorbs a burst:
// 300,000 getppid hits logging two words as fast as they came lost about
// a third of their records with 1 MiB here, none with 16 MiB.
const DefaultRingSize = 16 << 20

// Target is the running kernel.
type Target struct {
	opts Options
	mu   sync.Mutex // everything below; the readers call the Sink without it
	// book is the modules, their sources and logical probes
	// (probe.Book); the target is its Mechanism (kmech)
	book    *probe.Book
	gv      *ebpf.Map
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
	// names names the stacks records carry (stacks_linux.go)
	names stackNamer
	// everyCopy is set while InsertPackCopies inserts (copies_linux.go);
	// copyCache the executable files processes map, by "dev:inode"
	everyCopy bool
	copyCache map[string]*copyFile
}

// kmodules are the kernel target's parts of its modules.
func (t *Target) kmodules() []*kmodule {
	var out []*kmodule
	for _, m := range t.book.Modules() {
		out = append(out, m.Impl.(*kmodule))
	}
	return out
}

// kmodule is the kernel target's part of an inserted module (its
// probe.Module's Impl): the maps its sources share.
type kmodule struct {
	*probe.Module
	lv *ebpf.Map // shared by the sources; nil without vars
	sw *ebpf.Map // the switches, shared by the sources (switch_linux.go)
	// kmod: a kernel module's name ("" for the kernel image)
	kmod string
	// user: a user module's file (its absolute path, links followed),
	// "" for kernel code; file is that file as the probes were placed
	// on it, nil while it cannot be opened (user_linux.go)
	user string
	file *ufile
	// tried is what the path showed when it last could not be opened
	tried string
	// copies: inserted for every copy of its build (InsertPackCopies)
	copies bool
}

// sources are the kernel target's parts of the module's sources.
func (m *kmodule) sources() []*source {
	var out []*source
	for _, s := range m.Sources {
		out = append(out, s.Impl.(*source))
	}
	return out
}

// source is the kernel target's part of one insert (its probe.Source's
// Impl): its maps, programs and ring reader.
type source struct {
	*probe.Source
	mod *kmodule
	// src is the build placed (or to place): one of the pack's Builds,
	// the running kernel's (build_linux.go)
	src    *rpn.Module
	prog   *rpn.Program // relocated for the running kernel; nil while pending
	maps   *bpf.Maps
	reader *bpf.Reader
	done   chan struct{}          // the reader goroutine ended
	stop   *atomic.Bool           // tells the reader to drain and end
	btf    *btf.Cache             // while place loads the source's programs
	iv     map[int]*bpf.IVOptions // the probes with a part in calls' instances (iv_linux.go), by index; nil if none
}

// probes are the kernel target's parts of the source's probes not
// removed.
func (s *source) probes() []*bprobe { return bprobes(s.Probes) }

func bprobes(ps []*probe.Probe) []*bprobe {
	out := make([]*bprobe, len(ps))
	for i, p := range ps {
		out[i] = p.Impl.(*bprobe)
	}
	return out
}

// bprobe is the kernel target's part of a logical probe (its
// probe.Probe's Impl): its program and its link.
type bprobe struct {
	*probe.Probe
	s    *source
	prog *ebpf.Program
	link link.Link
	// extra are a usdt probe's programs and links at its other sites
	// (usdt_linux.go), and its links on copies of its build
	// (copies_linux.go), closed with link
	extra []siteLink
	// atts are how the probe went on its file, for copies to repeat;
	// copies the copies (device, inode) it is on
	atts   []attachment
	copies map[[2]uint64]bool
	// last counters read while the program was loaded (kept across an
	// unload of its kernel module)
	base bpf.Counters
}

// def is the probe as the build placed has it.
func (p *bprobe) def() *rpn.Probe { return &p.s.src.Probes[p.Index] }

// Start checks that this kernel and process can run eBPF probes and
// opens the target. It touches nothing in the kernel but the maps it
// makes.
func Start(o Options) (*Target, error) {
	what := "kernel target"
	if o.User {
		what = "host target"
	}
	if err := bpf.Available(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	if o.RingSize <= 0 {
		o.RingSize = DefaultRingSize
	}
	t := &Target{opts: o, ended: make(chan struct{}), stop: make(chan struct{})}
	t.book = probe.NewBook(kmech{t})
	t.mech = probeMechanisms()
	t.removeStale()
	var err error
	if t.gv, err = bpf.NewGV(); err != nil {
		return nil, fmt.Errorf("%s: the gv map: %w", what, err)
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
		return nil, fmt.Errorf("%s: %w", what, err)
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
	return t.book.Names()
}

// Insert loads a module's probes into the kernel.
func (t *Target) Insert(m *rpn.Module, mode probe.InsertMode) ([]probe.Info, error) {
	return t.InsertPack([]*rpn.Module{m}, mode)
}

// InsertPack is Insert of a pack of several builds of one module: the
// build of the running kernel, or of the kernel module as it is loaded,
// is placed (and at each load of the module, that load's).
func (t *Target) InsertPack(builds []*rpn.Module, mode probe.InsertMode) ([]probe.Info, error) {
	if err := probe.LoadPack(builds); err != nil {
		return nil, err
	}
	m := builds[0]
	if m.ModType != rpn.ModKernel && !t.opts.User {
		return nil, fmt.Errorf("insert %s: modtype %s: the kernel target probes kernel code (modtype = kernel); the host target probes user code in every process", m.Name, m.ModType)
	}
	if m.ModType == rpn.ModUser {
		if _, err := userFile(m.Name); err != nil {
			return nil, fmt.Errorf("insert %s: %v", m.Name, err)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errors.New("insert " + m.Name + ": the kernel target is closed")
	}
	if kmod := kernelModule(m.Name); m.ModType == rpn.ModKernel && kmod != "" && !t.syms.known(kmod) {
		return nil, fmt.Errorf("insert %s: no kernel module %s is loaded, built in or installed (/proc/modules, /sys/module, /lib/modules/%s/modules.dep)", m.Name, m.Name, t.syms.release)
	}
	s, err := t.book.Insert(builds, mode)
	if err != nil {
		return nil, err
	}
	return t.book.Infos(s), nil
}

// kernelModule is the kernel module a module's name names, "" for the
// kernel image.
func kernelModule(name string) string {
	if n := strings.ToLower(name); n != "vmlinux" && n != "kernel" {
		return name
	}
	return ""
}

// kmech is the kernel target as its book's Mechanism; every call comes
// with the target's lock held.
type kmech struct{ t *Target }

var _ probe.Mechanism = kmech{}

func (k kmech) NewModule(m *probe.Module) {
	if m.Header.ModType == rpn.ModUser {
		// found at insert (InsertPack): found again, the same; should
		// it be gone meanwhile, the name as written, which placing
		// refuses saying so (never "": that is kernel code)
		path, err := userFile(m.Name)
		if err != nil {
			path = m.Name
		}
		m.Impl = &kmodule{Module: m, user: path, copies: k.t.everyCopy}
		return
	}
	m.Impl = &kmodule{Module: m, kmod: kernelModule(m.Name)}
}

func (k kmech) GrowVars(m *probe.Module, n int) error { return k.t.growLV(m.Impl.(*kmodule), n) }

// Place places a new source where its kernel module is loaded (the
// kernel image always is); elsewhere its probes wait for the load
// (poll).
func (k kmech) Place(ps *probe.Source) {
	mod := ps.Module.Impl.(*kmodule)
	s := &source{Source: ps, mod: mod, src: ps.First()}
	ps.Impl = s
	for _, p := range ps.Probes {
		p.Impl = &bprobe{Probe: p, s: s}
	}
	if mod.user != "" || mod.kmod == "" || k.t.syms.loaded(mod.kmod) {
		k.t.place(s)
		return
	}
	for _, p := range ps.Probes {
		p.Wait(probe.ReasonNotLoaded(mod.kmod), false)
	}
}

// TakeOut closes the probes' links and programs, their lost records
// counted; a source left without probes is unplaced.
func (k kmech) TakeOut(ps *probe.Source, gone []*probe.Probe) error {
	t, s := k.t, ps.Impl.(*source)
	bs := bprobes(gone)
	closeLinks(bs)
	var errs []error
	for _, p := range bs {
		c, err := t.counters(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("probe %s: its counts at removal, its lost records not counted: %v", p.Def().Loc.Text, err))
		}
		t.lost += c.Lost
		if p.prog != nil {
			p.prog.Close()
			p.prog = nil
		}
	}
	if len(s.Probes) == 0 {
		t.unplace(s)
	}
	return errors.Join(errs...)
}

// DropModule closes the maps the module's sources shared.
func (k kmech) DropModule(m *probe.Module) {
	km := m.Impl.(*kmodule)
	if km.lv != nil {
		km.lv.Close()
		km.lv = nil
	}
	if km.sw != nil {
		km.sw.Close()
		km.sw = nil
	}
}

// Counts are the kernel's counts of a probe (counters).
func (k kmech) Counts(q *probe.Probe, info *probe.Info) bool {
	p := q.Impl.(*bprobe)
	c, err := k.t.counters(p)
	if err != nil {
		k.t.warn(fmt.Sprintf("module %s, probe %s: its counts: %v", q.Module().Name, q.Def().Loc.Text, err))
	}
	info.Hits, info.Skipped, info.Faults, info.Missed, info.Lost = c.Hits, c.Skipped, c.Faults, c.Missed, c.Lost
	if p.link != nil {
		info.Spaces = 1 + len(p.copies) // the file, and its copies
	}
	return c.Disabled
}

func (k kmech) ReadVars(m *probe.Module, reset bool) (lv, gv []uint64, err error) {
	return k.t.vars(m.Impl.(*kmodule), reset)
}

func (k kmech) Warn(msg string) { k.t.warn(msg) }

// growLV makes (or grows) a module's lv map: the sources of a module
// share it, the words already counted kept.
func (t *Target) growLV(mod *kmodule, n int) error {
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
		// the values so far carried over, or the insert fails and the
		// old map stays
		old, err := bpf.ReadWords(mod.lv)
		if err == nil {
			err = bpf.WriteWords(mp, old)
		}
		if err != nil {
			mp.Close()
			return fmt.Errorf("the module's variables could not be carried over to a larger map: %v", err)
		}
		// the sources already in keep the old map: re-place them on the
		// new one
		mod.lv.Close()
		mod.lv = mp
		for _, s := range mod.sources() {
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
		for _, p := range s.Probes {
			p.State, p.Reason = probe.StateRefused, reason
		}
	}
	var res probe.Resolver
	if s.mod.user != "" {
		if s.mod.file == nil {
			f, err := openUfile(s.mod.user)
			if err != nil {
				refuse(err.Error())
				return
			}
			s.mod.file = f
		}
		b, err := probe.SelectBuild(s.Builds, s.mod.file.build, s.mod.user)
		if err != nil {
			refuse(err.Error())
			return
		}
		s.src = b
		res = s.mod.file.resolver()
	} else {
		if err := t.selectBuild(s); err != nil {
			refuse(err.Error())
			return
		}
		res = t.resolver(symEnv{k: t.syms, kmod: s.mod.kmod})
	}
	// a probe whose push d, names what the kernel lacks is refused,
	// alone (refused)
	prog, refused, err := res.Relocate(s.src)
	if err != nil {
		refuse(err.Error())
		return
	}
	s.iv = t.ivRoles(s, prog)
	maps, err := bpf.NewMaps(s.src, bpf.MapOptions{RingSize: t.opts.RingSize, GV: t.gv, LV: s.mod.lv, Switch: s.mod.sw, IV: len(s.iv) > 0, Procs: s.mod.user != ""})
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
	for _, p := range s.probes() {
		if why := refused[p.Index]; why != "" {
			p.State, p.Reason = probe.StateRefused, why
			continue
		}
		if err := t.attach(p); err != nil {
			p.State, p.Reason = probe.StateRefused, err.Error()
			var mm *mismatch
			if errors.As(err, &mm) {
				// opcode = differs from the code: not a refusal
				p.State = probe.StateMismatch
			}
			if p.prog != nil {
				p.prog.Close()
				p.prog = nil
			}
			continue
		}
		p.State, p.Reason = probe.StateActive, ""
	}
	s.done, s.stop = make(chan struct{}), new(atomic.Bool)
	t.readers.Add(1)
	go t.read(s, rd, s.stop, s.done)
}

// unplace closes a source's links, programs and maps (its probes pending
// again, their counts kept), after its ring is read to the end.
func (t *Target) unplace(s *source) {
	ps := s.probes()
	for _, p := range ps {
		if p.prog != nil {
			c, err := t.counters(p)
			if err != nil {
				t.warn(fmt.Sprintf("module %s, probe %s: its counts before it goes out, lost from its totals: %v", s.mod.Name, p.Def().Loc.Text, err))
			}
			p.base = c
		}
	}
	closeLinks(ps)
	for _, p := range ps {
		if p.prog != nil {
			p.prog.Close()
			p.prog = nil
		}
		if p.State == probe.StateActive || p.State == probe.StateDisabled {
			p.State = probe.StatePending
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
				t.warn(fmt.Sprintf("module %s: reading its records: %v", s.mod.Name, err))
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
		Time: time.Unix(0, int64(r.TS)), Kind: probe.RecordLog, Module: s.mod.Name, Major: r.Major, Minor: r.Minor,
		Pid: int(r.PID), Tid: int(r.TID), CPU: int(r.CPU), Exit: r.Exit, Truncated: r.Truncated, Comm: r.Comm,
	}
	if int(r.Probe) < len(s.All) {
		p := s.All[r.Probe]
		rec.Location, rec.Address, rec.Probe = p.Def().Loc.Text, p.Addr, probe.KindName(p.Def())
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
		if int(r.Probe) < len(s.All) && s.All[r.Probe].Def().AutoStack && len(r.Log) >= 8 {
			// autostacktrace = yes: the program's exception tail
			// copied the kernel stack to the record (bpf/stack.go)
			rec.Stacks = []probe.Stack{{Kind: "kernel", Frames: t.names.kernelStack(r.Log)}}
		}
		return rec
	}
	if r.Exit == rpn.ExitTrace {
		rec.Kind = probe.RecordTrace
	}
	rec.Data = append([]byte(nil), r.Log...)
	if int(r.Probe) < len(s.All) && !r.Truncated {
		rec.Stacks = t.names.stacks(s.src, s.All[r.Probe].Index, rec.Pid, rec.Data)
	}
	return rec
}

// Query lists every probe, in insertion order, with the kernel's counts.
func (t *Target) Query() []probe.Info {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.book.Query()
}

// QueryProcesses is Query with each user probe's hits by process (the
// host target counts them: bpf.MapOptions.Procs), most hits first, each
// process's command name as /proc shows it now ("" once it has exited).
// The counts are those since the probe was last placed: a file rebuilt
// (filesChanged) starts them again.
func (t *Target) QueryProcesses() []probe.Info {
	t.mu.Lock()
	defer t.mu.Unlock()
	byMaps := map[*bpf.Maps]map[int]map[int]uint64{}
	var out []probe.Info
	for _, q := range t.book.Probes() {
		info := t.book.Info(q)
		p := q.Impl.(*bprobe)
		if m := p.s.maps; m != nil && m.Procs != nil {
			hits, ok := byMaps[m]
			if !ok {
				var err error
				if hits, err = m.ProcessHits(); err != nil {
					t.warn(fmt.Sprintf("module %s: its hits by process: %v", q.Module().Name, err))
				}
				byMaps[m] = hits
			}
			for pid, n := range hits[p.Index] {
				comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
				info.Processes = append(info.Processes, probe.ProcessHits{Pid: pid, Comm: strings.TrimSpace(string(comm)), Hits: n})
			}
			slices.SortFunc(info.Processes, func(a, b probe.ProcessHits) int {
				if a.Hits != b.Hits {
					return cmp.Compare(b.Hits, a.Hits)
				}
				return cmp.Compare(a.Pid, b.Pid)
			})
		}
		out = append(out, info)
	}
	return out
}

var _ probe.ProcessQuerier = (*Target)(nil)

// counters reads a probe's counters from its maps and its program's
// statistics, added to what it counted before an unload.
func (t *Target) counters(p *bprobe) (bpf.Counters, error) {
	c := p.base
	if p.prog == nil || p.s.maps == nil {
		return c, nil
	}
	k, err := p.s.maps.ProbeCounters(p.Index)
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

// Vars returns a module's lv and the gv words it uses.
func (t *Target) Vars(name string, reset bool) (lv, gv []uint64, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.book.Vars(name, reset)
}

func (t *Target) vars(m *kmodule, reset bool) (lv, gv []uint64, err error) {
	if m.lv != nil {
		if lv, err = bpf.ReadWords(m.lv); err != nil {
			return nil, nil, err
		}
		lv = lv[:min(m.Vars, len(lv))]
	}
	all, err := bpf.ReadWords(t.gv)
	if err != nil {
		return nil, nil, err
	}
	gv = all[:min(m.GVars, len(all))]
	if reset {
		if m.lv != nil {
			if err := bpf.WriteWords(m.lv, make([]uint64, len(lv))); err != nil {
				return lv, gv, fmt.Errorf("reset the local variables: %v", err)
			}
		}
		if err := bpf.WriteWords(t.gv, make([]uint64, len(gv))); err != nil {
			return lv, gv, fmt.Errorf("reset the global variables: %v", err)
		}
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
// all); the module goes with its last probe.
func (t *Target) Remove(name string, minors []uint16) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.book.Remove(name, minors)
}

// Lost counts the records the modules' rings had no room for.
func (t *Target) Lost() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.lost
	for _, q := range t.book.Probes() {
		c, err := t.counters(q.Impl.(*bprobe))
		if err != nil {
			t.warn(fmt.Sprintf("module %s, probe %s: its lost records: %v", q.Module().Name, q.Def().Loc.Text, err))
		}
		n += c.Lost
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
	// links first: nothing commits once they are closed
	closeLinks(bprobes(t.book.Probes()))
	f := t.book.Final()
	if err := t.book.DropAll(); err != nil {
		t.warn(fmt.Sprintf("closing: %v", err))
	}
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
