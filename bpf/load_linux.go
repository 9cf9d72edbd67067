//go:build linux

package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/rpn"
)

// Available reports whether this kernel and process can run the kernel
// target's programs, naming what is missing.
func Available() error {
	for _, t := range []struct {
		what string
		err  func() error
	}{
		{"BPF_PROG_TYPE_TRACEPOINT", func() error { return features.HaveProgramType(ebpf.TracePoint) }},
		{"BPF_MAP_TYPE_RINGBUF (Linux 5.8)", func() error { return features.HaveMapType(ebpf.RingBuf) }},
		{"BPF_MAP_TYPE_PERCPU_ARRAY", func() error { return features.HaveMapType(ebpf.PerCPUArray) }},
		{"the bpf_loop helper (Linux 5.17)", func() error { return features.HaveProgramHelper(ebpf.TracePoint, asm.FnLoop) }},
		{"the bpf_ringbuf_output helper", func() error { return features.HaveProgramHelper(ebpf.TracePoint, asm.FnRingbufOutput) }},
		{"the bpf_task_pt_regs helper (Linux 5.15)", func() error { return features.HaveProgramHelper(ebpf.TracePoint, asm.FnTaskPtRegs) }},
		{"the bpf_probe_read_kernel helper (Linux 5.5)", func() error { return features.HaveProgramHelper(ebpf.TracePoint, asm.FnProbeReadKernel) }},
	} {
		if err := t.err(); err != nil {
			return missing(t.what, err)
		}
	}
	return nil
}

func missing(what string, err error) error {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, os.ErrPermission):
		return fmt.Errorf("eBPF: permission denied creating %s: run as root (or with CAP_BPF and CAP_PERFMON); kernel.unprivileged_bpf_disabled or lockdown may also refuse: %w", what, err)
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("eBPF: this kernel lacks %s: %w", what, err)
	}
	return fmt.Errorf("eBPF: %s: %w", what, err)
}

// NewMaps makes the maps of module m's probes.
func NewMaps(m *rpn.Module, o MapOptions) (*Maps, error) {
	ms := &Maps{probes: len(m.Probes), vars: int(m.Vars)}
	ok := false
	defer func() {
		if !ok {
			ms.Close()
		}
	}()
	size := ScratchSize(int(m.LogMax))
	probes := max(len(m.Probes), 1)
	spec := &ebpf.MapSpec{Name: "gp_scratch", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: uint32(size), MaxEntries: uint32(probes)}
	if !perCPU(int(m.LogMax)) {
		n, err := ebpf.PossibleCPU()
		if err != nil {
			return nil, err
		}
		spec.Type, spec.MaxEntries = ebpf.Array, uint32(n*probes)
	}
	var err error
	if ms.Scratch, err = ebpf.NewMap(spec); err != nil {
		return nil, missing("the scratch map ("+spec.Type.String()+")", err)
	}
	if o.Ring != nil {
		ms.Ring = o.Ring
	} else {
		rs := o.RingSize
		if rs == 0 {
			rs = DefaultRingSize
		}
		if ms.Ring, err = ebpf.NewMap(&ebpf.MapSpec{Name: "gp_ring", Type: ebpf.RingBuf, MaxEntries: uint32(rs)}); err != nil {
			return nil, missing("the ring buffer", err)
		}
		ms.ownRing = true
	}
	one := func(name string, size int) (*ebpf.Map, error) {
		mp, err := ebpf.NewMap(&ebpf.MapSpec{Name: name, Type: ebpf.Array, KeySize: 4, ValueSize: uint32(size), MaxEntries: 1, Flags: unix.BPF_F_MMAPABLE})
		if err != nil {
			return nil, missing("the "+name+" map", err)
		}
		return mp, nil
	}
	if ms.Counters, err = one("gp_counters", GlobalsSize+max(len(m.Probes), 1)*CountersSize); err != nil {
		return nil, err
	}
	switch {
	case m.Vars > 0 && o.LV != nil:
		if int(o.LV.ValueSize()) < int(m.Vars)*8 {
			return nil, fmt.Errorf("bpf: the lv map given has %d words, the module %d", o.LV.ValueSize()/8, m.Vars)
		}
		ms.LV = o.LV
	case m.Vars > 0:
		if ms.LV, err = one("gp_lv", int(m.Vars)*8); err != nil {
			return nil, err
		}
		ms.ownLV = true
	}
	if o.Switch != nil {
		ms.Switch = o.Switch
	} else {
		if ms.Switch, err = NewSwitch(); err != nil {
			return nil, err
		}
		ms.ownSwitch = true
	}
	if o.IV {
		ms.IV, err = ebpf.NewMap(&ebpf.MapSpec{Name: "gp_iv", Type: ebpf.LRUHash, KeySize: IVKeySize, ValueSize: IVValueSize, MaxEntries: IVEntries})
		if err != nil {
			return nil, missing("the instance map (LRU hash)", err)
		}
		ms.ownIV = true
	}
	if o.Procs {
		ms.Procs, err = ebpf.NewMap(&ebpf.MapSpec{Name: "gp_procs", Type: ebpf.LRUHash, KeySize: 8, ValueSize: 8, MaxEntries: ProcsEntries})
		if err != nil {
			return nil, missing("the map of hits by process (LRU hash)", err)
		}
		ms.ownProcs = true
	}
	if o.GV != nil {
		ms.GV = o.GV
	} else {
		if ms.GV, err = one("gp_gv", rpn.MaxGVars*8); err != nil {
			return nil, err
		}
		ms.ownGV = true
	}
	if err := ms.SetClock(); err != nil {
		return nil, err
	}
	ok = true
	return ms, nil
}

// NewGV makes a gv map that modules can share (MapOptions.GV).
func NewGV() (*ebpf.Map, error) {
	return ebpf.NewMap(&ebpf.MapSpec{Name: "gp_gv", Type: ebpf.Array, KeySize: 4, ValueSize: rpn.MaxGVars * 8, MaxEntries: 1, Flags: unix.BPF_F_MMAPABLE})
}

// SetClock stores the offset from CLOCK_MONOTONIC (bpf_ktime_get_ns) to
// Unix time that push ts and the records' time add.
func (m *Maps) SetClock() error {
	var before, after unix.Timespec
	// unchecked: CLOCK_MONOTONIC with a valid pointer cannot fail
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &before)
	now := time.Now().UnixNano()
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &after) // unchecked: as above
	mono := (before.Nano() + after.Nano()) / 2
	return m.update(m.Counters, offClockDelta, binary.LittleEndian.AppendUint64(nil, uint64(now-mono)))
}

func (m *Maps) value(mp *ebpf.Map) ([]byte, error) {
	var b []byte
	if err := mp.Lookup(uint32(0), &b); err != nil {
		return nil, err
	}
	return b, nil
}

// update writes p at off in a one-entry map's value (read, change, write:
// not atomic with the programs).
func (m *Maps) update(mp *ebpf.Map, off int, p []byte) error {
	b, err := m.value(mp)
	if err != nil {
		return err
	}
	copy(b[off:], p)
	return mp.Update(uint32(0), b, ebpf.UpdateExist)
}

// Counters reads probe pi's counters.
func (m *Maps) ProbeCounters(pi int) (Counters, error) {
	b, err := m.value(m.Counters)
	if err != nil {
		return Counters{}, err
	}
	at := GlobalsSize + pi*CountersSize
	if pi < 0 || at+CountersSize > len(b) {
		return Counters{}, fmt.Errorf("bpf: no probe %d", pi)
	}
	u := func(off int) uint64 { return binary.LittleEndian.Uint64(b[at+off:]) }
	c := Counters{Skipped: u(cntSkipped), Runs: u(cntRuns), Faults: u(cntFaults), Disabled: u(cntDisabled) != 0, Lost: u(cntLost)}
	c.Hits = c.Skipped + c.Runs
	return c, nil
}

// Vars reads the module's lv (gv false) or the gv words.
func (m *Maps) Vars(gv bool) ([]uint64, error) {
	mp := m.LV
	if gv {
		mp = m.GV
	}
	if mp == nil {
		return nil, nil
	}
	b, err := m.value(mp)
	if err != nil {
		return nil, err
	}
	out := make([]uint64, len(b)/8)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(b[i*8:])
	}
	return out, nil
}

// SetVars writes the module's lv (gv false) or the gv words from index 0.
func (m *Maps) SetVars(gv bool, v []uint64) error {
	mp := m.LV
	if gv {
		mp = m.GV
	}
	if mp == nil {
		return nil
	}
	b := make([]byte, 0, len(v)*8)
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	return m.update(mp, 0, b)
}

// Close releases the maps (the programs that use them keep them alive).
func (m *Maps) Close() error {
	for _, mp := range []*ebpf.Map{m.Scratch, m.Counters} {
		if mp != nil {
			mp.Close()
		}
	}
	if m.ownLV && m.LV != nil {
		m.LV.Close()
	}
	if m.ownRing && m.Ring != nil {
		m.Ring.Close()
	}
	if m.ownGV && m.GV != nil {
		m.GV.Close()
	}
	if m.ownSwitch && m.Switch != nil {
		m.Switch.Close()
	}
	if m.ownIV && m.IV != nil {
		m.IV.Close()
	}
	if m.ownProcs && m.Procs != nil {
		m.Procs.Close()
	}
	return nil
}

// ProcessHits reads the hits by process of the module's probes
// (MapOptions.Procs): for each probe index, its hits by pid. Nil without
// the map.
func (m *Maps) ProcessHits() (map[int]map[int]uint64, error) {
	if m.Procs == nil {
		return nil, nil
	}
	out := map[int]map[int]uint64{}
	var k, v uint64
	it := m.Procs.Iterate()
	for it.Next(&k, &v) {
		pi, pid := int(k>>32), int(uint32(k))
		if out[pi] == nil {
			out[pi] = map[int]uint64{}
		}
		out[pi][pid] = v
	}
	return out, it.Err()
}

// Load loads the compiled program into the kernel. A program past the
// verifier's limits is refused before anything is loaded (Budget,
// *TooLarge); a refusal of the kernel's verifier is a *VerifierError
// naming the RPN instruction.
//
// The compiler chooses straight mode only for a program the verifier
// checks within its limits (doc.go, "Verification cost"). Should the
// verifier still give up on its size (a kernel that walks more than the
// ones measured), Load compiles the program again in loop mode and loads
// that (c then describes it); when that is refused too, the error says
// both refusals.
func (c *Compiled) Load() (*ebpf.Program, error) { return c.LoadCached(nil) }

// LoadCached is Load with the kernel's BTF, which a fentry program is
// loaded against, decoded once into cache and shared by every program
// loaded with the same cache (nil: a cache of its own). Without it each
// fentry program decodes the kernel's BTF again: 30-90 ms a program here,
// 0.3-0.9 s under the QEMU lab's TCG, most of a 100-probe insert. The
// cache keeps what it decoded; a caller that outlives a kernel module's
// reload makes a new one.
func (c *Compiled) LoadCached(cache *btf.Cache) (*ebpf.Program, error) {
	if err := c.Budget(); err != nil {
		return nil, err
	}
	prog, err := loadSpec(c.Spec, cache)
	if err == nil {
		return prog, nil
	}
	var ve *ebpf.VerifierError
	if !errors.As(err, &ve) {
		return nil, err
	}
	first := c.verifierError(ve.Log, err)
	if c.Loop || !tooComplex(ve) {
		return nil, first
	}
	o := c.o
	o.Loop = true
	lc, err := CompileProbe(c.p, c.pi, o)
	if err == nil {
		err = lc.Budget()
	}
	if err != nil {
		first.Then = err
		return nil, first
	}
	prog, err = loadSpec(lc.Spec, cache)
	if err == nil {
		*c = *lc
		return prog, nil
	}
	if errors.As(err, &ve) {
		e := lc.verifierError(ve.Log, err)
		e.Straight = first
		return nil, e
	}
	first.Then = err
	return nil, first
}

// loadSpec is loadProgram, replaced by tests.
var loadSpec = loadProgram

// loadProgram loads one program, through a collection when there is a
// BTF cache to share (cilium/ebpf takes one only there).
func loadProgram(spec *ebpf.ProgramSpec, cache *btf.Cache) (*ebpf.Program, error) {
	opts := ebpf.ProgramOptions{LogSizeStart: 1 << 20}
	if cache == nil {
		return ebpf.NewProgramWithOptions(spec, opts)
	}
	const name = "gp"
	coll, err := ebpf.NewCollectionWithOptions(&ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{name: spec}},
		ebpf.CollectionOptions{Programs: opts, Cache: cache})
	if err != nil {
		return nil, err
	}
	defer coll.Close()
	return coll.DetachProgram(name), nil
}

// tooComplex reports whether the verifier gave up on the program's size
// rather than found it wrong.
func tooComplex(ve *ebpf.VerifierError) bool {
	if errors.Is(ve, unix.E2BIG) {
		return true
	}
	for _, l := range ve.Log {
		if strings.Contains(l, "BPF program is too large") || strings.Contains(l, "too many states") {
			return true
		}
	}
	return false
}

var insnLine = regexp.MustCompile(`^(\d+): \(`)

func (c *Compiled) verifierError(log []string, err error) *VerifierError {
	e := &VerifierError{Probe: c.pi, Insn: -1, Err: err, Loop: c.Loop}
	for i := len(log) - 1; i >= 0; i-- {
		l := strings.TrimSpace(log[i])
		if e.Msg == "" && l != "" && !strings.HasPrefix(l, "processed ") && !strings.HasPrefix(l, "verification time") && !strings.HasPrefix(l, "stack depth") {
			e.Msg = l
		}
		if m := insnLine.FindStringSubmatch(l); m != nil {
			e.Insn, _ = strconv.Atoi(m[1])
			break
		}
	}
	if e.Msg == "" {
		e.Msg = err.Error()
	}
	if e.Insn >= 0 && e.Insn < len(c.rpn) && c.rpn[e.Insn] >= 0 {
		e.PC, e.HasPC = c.p.PC(c.rpn[e.Insn]), true
		e.Where = position(c.p.Module(), e.PC)
	}
	return e
}

// AttachTracepoint attaches prog (compiled with KindTracepoint) to the
// tracepoint group:event, mounting tracefs at /sys/kernel/tracing first if
// no tracefs is mounted (cilium/ebpf finds a tracepoint's id there).
func AttachTracepoint(prog *ebpf.Program, group, event string) (link.Link, error) {
	if err := EnsureTracefs(); err != nil {
		return nil, err
	}
	return link.Tracepoint(group, event, prog, nil)
}

// AttachRawTracepoint attaches prog (compiled with KindRawTracepoint) to
// the raw tracepoint name (sys_enter, sched_switch ...).
func AttachRawTracepoint(prog *ebpf.Program, name string) (link.Link, error) {
	return link.AttachRawTracepoint(link.RawTracepointOptions{Name: name, Program: prog})
}

// EnsureTracefs mounts tracefs at /sys/kernel/tracing unless a tracefs is
// mounted there or at /sys/kernel/debug/tracing.
func EnsureTracefs() error {
	for _, p := range []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"} {
		var st unix.Statfs_t
		if unix.Statfs(p, &st) == nil && st.Type == unix.TRACEFS_MAGIC {
			return nil
		}
	}
	if err := unix.Mount("nodev", "/sys/kernel/tracing", "tracefs", 0, ""); err != nil {
		return fmt.Errorf("tracepoints need tracefs, which is not mounted, and mounting it at /sys/kernel/tracing failed: %w", err)
	}
	return nil
}

// Module is a module's probes loaded in the kernel: its maps and one
// program per probe; a probe refused (Unsupported, VerifierError) has no
// program and its error in Errs, and the others go in.
type Module struct {
	Maps     *Maps
	Progs    []*ebpf.Program
	Compiled []*Compiled
	Errs     []error
}

// ModuleOptions tune LoadModule.
type ModuleOptions struct {
	MapOptions
	// Kind of each probe's attachment; nil: every probe a tracepoint.
	Kind     func(pi int) Kind
	PID, TID uint32
	Wakeup   int
}

// LoadModule makes the maps of p's module and compiles and loads each of
// its probes. It fails only when the maps cannot be made.
func LoadModule(p *rpn.Program, o ModuleOptions) (*Module, error) {
	maps, err := NewMaps(p.Module(), o.MapOptions)
	if err != nil {
		return nil, err
	}
	n := p.NumProbes()
	m := &Module{Maps: maps, Progs: make([]*ebpf.Program, n), Compiled: make([]*Compiled, n), Errs: make([]error, n)}
	for pi := 0; pi < n; pi++ {
		kind := KindTracepoint
		if o.Kind != nil {
			kind = o.Kind(pi)
		}
		c, err := CompileProbe(p, pi, Options{Maps: maps, Probe: uint32(pi), Kind: kind, PID: o.PID, TID: o.TID, Wakeup: o.Wakeup})
		if err != nil {
			m.Errs[pi] = err
			continue
		}
		m.Compiled[pi] = c
		m.Progs[pi], m.Errs[pi] = c.Load()
	}
	return m, nil
}

// Counters are probe pi's counters, with the kernel's count of the hits it
// did not run the program for (Counters.Missed).
func (m *Module) Counters(pi int) (Counters, error) {
	c, err := m.Maps.ProbeCounters(pi)
	if err != nil || m.Progs[pi] == nil {
		return c, err
	}
	st, err := m.Progs[pi].Stats()
	if err != nil {
		return c, err
	}
	c.Missed = st.RecursionMisses
	return c, nil
}

// Close unloads the programs (those attached stay until their links
// close) and releases the maps.
func (m *Module) Close() error {
	for _, p := range m.Progs {
		if p != nil {
			p.Close()
		}
	}
	return m.Maps.Close()
}
