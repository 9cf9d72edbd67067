//go:build linux

package bpf

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// AttachKprobe attaches prog (compiled with KindKprobe) at symbol+offset
// (symbol may be "module:symbol"), through the kernel's kprobe PMU
// (perf_event_open: a file descriptor, which goes when gprobes goes,
// however it ends; nothing is written to tracefs). The errors are precise:
// ErrNotBoundary, ErrUnknownSymbol, ErrCannotProbe, with the
// blacklist's word when /sys/kernel/debug/kprobes/blacklist is readable.
func AttachKprobe(prog *ebpf.Program, symbol string, offset uint64) (link.Link, error) {
	return attachKprobe(prog, symbol, offset, false)
}

// AttachKretprobe attaches prog (compiled with KindKretprobe) to the
// returns of the kernel function symbol. maxactive is how many calls
// the kernel tracks at once (its instances: calls beyond them are its
// nmissed, not run): at most the kernel's default, max(10, 2 × possible
// CPUs), or 0 for it, the probe goes through the kprobe PMU as
// AttachKprobe's does (and tracks that default); above it, the PMU cannot
// say it, and the kretprobe is a tracefs kprobe event of group
// "gprobes_<random>", its perf event ours: a gprobes killed with SIGKILL
// leaves that (disabled, programless) event behind in kprobe_events, for
// RemoveStaleKprobeEvents.
func AttachKretprobe(prog *ebpf.Program, symbol string, maxactive int) (link.Link, error) {
	if maxactive <= kretprobeDefault() {
		return attachKprobe(prog, symbol, 0, true)
	}
	if _, _, err := kprobePMU(true); err != nil {
		return nil, err
	}
	l, err := link.Kretprobe(symbol, prog, &link.KprobeOptions{RetprobeMaxActive: maxactive, TraceFSPrefix: "gprobes"})
	if err != nil {
		return nil, fmt.Errorf("kretprobe %s (maxactive %d, through tracefs): %w", symbol, maxactive, err)
	}
	return l, nil
}

// kretprobeDefault is the kernel's maxactive for a kretprobe not given
// one (register_kretprobe).
func kretprobeDefault() int {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		n = runtime.NumCPU()
	}
	return max(10, 2*n)
}

const pmuDir = "/sys/bus/event_source/devices/kprobe"

// kprobePMU returns the kprobe PMU's perf type, and with ret the config
// bit of a retprobe.
func kprobePMU(ret bool) (uint32, uint, error) {
	return dynamicPMU(pmuDir, "kprobes", "CONFIG_KPROBES", ret)
}

// dynamicPMU returns the perf type of the kprobe or uprobe PMU in dir,
// and with ret the config bit of a retprobe; what and config name it in
// the error when the kernel has none.
func dynamicPMU(dir, what, config string, ret bool) (uint32, uint, error) {
	b, err := os.ReadFile(filepath.Join(dir, "type"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, fmt.Errorf("this kernel has no %s (no %s PMU, %s: a kernel built without %s)", what, filepath.Base(dir), dir, config)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("%s PMU: %w", filepath.Base(dir), err)
	}
	typ, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("%s PMU: type %q", filepath.Base(dir), b)
	}
	if !ret {
		return uint32(typ), 0, nil
	}
	b, err = os.ReadFile(filepath.Join(dir, "format", "retprobe"))
	if err != nil {
		return 0, 0, fmt.Errorf("this kernel's %s PMU has no retprobes: %w", filepath.Base(dir), err)
	}
	var bit uint
	if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "config:%d", &bit); err != nil || bit > 63 {
		return 0, 0, fmt.Errorf("%s PMU: retprobe format %q", filepath.Base(dir), b)
	}
	return uint32(typ), bit, nil
}

// AttachKprobeAddr attaches prog (compiled with KindKprobe) at a kernel
// address, for a function whose name kallsyms gives several times (static
// functions of different files): by name the kernel would take the first.
func AttachKprobeAddr(prog *ebpf.Program, addr uint64) (link.Link, error) {
	return attachKprobe(prog, "", addr, false)
}

// openKprobe opens a kprobe (or kretprobe) perf event at symbol+offset,
// or with symbol "" at the address offset.
func openKprobe(symbol string, offset uint64, ret bool) (int, error) {
	typ, bit, err := kprobePMU(ret)
	if err != nil {
		return -1, err
	}
	var sym *byte
	if symbol != "" {
		if sym, err = unix.BytePtrFromString(symbol); err != nil {
			return -1, fmt.Errorf("kprobe %q: %w", symbol, err)
		}
	}
	attr := unix.PerfEventAttr{
		Type:        typ,
		Size:        unix.PERF_ATTR_SIZE_VER1,
		Ext1:        uint64(uintptr(unsafe.Pointer(sym))), // config1: the symbol (0: config2 is an address)
		Ext2:        offset,                               // config2: the offset, or the address
		Sample_type: unix.PERF_SAMPLE_RAW,
		Sample:      1,
		Wakeup:      1,
	}
	if ret {
		attr.Config = 1 << bit
	}
	fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	runtime.KeepAlive(sym)
	if err != nil {
		return -1, kprobeError(symbol, offset, ret, err)
	}
	return fd, nil
}

// kprobeError says why the kernel refused a kprobe.
func kprobeError(symbol string, offset uint64, ret bool, err error) error {
	what := fmt.Sprintf("kprobe %s+%#x", symbol, offset)
	if ret {
		what = "kretprobe " + symbol
	}
	switch {
	case errors.Is(err, unix.EILSEQ):
		return fmt.Errorf("%s: %w (%v)", what, ErrNotBoundary, err)
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("%s: %w %s (%v)", what, ErrUnknownSymbol, symbol, err)
	case errors.Is(err, unix.E2BIG):
		return fmt.Errorf("%s: %w: the offset is beyond the function (%v)", what, ErrCannotProbe, err)
	case errors.Is(err, unix.EINVAL):
		if onBlacklist(symbol) {
			return fmt.Errorf("%s: %w: %s is on the kernel's kprobe blacklist (%v)", what, ErrCannotProbe, symbol, err)
		}
		why := "notrace or kprobe blacklist"
		if ret {
			why += ", or not a function's entry"
		} else if offset != 0 {
			why += ", or the offset is outside the function"
		}
		return fmt.Errorf("%s: %w (%s) (%v)", what, ErrCannotProbe, why, err)
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("%s: permission denied: kprobes need root (CAP_PERFMON and CAP_SYS_ADMIN), and lockdown may forbid them (%v)", what, err)
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("%s: busy: another user of the address (a livepatch, an ftrace or kprobe conflict) (%v)", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// onBlacklist reports whether symbol is on the kprobe blacklist, when
// debugfs lets it be read.
func onBlacklist(symbol string) bool {
	f, err := os.Open("/sys/kernel/debug/kprobes/blacklist")
	if err != nil {
		return false
	}
	defer f.Close()
	_, sym, _ := strings.Cut(symbol, ":")
	if sym == "" {
		sym = symbol
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 0xffffffff81000000-0xffffffff81000010	name [module]
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && fs[1] == sym {
			return true
		}
	}
	return false
}

func attachKprobe(prog *ebpf.Program, symbol string, offset uint64, ret bool) (link.Link, error) {
	fd, err := openKprobe(symbol, offset, ret)
	if err != nil {
		return nil, err
	}
	// the link holds the perf event: ours can go
	defer unix.Close(fd)
	l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: prog, Attach: ebpf.AttachPerfEvent})
	if err != nil {
		return nil, fmt.Errorf("kprobe %s+%#x: attaching the program: %w", symbol, offset, err)
	}
	return l, nil
}

// AttachFentry attaches prog, compiled with KindFentry (and so loaded for
// its function, Options.AttachTo), at the function's entry.
func AttachFentry(prog *ebpf.Program) (link.Link, error) {
	l, err := link.AttachTracing(link.TracingOptions{Program: prog, AttachType: ebpf.AttachTraceFEntry})
	if err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) {
			return nil, fmt.Errorf("fentry: the kernel's BPF trampoline refuses to attach (%w)", err)
		}
		return nil, fmt.Errorf("fentry: %w", err)
	}
	return l, nil
}

// RemoveStaleKprobeEvents removes the tracefs kprobe events
// AttachKretprobe made (group gprobes_*) that no perf event uses any
// more: those of a gprobes killed with SIGKILL. An event in use stays
// (the kernel refuses with EBUSY). It returns how many it removed.
func RemoveStaleKprobeEvents() (int, error) {
	for _, r := range tracefsRoots {
		p := filepath.Join(r, "kprobe_events")
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		n := 0
		for _, l := range strings.Split(string(b), "\n") {
			// r64:gprobes_1a2b3c/vfs_read vfs_read
			f := strings.Fields(l)
			if len(f) == 0 {
				continue
			}
			_, ev, ok := strings.Cut(f[0], ":")
			if !ok || !strings.HasPrefix(ev, "gprobes_") {
				continue
			}
			w, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return n, err
			}
			_, err = w.WriteString("-:" + ev + "\n")
			w.Close()
			if err == nil {
				n++
			}
		}
		return n, nil
	}
	return 0, nil
}

var btfCache struct {
	once sync.Once
	c    *btf.Cache
}

// FuncArgs returns how many arguments of the kernel function name (in
// vmlinux's BTF or a loaded module's) a fentry program reads as registers:
// the leading integers, enums and pointers (its Options.NumArgs). A struct
// or float passed by value ends the count: from there the context's
// slots are not the registers. An error when the kernel has no BTF or the
// function is not in it (a function inlined everywhere, or static and
// named twice): a kprobe can still probe it.
func FuncArgs(name string) (int, error) {
	btfCache.once.Do(func() { btfCache.c = btf.NewCache() })
	c := btfCache.c
	spec, err := c.Kernel()
	if err != nil {
		return 0, fmt.Errorf("fentry %s: the kernel's BTF (/sys/kernel/btf/vmlinux): %w", name, err)
	}
	var fn *btf.Func
	err = spec.TypeByName(name, &fn)
	if errors.Is(err, btf.ErrNotFound) {
		ents, _ := os.ReadDir("/sys/kernel/btf")
		for _, e := range ents {
			if e.Name() == "vmlinux" {
				continue
			}
			ms, merr := c.Module(e.Name())
			if merr != nil {
				continue
			}
			if err = ms.TypeByName(name, &fn); !errors.Is(err, btf.ErrNotFound) {
				break
			}
		}
	}
	switch {
	case errors.Is(err, btf.ErrNotFound):
		return 0, fmt.Errorf("fentry %s: not a function in the kernel's BTF (inlined, or not built with BTF)", name)
	case errors.Is(err, btf.ErrMultipleMatches):
		return 0, fmt.Errorf("fentry %s: several functions of that name in the kernel's BTF", name)
	case err != nil:
		return 0, fmt.Errorf("fentry %s: %w", name, err)
	}
	proto, ok := fn.Type.(*btf.FuncProto)
	if !ok {
		return 0, fmt.Errorf("fentry %s: no prototype in BTF", name)
	}
	n := 0
	for _, p := range proto.Params {
		if !inRegister(p.Type) {
			break
		}
		n++
	}
	return n, nil
}

// inRegister reports whether an argument of type t is one register.
func inRegister(t btf.Type) bool {
	switch u := btf.UnderlyingType(t).(type) {
	case *btf.Int:
		return u.Size <= 8
	case *btf.Enum:
		return u.Size <= 8
	case *btf.Pointer:
		return true
	}
	return false
}
