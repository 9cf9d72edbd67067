//go:build linux

package kernel

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/arch/x86/x86asm"
	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/symbols"
)

// ksyms is what gprobes knows of the running kernel's symbols and
// modules.
type ksyms struct {
	release string
	kall    *symbols.Set   // /proc/kallsyms as read last
	btf     *symbols.Table // /sys/kernel/btf/vmlinux, when there
	user    *symbols.Set   // --symbols (a vmlinux with DWARF for file:line), nil if none
	set     *symbols.Set   // kall, btf and the user's tables
	mods    string         // /proc/modules' names as read last
	loadedM map[string]bool
	inst    map[string]bool // installed modules (modules.dep), read once
}

func normMod(name string) string { return strings.ReplaceAll(name, "-", "_") }

func loadKsyms(user []string) (*ksyms, error) {
	k := &ksyms{}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		k.release = unix.ByteSliceToString(u.Release[:])
	}
	if len(user) > 0 {
		k.user = symbols.NewSet()
		for _, p := range user {
			tab, err := symbols.Open(p)
			if err != nil {
				return nil, err
			}
			k.user.Add(tab)
		}
	}
	if tab, err := symbols.Open("/sys/kernel/btf/vmlinux"); err == nil {
		k.btf = tab
	}
	if err := k.reload(); err != nil {
		return nil, err
	}
	return k, nil
}

// reload reads /proc/kallsyms and the module list again.
func (k *ksyms) reload() error {
	tab, err := symbols.Open("/proc/kallsyms")
	if err != nil {
		return fmt.Errorf("the kernel's symbols: %w (as root, /proc/kallsyms gives their addresses)", err)
	}
	if s, err := symbols.NewSet(tab).Lookup("_stext"); err != nil || s.Addr == 0 {
		return errors.New("the kernel's symbols: /proc/kallsyms shows no addresses: run as root (kernel.kptr_restrict)")
	}
	k.kall = symbols.NewSet(tab)
	k.set = symbols.NewSet(tab)
	if k.btf != nil {
		k.set.Add(k.btf)
	}
	if k.user != nil {
		for _, t := range k.user.Tables() {
			k.set.Add(t)
		}
	}
	k.mods, k.loadedM = readModules()
	return nil
}

// readModules reads the names of /proc/modules (none on a kernel without
// loadable modules).
func readModules() (string, map[string]bool) {
	b, err := os.ReadFile("/proc/modules")
	m := map[string]bool{}
	if err != nil {
		return "", m
	}
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			m[f[0]] = true
			names = append(names, f[0])
		}
	}
	slices.Sort(names)
	return strings.Join(names, " "), m
}

// builtin reports whether a module is built into the kernel image.
func builtin(name string) bool {
	d := filepath.Join("/sys/module", name)
	if _, err := os.Stat(d); err != nil {
		return false
	}
	_, err := os.Stat(filepath.Join(d, "refcnt"))
	return err != nil
}

// loaded reports whether a kernel module's code is in the kernel now.
func (k *ksyms) loaded(name string) bool {
	name = normMod(name)
	return k.loadedM[name] || builtin(name)
}

// known reports whether a kernel module is loaded, built in, or installed.
func (k *ksyms) known(name string) bool {
	if k.loaded(name) {
		return true
	}
	if k.inst == nil {
		k.inst = map[string]bool{}
		if b, err := os.ReadFile(filepath.Join("/lib/modules", k.release, "modules.dep")); err == nil {
			sc := bufio.NewScanner(bytes.NewReader(b))
			for sc.Scan() {
				f, _, _ := strings.Cut(sc.Text(), ":")
				base := filepath.Base(f)
				base, _, _ = strings.Cut(base, ".ko")
				k.inst[normMod(base)] = true
			}
		}
	}
	return k.inst[normMod(name)]
}

// symEnv answers a location's or relocation's terms: symbols of the
// module first (kallsyms' [MOD]), then the kernel's; types from BTF and
// the user's DWARF.
type symEnv struct {
	k    *ksyms
	kmod string
}

func (e symEnv) Symbol(name string) (uint64, error) {
	if e.kmod != "" {
		if s, err := e.k.set.LookupModule(normMod(e.kmod), name); err == nil {
			return s.Addr, nil
		}
	}
	s, err := e.k.set.LookupModule("", name)
	if err != nil {
		return 0, err
	}
	return s.Addr, nil
}
func (e symEnv) Sizeof(t string) (uint64, error)      { return e.k.set.Sizeof(t) }
func (e symEnv) Offsetof(t, f string) (uint64, error) { return e.k.set.Offsetof(t, f) }

// relocate patches a source's relocations for the running kernel and
// loads it.
func (t *Target) relocate(s *source) (*rpn.Program, error) {
	m := s.src
	if len(m.Relocs) > 0 {
		cp := *m
		cp.Code = append([]byte{}, m.Code...)
		for _, r := range m.Relocs {
			v, err := r.Sum.Eval(symEnv{t.syms, s.mod.kmod})
			if err != nil {
				return nil, fmt.Errorf("push d,%s: %v", r.Expr, err)
			}
			for i := 0; i < 8; i++ {
				cp.Code[int(r.Off)+i] = byte(v >> (8 * i))
			}
		}
		m = &cp
	}
	return rpn.Load(m)
}

// address resolves an offset or retprobe location to a kernel address.
func (t *Target) address(d *rpn.Probe, kmod string) (uint64, error) {
	switch d.Loc.Kind {
	case rpn.LocAbsolute:
		return d.Loc.Addr, nil
	case rpn.LocLine:
		if t.syms.user == nil {
			return 0, fmt.Errorf("%s: a source line needs a vmlinux with DWARF (--symbols)", d.Loc.Text)
		}
		a, _, err := t.syms.user.LineAddr(d.Loc.File, int(d.Loc.Line))
		if err != nil {
			return 0, fmt.Errorf("%s: %v", d.Loc.Text, err)
		}
		// the vmlinux's link-time address, slid to where it runs
		st, err1 := t.syms.user.Lookup("_stext")
		live, err2 := t.syms.kall.Lookup("_stext")
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("%s: _stext is not in both the vmlinux and kallsyms: cannot find the KASLR slide", d.Loc.Text)
		}
		return a + live.Addr - st.Addr, nil
	}
	a, err := d.Loc.Sum.Eval(symEnv{t.syms, kmod})
	if err != nil {
		return 0, fmt.Errorf("%s = %s: %v", d.Kind, d.Loc.Text, err)
	}
	return a, nil
}

// function finds the kernel function an address is in: its name and the
// offset, as kprobes take them.
func (t *Target) function(addr uint64) (symbols.Symbol, uint64, error) {
	sym, off, ok := t.syms.kall.Nearest(addr)
	if !ok || sym.Kind != 'T' && sym.Kind != 't' {
		return symbols.Symbol{}, 0, fmt.Errorf("%#x is not in the kernel's text", addr)
	}
	return sym, off, nil
}

// checkCode checks a probe's opcode and that addr is an instruction
// boundary of its function, decoding the live text from the function's
// start.
func (t *Target) checkCode(p *probe, fn symbols.Symbol, off uint64) error {
	d := p.def()
	if t.kmem == nil {
		if d.HasOpcode {
			return errors.New("opcode = : the kernel's text cannot be read here to check it")
		}
		return nil
	}
	if off > 1<<20 {
		return fmt.Errorf("%s+%#x: past the function's reach", fn.Name, off)
	}
	code := make([]byte, off+16)
	if err := t.kmem.read(fn.Addr, code); err != nil {
		return fmt.Errorf("reading the kernel's text at %s: %v", fn.Name, err)
	}
	var prev uint64
	for at := uint64(0); at < off; {
		in, err := x86asm.Decode(code[at:], 64)
		if err != nil {
			return fmt.Errorf("%s+%#x: the code before it does not decode (at +%#x: %v)", fn.Name, off, at, err)
		}
		prev = at
		at += uint64(in.Len)
		if at > off {
			return fmt.Errorf("%s+%#x is not an instruction boundary: the instruction at +%#x (%s) runs to +%#x", fn.Name, off, prev, in, at)
		}
	}
	if d.HasOpcode && code[off] != d.Opcode {
		return &mismatch{fmt.Sprintf("the byte at %s+%#x is %#02x, not the opcode %#02x", fn.Name, off, code[off], d.Opcode)}
	}
	return nil
}

type mismatch struct{ msg string }

func (m *mismatch) Error() string { return m.msg }

// attach compiles, loads and attaches one probe.
func (t *Target) attach(p *probe) error {
	d := p.def()
	s := p.s
	o := bpf.Options{Maps: s.maps, Probe: uint32(p.idx), PID: uint32(t.opts.PID)}
	switch d.Kind {
	case rpn.ProbeTracepoint:
		group, event, _ := strings.Cut(d.Loc.Text, ":")
		o.Kind = bpf.KindTracepoint
		if err := t.fields(&o, s.src, group, event); err != nil {
			return err
		}
		prog, err := t.load(s, p, o)
		if err != nil {
			return err
		}
		l, err := bpf.AttachTracepoint(prog, group, event)
		if err != nil {
			return fmt.Errorf("tracepoint %s: %v", d.Loc.Text, err)
		}
		p.prog, p.link, p.how = prog, l, "tracepoint"
		return nil
	case rpn.ProbeOffset, rpn.ProbeRetprobe:
	default:
		return fmt.Errorf("probe kind %s: not supported by the kernel target", d.Kind)
	}
	addr, err := t.address(d, s.mod.kmod)
	if err != nil {
		return err
	}
	fn, off, err := t.function(addr)
	if err != nil {
		return err
	}
	p.addr = addr
	if d.Kind == rpn.ProbeRetprobe {
		if off != 0 {
			return fmt.Errorf("retprobe = %s: %#x is %s+%#x, not a function's first instruction", d.Loc.Text, addr, fn.Name, off)
		}
		if err := t.mech.Kretprobe; err != nil {
			return fmt.Errorf("retprobe: %v", err)
		}
		o.Kind = bpf.KindKretprobe
		prog, err := t.load(s, p, o)
		if err != nil {
			return err
		}
		l, err := bpf.AttachKretprobe(prog, fn.Name, int(d.MaxActive))
		if err != nil {
			prog.Close()
			return err
		}
		p.prog, p.link, p.how = prog, l, "kretprobe"
		return nil
	}
	if err := t.checkCode(p, fn, off); err != nil {
		var mm *mismatch
		if errors.As(err, &mm) {
			p.state = engine.StateMismatch
		}
		return err
	}
	if off == 0 && t.mech.Fentry == nil {
		if err := t.fentry(p, o, fn); err == nil {
			return nil
		}
	}
	if err := t.mech.Kprobe; err != nil {
		return fmt.Errorf("%s+%#x: %v", fn.Name, off, err)
	}
	o.Kind = bpf.KindKprobe
	o.Addr = addr
	prog, err := t.load(s, p, o)
	if err != nil {
		return err
	}
	l, err := bpf.AttachKprobe(prog, fn.Name, off)
	if err != nil {
		prog.Close()
		return err
	}
	p.prog, p.link, p.how = prog, l, "kprobe"
	return nil
}

// fentry puts a probe at a function's entry with an fentry program, when
// the program reads no register fentry cannot give.
func (t *Target) fentry(p *probe, o bpf.Options, fn symbols.Symbol) error {
	n, err := bpf.FuncArgs(fn.Name)
	if err != nil {
		return err
	}
	o.Kind, o.Addr, o.NumArgs, o.AttachTo = bpf.KindFentry, fn.Addr, n, fn.Name
	prog, err := t.load(p.s, p, o)
	if err != nil {
		return err
	}
	l, err := bpf.AttachFentry(prog)
	if err != nil {
		prog.Close()
		return err
	}
	p.prog, p.link, p.how = prog, l, "fentry"
	return nil
}

// load compiles and loads a probe's program; the error names the DPDF
// line when the compiler or the verifier refuses.
func (t *Target) load(s *source, p *probe, o bpf.Options) (*ebpf.Program, error) {
	c, err := bpf.CompileProbe(s.prog, p.idx, o)
	if err != nil {
		return nil, err
	}
	return c.Load()
}

// fields resolves the tracepoint fields a source's program names.
func (t *Target) fields(o *bpf.Options, m *rpn.Module, group, event string) error {
	if len(m.Fields) == 0 {
		return nil
	}
	f, err := bpf.ReadFormat(group, event)
	if err != nil {
		return err
	}
	o.Format = f
	return nil
}

// linkMissed is what the kernel counts as missed for a link (kprobes'
// nmissed), 0 when it does not say.
func linkMissed(l link.Link) uint64 {
	info, err := l.Info()
	if err != nil {
		return 0
	}
	if k := info.KprobeMulti(); k != nil {
		return k.Missed
	}
	if k := info.PerfEvent(); k != nil {
		if kp := k.Kprobe(); kp != nil {
			return kp.Missed
		}
	}
	return 0
}

// poll watches the module list: probes of a module go in when it loads
// and are pending again when it unloads.
func (t *Target) poll() {
	defer t.poller.Done()
	tick := time.NewTicker(t.opts.Poll)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
		}
		names, _ := readModules()
		t.mu.Lock()
		if names != t.syms.mods && !t.closed {
			if err := t.syms.reload(); err != nil {
				t.warn("reading the kernel's symbols again: " + err.Error())
			} else {
				t.modulesChanged()
			}
		}
		t.mu.Unlock()
	}
}

// modulesChanged places the sources of modules now loaded and unplaces
// those of modules gone.
func (t *Target) modulesChanged() {
	for _, m := range t.modules {
		if m.kmod == "" {
			continue
		}
		in := t.syms.loaded(m.kmod)
		for _, s := range m.srcs {
			switch {
			case in && s.prog == nil && pendingAll(s):
				t.place(s)
			case !in && s.prog != nil:
				t.unplace(s)
				for _, p := range s.probes {
					if p.state == engine.StatePending || p.state == engine.StateRefused {
						p.state, p.reason = engine.StatePending, "kernel module "+m.kmod+" was unloaded; its probes go in again when it is loaded"
					}
				}
			}
		}
	}
}

func pendingAll(s *source) bool {
	for _, p := range s.probes {
		if p.state != engine.StatePending {
			return false
		}
	}
	return true
}
