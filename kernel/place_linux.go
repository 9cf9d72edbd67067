//go:build linux

package kernel

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/arch/x86/x86asm"
	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/symbols"
)

// ksyms is what gprobes knows of the running kernel's symbols and
// modules.
type ksyms struct {
	release string
	core    *symbols.Table // /proc/kallsyms' lines of the kernel image, read once
	kall    *symbols.Set   // core and the modules' lines of /proc/kallsyms as read last
	btf     *symbols.Table // /sys/kernel/btf/vmlinux, when there
	user    *symbols.Set   // --symbols (a vmlinux with DWARF for file:line, a System.map), nil if none
	facts   bpf.Kallsyms   // what kallsyms shows of the kernel image (its data symbols)
	set     *symbols.Set   // kall, btf and the user's tables
	mods    string         // /proc/modules' names as read last
	loadedM map[string]bool
	inst    map[string]bool // installed modules (modules.dep), read once
	// aliases are the kernel's text symbols that share their address
	// with another (kallsyms), built when first needed after a reload
	aliases map[uint64][]string
	// ino is each loaded module's /sys/module folder's inode number as
	// of the last reload: a module unloaded and loaded again gets a new
	// one, where its name and often its address stay the same
	ino map[string]uint64
	// reloaded are the modules the last reload found loaded again
	// since the one before (their ino changed)
	reloaded map[string]bool
	// text is the kernel's text of the functions gprobes checked a probe
	// in, by the function's address, as read before gprobes placed a
	// kprobe there (see funcText)
	text map[uint64]funcText
}

// funcText is a function's text as gprobes first read it.
type funcText struct {
	module string // kernel module, "" for the kernel image
	code   []byte
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
//
// The kernel image's symbols do not change: they are parsed once, and
// again only the modules' lines ("ADDR TYPE NAME\t[MODULE]"), which
// makes following a module's load quick (under the lab's TCG, parsing all
// of kallsyms took 0.5 to 2 s, and a probe in a module that loads went in
// that much later).
func (k *ksyms) reload() error {
	const kallsyms = "/proc/kallsyms"
	b, err := os.ReadFile(kallsyms)
	if err != nil {
		return fmt.Errorf("the kernel's symbols: %w (as root, /proc/kallsyms gives their addresses)", err)
	}
	core, mods := splitKallsyms(b)
	if k.core == nil {
		tab, err := symbols.ReadMap(kallsyms, bytes.NewReader(core))
		if err != nil {
			return fmt.Errorf("the kernel's symbols: %w", err)
		}
		if s, err := symbols.NewSet(tab).Lookup("_stext"); err != nil || s.Addr == 0 {
			return errors.New("the kernel's symbols: /proc/kallsyms shows no addresses: run as root (kernel.kptr_restrict)")
		}
		k.core = tab
		k.facts = bpf.ScanKallsyms(core)
	}
	tabs := []*symbols.Table{k.core}
	if len(mods) > 0 {
		// named as the file it is: a symbol not found is "not found
		// in /proc/kallsyms", once
		tab, err := symbols.ReadMap(kallsyms, bytes.NewReader(mods))
		if err != nil {
			return fmt.Errorf("the kernel's symbols: the modules': %w", err)
		}
		tabs = append(tabs, tab)
	}
	k.kall = symbols.NewSet(tabs...)
	k.set = symbols.NewSet(tabs...)
	if k.btf != nil {
		k.set.Add(k.btf)
	}
	if k.user != nil {
		for _, t := range k.user.Tables() {
			k.set.Add(t)
		}
	}
	k.mods, k.loadedM = readModules()
	k.aliases = nil
	old := k.ino
	k.ino, k.reloaded = map[string]uint64{}, map[string]bool{}
	for name := range k.loadedM {
		k.ino[name] = moduleIno(name)
		if o, ok := old[name]; ok && o != k.ino[name] {
			k.reloaded[name] = true
		}
	}
	for a, ft := range k.text {
		// a module's text goes with it (another module, or itself again,
		// may load there)
		if m := normMod(ft.module); m != "" && (!k.loaded(m) || k.reloaded[m]) {
			delete(k.text, a)
		}
	}
	return nil
}

// moduleIno is the inode number of a module's /sys/module folder (0 if
// none): sysfs numbers each new folder afresh, so a module loaded again
// has another.
func moduleIno(name string) uint64 {
	var st unix.Stat_t
	if unix.Stat(filepath.Join("/sys/module", name), &st) != nil {
		return 0
	}
	return st.Ino
}

// reloadedSince reports whether a loaded kernel module was unloaded and
// loaded again since the last reload (between two polls: its name is in
// the list both times).
func (k *ksyms) reloadedSince(name string) bool {
	name = normMod(name)
	o, ok := k.ino[name]
	return ok && moduleIno(name) != o
}

// splitKallsyms splits kallsyms' text into the kernel image's lines and
// the modules' (those with a "[MODULE]": loadable modules, and what the
// kernel adds at run time, [bpf] programs, [__builtin__ftrace]
// trampolines).
func splitKallsyms(b []byte) (core, mods []byte) {
	core = make([]byte, 0, len(b))
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i+1], b[i+1:]
		} else {
			b = nil
		}
		if bytes.IndexByte(line, '[') >= 0 {
			mods = append(mods, line...)
		} else {
			core = append(core, line...)
		}
	}
	return core, mods
}

// aliasesAt returns the names of the kernel's text symbols at addr when
// there are several (an alias: __x64_sys_getppid is __do_sys_getppid,
// the name BTF knows), nil when there is one.
func (k *ksyms) aliasesAt(addr uint64) []string {
	if k.aliases == nil {
		k.aliases = readAliases("/proc/kallsyms")
	}
	return k.aliases[addr]
}

// readAliases reads a kallsyms file's text symbols that share an address.
func readAliases(path string) map[uint64][]string {
	out := map[uint64][]string{}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	type sym struct {
		addr uint64
		name string
	}
	var all []sym
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ffffffff810be3a0 T __x64_sys_getppid	[module]
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 || fs[1] != "t" && fs[1] != "T" {
			continue
		}
		a, err := strconv.ParseUint(fs[0], 16, 64)
		if err != nil || a == 0 {
			continue
		}
		all = append(all, sym{a, fs[2]})
	}
	slices.SortStableFunc(all, func(x, y sym) int { return cmp.Compare(x.addr, y.addr) })
	for i := 0; i < len(all); {
		j := i + 1
		for j < len(all) && all[j].addr == all[i].addr {
			j++
		}
		if j-i > 1 {
			for _, s := range all[i:j] {
				out[s.addr] = append(out[s.addr], s.name)
			}
		}
		i = j
	}
	return out
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
	// task, when set, answers the name "task" in a watch probe's
	// address: the task_struct of the process the probes follow
	// (watchTask)
	task func() (uint64, error)
}

// taskName is the name a watch probe's address gives the task_struct of
// the process the probes follow.
const taskName = "task"

// Symbol is a symbol's address in the running kernel: kallsyms' (the
// module's own first), else the user's --symbols slid by KASLR's offset
// (kallsyms' _stext minus theirs): a kernel without CONFIG_KALLSYMS_ALL
// lists no variables, and a System.map or vmlinux of it gives them.
func (e symEnv) Symbol(name string) (uint64, error) {
	if name == taskName && e.task != nil {
		return e.task()
	}
	if e.kmod != "" {
		if s, err := e.k.set.LookupModule(normMod(e.kmod), name); err == nil {
			return s.Addr, nil
		}
	}
	s, err := e.k.kall.LookupModule("", name)
	if err == nil {
		return s.Addr, nil
	}
	if e.k.user != nil {
		u, uerr := e.k.user.LookupModule("", name)
		if uerr == nil {
			slide, serr := e.k.slide()
			if serr != nil {
				return 0, fmt.Errorf("%s is in --symbols but not in /proc/kallsyms, and %v", name, serr)
			}
			return u.Addr + slide, nil
		}
	}
	if why := e.k.facts.DataSyms; why != nil && e.k.user == nil {
		return 0, fmt.Errorf("%v: %v; the kernel's BTF has its types, not its variables' addresses: give --symbols with this kernel's System.map or vmlinux (gprobes slides their addresses by _stext's)", err, why)
	}
	return 0, err
}

// slide is the KASLR offset of the running kernel from the user's
// --symbols: kallsyms' _stext minus theirs.
func (k *ksyms) slide() (uint64, error) {
	st, err1 := k.user.Lookup("_stext")
	live, err2 := k.kall.Lookup("_stext")
	if err1 != nil || err2 != nil {
		return 0, errors.New("_stext is not in both the --symbols and kallsyms: cannot find the KASLR slide")
	}
	return live.Addr - st.Addr, nil
}
func (e symEnv) Sizeof(t string) (uint64, error) {
	if m := e.modTypes(); m != nil {
		if v, err := m.Sizeof(t); err == nil {
			return v, nil
		}
	}
	return e.k.set.Sizeof(t)
}

func (e symEnv) Offsetof(t, f string) (uint64, error) {
	if m := e.modTypes(); m != nil {
		if v, err := m.Offsetof(t, f); err == nil {
			return v, nil
		}
	}
	return e.k.set.Offsetof(t, f)
}

// modTypes are a kernel module's own types: its split BTF in
// /sys/kernel/btf/MODULE, on the kernel's (read at each placement: a
// module loaded again may have other types); nil for the kernel image or a
// module without BTF.
func (e symEnv) modTypes() *symbols.Set {
	if e.kmod == "" {
		return nil
	}
	tab, err := symbols.Open(filepath.Join("/sys/kernel/btf", normMod(e.kmod)))
	if err != nil {
		return nil
	}
	return symbols.NewSet(tab)
}

// resolver resolves locations and relocations in the running kernel
// (probe.Resolver): symbols as kallsyms shows them (the addresses it runs
// at, so no bias), the module's own first, then --symbols slid by KASLR's
// offset; source lines from the --symbols' DWARF; values of build time
// (a PPDF built against this kernel's vmlinux or System.map) slid the same
// way. env is the symbols' environment (a watch's answers "task").
func (t *Target) resolver(env symEnv) probe.Resolver {
	return probe.Resolver{
		Env: env,
		Lines: func(file string, line int) (uint64, error) {
			if t.syms.user == nil {
				return 0, errors.New("a source line needs a vmlinux with DWARF (--symbols)")
			}
			a, _, err := t.syms.user.LineAddr(file, line)
			return a, err
		},
		Slide: t.syms.linkSlide,
	}
}

// linkSlide is how far the running kernel is from its link-time
// addresses (KASLR's offset): kallsyms' _stext minus the --symbols'.
func (k *ksyms) linkSlide() (uint64, error) {
	if k.user == nil {
		return 0, errors.New("the KASLR slide is known only with --symbols (this kernel's System.map or vmlinux; gprobes slides by _stext)")
	}
	return k.slide()
}

// removeStale removes what a gprobes killed with SIGKILL can leave in the
// kernel: the tracefs kprobe event of a kretprobe whose maxactive is above
// the kernel's default (bpf.AttachKretprobe), disabled and without its
// program, but a kprobe still registered. Everything else gprobes makes is
// a file descriptor, gone with the process.
func (t *Target) removeStale() {
	if t.mech.Kretprobe != nil {
		return
	}
	n, err := bpf.RemoveStaleKprobeEvents()
	if err != nil {
		t.warn("removing the kprobe events a killed gprobes left: " + err.Error())
	} else if n > 0 {
		t.warn(fmt.Sprintf("removed %d kprobe event(s) a killed gprobes had left in kprobe_events", n))
	}
}

// address resolves an offset or retprobe location to a kernel address.
func (t *Target) address(d *rpn.Probe, kmod string) (uint64, error) {
	return t.resolver(symEnv{k: t.syms, kmod: kmod}).Location(d)
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
func (t *Target) checkCode(p *bprobe, fn symbols.Symbol, off uint64) error {
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
	code, err := t.funcText(fn, off+16)
	if err != nil {
		return err
	}
	if err := onBoundary(fn.Name, off, code); err != nil {
		return err
	}
	if d.HasOpcode && code[off] != d.Opcode {
		return &mismatch{fmt.Sprintf("the byte at %s+%#x is %#02x, not the opcode %#02x", fn.Name, off, code[off], d.Opcode)}
	}
	return nil
}

// funcText returns at least n bytes of a function's text from its start
// (its whole text when kallsyms tells its size, up to 1 MiB), as gprobes
// first read it. Read again, it would show gprobes' own kprobes: a kprobe
// writes an int3 over its instruction's first byte, an optimized one a
// 5-byte jump, and decoding that text finds boundaries that are not there
// (an int3 at +0xd makes +0xe look like one) and opcodes that are not
// (0xcc). The text is kept as long as the function can be there: the
// kernel image's for good, a module's until the module is unloaded.
// Another tool's kprobes before gprobes first reads a function are still
// seen; the kernel refuses a non-boundary there itself.
func (t *Target) funcText(fn symbols.Symbol, n uint64) ([]byte, error) {
	k := t.syms
	ft, ok := k.text[fn.Addr]
	if ok && uint64(len(ft.code)) >= n {
		return ft.code, nil
	}
	want := max(n, min(fn.Size, 1<<20))
	code := make([]byte, want)
	have := copy(code, ft.code)
	// past what was read before no probe of gprobes can be: every one
	// is at least 16 bytes before its end
	if err := t.kmem.read(fn.Addr+uint64(have), code[have:]); err != nil {
		if have == 0 && want > n {
			// the size kallsyms implies may run past mapped text:
			// what the probe needs, at least
			code = code[:n]
			err = t.kmem.read(fn.Addr, code)
		}
		if err != nil {
			return nil, fmt.Errorf("reading the kernel's text at %s: %v", fn.Name, err)
		}
	}
	if k.text == nil {
		k.text = map[uint64]funcText{}
	}
	k.text[fn.Addr] = funcText{module: fn.Module, code: code}
	return code, nil
}

type mismatch struct{ msg string }

func (m *mismatch) Error() string { return m.msg }

// attach compiles, loads and attaches one probe.
func (t *Target) attach(p *bprobe) error {
	d := p.def()
	s := p.s
	o := bpf.Options{Maps: s.maps, Probe: uint32(p.Index), PID: uint32(t.opts.PID), IV: s.iv[p.Index]}
	if t.follow != nil {
		o.Follow = t.follow.Map
	}
	if s.mod.user != "" {
		return t.attachUser(p, o)
	}
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
		p.prog, p.link, p.How = prog, l, "tracepoint"
		return nil
	case rpn.ProbeWatch:
		return t.attachWatch(p, o)
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
	p.Addr = addr
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
		p.prog, p.link, p.How = prog, l, "kretprobe"
		return nil
	}
	if err := t.checkCode(p, fn, off); err != nil {
		var mm *mismatch
		if errors.As(err, &mm) {
			p.State = probe.StateMismatch
		}
		return err
	}
	// fentry in the kernel image only: a fentry program on a module's
	// function holds the module (its BPF trampoline takes a reference:
	// rmmod fails, "Resource temporarily unavailable", as long as the
	// probe is in), where a kprobe lets it go and goes with it
	if off == 0 && t.mech.Fentry == nil && fn.Module == "" {
		if err := t.fentry(p, o, fn); err == nil {
			return nil
		}
	}
	if err := t.mech.Kprobe; err != nil {
		if off == 0 && fn.Module == "" && t.mech.Fentry != nil {
			// neither way in: name both
			return fmt.Errorf("%s+%#x: %v; and fentry: %v", fn.Name, off, err, t.mech.Fentry)
		}
		return fmt.Errorf("%s+%#x: %v", fn.Name, off, err)
	}
	o.Kind = bpf.KindKprobe
	o.Addr = addr
	prog, err := t.load(s, p, o)
	if err != nil {
		return err
	}
	var l link.Link
	if t.uniqueName(fn) {
		l, err = bpf.AttachKprobe(prog, fn.Name, off)
	} else {
		// a name kallsyms has at several addresses: by name the kernel
		// would probe the first of them
		l, err = bpf.AttachKprobeAddr(prog, addr)
	}
	if err != nil {
		prog.Close()
		return err
	}
	p.prog, p.link, p.How = prog, l, "kprobe"
	return nil
}

// uniqueName reports whether a function's name stands for it alone in
// kallsyms (the kernel's and every module's).
func (t *Target) uniqueName(fn symbols.Symbol) bool {
	s, err := t.syms.kall.Lookup(fn.Name)
	return err == nil && s.Addr == fn.Addr
}

// fentry puts a probe at a function's entry with an fentry program, when
// the program reads no register fentry cannot give.
func (t *Target) fentry(p *bprobe, o bpf.Options, fn symbols.Symbol) error {
	name, n, err := t.btfFunc(fn)
	if err != nil {
		return err
	}
	o.Kind, o.Addr, o.NumArgs, o.AttachTo = bpf.KindFentry, fn.Addr, n, name
	prog, err := t.load(p.s, p, o)
	if err != nil {
		return err
	}
	l, err := bpf.AttachFentry(prog)
	if err != nil {
		prog.Close()
		return err
	}
	p.prog, p.link, p.How = prog, l, "fentry"
	return nil
}

// btfFunc finds the name BTF knows the function at fn.Addr by, and its
// arguments in registers: fn's own name, or an alias at the same address
// (__x64_sys_getppid is an alias of __do_sys_getppid, the function BTF
// describes). The kernel attaches a fentry program to the address
// kallsyms gives the name, so a name that kallsyms puts elsewhere too is
// not taken.
func (t *Target) btfFunc(fn symbols.Symbol) (string, int, error) {
	n, first := bpf.FuncArgs(fn.Name)
	if first == nil {
		return fn.Name, n, nil
	}
	for _, name := range t.syms.aliasesAt(fn.Addr) {
		if name == fn.Name {
			continue
		}
		if s, err := t.syms.kall.LookupModule(fn.Module, name); err != nil || s.Addr != fn.Addr {
			continue
		}
		if n, err := bpf.FuncArgs(name); err == nil {
			return name, n, nil
		}
	}
	return "", 0, first
}

// load compiles and loads a probe's program; the error names the DPDF
// line when the compiler or the verifier refuses.
func (t *Target) load(s *source, p *bprobe, o bpf.Options) (*ebpf.Program, error) {
	c, err := bpf.CompileProbe(s.prog, p.Index, o)
	if err != nil {
		return nil, err
	}
	return c.LoadCached(s.btf)
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

// closeLinks closes the probes' links, several at a time. Detaching is
// slow in the kernel, mostly waiting: a tracepoint's last perf event waits
// for RCU grace periods (tracepoint_synchronize_unregister), kprobes and
// fentry trampolines too; one after another, 100 tracepoint probes took
// 7 s to remove on this machine, 100 kprobes or fentries 5 to 17 s in the
// lab guest. Closed together their waits overlap.
func closeLinks(ps []*bprobe) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, closeParallel)
	closeOne := func(l link.Link) {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			l.Close()
			<-sem
		}()
	}
	for _, p := range ps {
		for _, e := range p.extra {
			closeOne(e.link)
		}
		if p.link == nil {
			continue
		}
		closeOne(p.link)
		p.link = nil
	}
	wg.Wait()
	for _, p := range ps {
		for _, e := range p.extra {
			if e.prog != nil { // a copy's link shares the probe's program
				e.prog.Close()
			}
		}
		p.extra, p.atts, p.copies = nil, nil, nil
	}
}

// closeParallel is how many links closeLinks closes at once.
const closeParallel = 64

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
		if !t.closed {
			t.filesChanged()
			t.scanCopies()
		}
		if !t.closed && (names != t.syms.mods || t.probedReloaded()) {
			if err := t.syms.reload(); err != nil {
				t.warn("reading the kernel's symbols again: " + err.Error())
			} else {
				t.modulesChanged()
			}
		}
		t.mu.Unlock()
	}
}

// probedReloaded reports whether a kernel module with probes in was
// unloaded and loaded again since the last look (rmmod and modprobe
// within one poll: the module list reads the same, and the kernel has
// dropped the probes, its kprobes "gone").
func (t *Target) probedReloaded() bool {
	for _, m := range t.kmodules() {
		if m.kmod == "" {
			continue
		}
		for _, s := range m.sources() {
			if s.prog != nil && t.syms.reloadedSince(m.kmod) {
				return true
			}
		}
	}
	return false
}

// modulesChanged places the sources of modules now loaded and unplaces
// those of modules gone; those of a module loaded again are placed
// again (at its new address).
func (t *Target) modulesChanged() {
	for _, m := range t.kmodules() {
		if m.kmod == "" {
			continue
		}
		in := t.syms.loaded(m.kmod)
		for _, s := range m.sources() {
			if in && s.prog != nil && t.syms.reloaded[normMod(m.kmod)] {
				t.unplace(s)
				t.place(s)
				continue
			}
			switch {
			case in && s.prog == nil && pendingAll(s):
				t.place(s)
			case !in && s.prog != nil:
				t.unplace(s)
				for _, p := range s.Probes {
					if p.State == probe.StatePending || p.State == probe.StateRefused {
						p.State = probe.StatePending
						p.Wait(probe.ReasonUnloaded(m.kmod), true)
					}
				}
			}
		}
	}
}

func pendingAll(s *source) bool {
	for _, p := range s.Probes {
		if p.State != probe.StatePending {
			return false
		}
	}
	return true
}

// onBoundary checks that offset off of function name, whose code from its
// start is code, starts an instruction: the instructions from the start
// decode, and one ends exactly at off.
func onBoundary(name string, off uint64, code []byte) error {
	var prev uint64
	for at := uint64(0); at < off; {
		in, err := x86asm.Decode(code[at:], 64)
		if err != nil {
			return fmt.Errorf("%s+%#x: the code before it does not decode (at +%#x: %v)", name, off, at, err)
		}
		prev = at
		at += uint64(in.Len)
		if at > off {
			return fmt.Errorf("%s+%#x is not an instruction boundary: the instruction at +%#x (%s) runs to +%#x", name, off, prev, in, at)
		}
	}
	return nil
}
