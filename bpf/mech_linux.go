//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

var mechs struct {
	once sync.Once
	m    Mechanisms
}

// Probe finds out which mechanisms this kernel has (Mechanisms), once
// per process (later calls return the first answer): cilium/ebpf's
// feature tests, and for the attachments a trivial program attached and
// detached at once (a tracepoint, a raw tracepoint, a fentry on a common
// function), a kprobe and a kretprobe perf event opened and closed, a
// uprobe and a uretprobe on a file of its own that nothing maps, and
// hardware breakpoints made disabled (never armed) on a kernel and a
// user address. Nothing is left behind. It takes a few milliseconds on
// the development machine (the fentry attempt most of them).
func Probe() Mechanisms {
	mechs.once.Do(func() { mechs.m = probeMechanisms() })
	return mechs.m
}

func probeMechanisms() Mechanisms {
	var m Mechanisms
	m.Ringbuf = have("BPF_MAP_TYPE_RINGBUF (Linux 5.8)", features.HaveMapType(ebpf.RingBuf))
	m.Loop = have("the bpf_loop helper (Linux 5.17)", features.HaveProgramHelper(ebpf.TracePoint, asm.FnLoop))
	m.Tracepoint = probeTracepoint()
	m.RawTracepoint = probeRawTracepoint()
	m.Kprobe = probeKprobe(false)
	m.Kretprobe = probeKprobe(true)
	m.KprobeMulti = have("kprobe.multi links (Linux 5.18 with CONFIG_FPROBE)", features.HaveBPFLinkKprobeMulti())
	m.Fentry = probeFentry()
	m.Uprobe = probeUprobe(false)
	m.Uretprobe = probeUprobe(true)
	m.TaskPtRegs = have("the bpf_task_pt_regs helper (Linux 5.15)", features.HaveProgramHelper(ebpf.TracePoint, asm.FnTaskPtRegs))
	if _, err := btf.LoadKernelSpec(); err != nil {
		m.BTF = fmt.Errorf("the kernel's BTF (/sys/kernel/btf/vmlinux, a kernel built with CONFIG_DEBUG_INFO_BTF): %v", err)
	}
	m.KernelWatch, m.UserWatch = probeWatches()
	return m
}

// have is missing's answer, nil for no error.
func have(what string, err error) error {
	if err == nil {
		return nil
	}
	return missing(what, err)
}

func trivial(spec ebpf.ProgramSpec) (*ebpf.Program, error) {
	spec.Instructions = asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}
	spec.License = "GPL"
	return ebpf.NewProgram(&spec)
}

func probeTracepoint() error {
	if err := features.HaveProgramType(ebpf.TracePoint); err != nil {
		return missing("BPF_PROG_TYPE_TRACEPOINT", err)
	}
	dir, err := eventsDir()
	if err != nil {
		return fmt.Errorf("tracepoints: %v", err)
	}
	prog, err := trivial(ebpf.ProgramSpec{Type: ebpf.TracePoint})
	if err != nil {
		return missing("a tracepoint program", err)
	}
	defer prog.Close()
	for _, ev := range [][2]string{{"syscalls", "sys_enter_getppid"}, {"sched", "sched_process_exec"}, {"sched", "sched_switch"}} {
		if _, err := os.Stat(filepath.Join(dir, ev[0], ev[1])); err != nil {
			continue
		}
		l, err := link.Tracepoint(ev[0], ev[1], prog, nil)
		if err != nil {
			return fmt.Errorf("attaching a tracepoint program to %s:%s fails: %v", ev[0], ev[1], err)
		}
		l.Close()
		return nil
	}
	return nil // no event to try: the parts are there
}

func probeRawTracepoint() error {
	if err := features.HaveProgramType(ebpf.RawTracepoint); err != nil {
		return missing("BPF_PROG_TYPE_RAW_TRACEPOINT (Linux 4.17)", err)
	}
	prog, err := trivial(ebpf.ProgramSpec{Type: ebpf.RawTracepoint})
	if err != nil {
		return missing("a raw tracepoint program", err)
	}
	defer prog.Close()
	var last error
	for _, name := range []string{"sys_enter", "sched_switch"} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: name, Program: prog})
		if err == nil {
			l.Close()
			return nil
		}
		last = err
	}
	return fmt.Errorf("attaching a raw tracepoint program fails: %v", last)
}

// commonFuncs are functions every kernel has, for the attach probes.
var commonFuncs = []string{"vfs_read", "do_sys_openat2", "vfs_write"}

func probeKprobe(ret bool) error {
	what := "kprobes"
	if ret {
		what = "kretprobes"
	}
	if err := features.HaveProgramType(ebpf.Kprobe); err != nil {
		return missing("BPF_PROG_TYPE_KPROBE", err)
	}
	if _, _, err := kprobePMU(ret); err != nil {
		return err
	}
	var last error
	for _, fn := range commonFuncs {
		fd, err := openKprobe(fn, 0, ret)
		if err == nil {
			unix.Close(fd)
			return nil
		}
		if errors.Is(err, ErrUnknownSymbol) {
			last = err
			continue
		}
		return fmt.Errorf("%s: %v", what, err)
	}
	return fmt.Errorf("%s: none of %v could be probed: %v", what, commonFuncs, last)
}

func probeFentry() error {
	fn := ""
	for _, f := range commonFuncs {
		if _, err := FuncArgs(f); err == nil {
			fn = f
			break
		}
	}
	if fn == "" {
		if _, err := btf.LoadKernelSpec(); err != nil {
			return fmt.Errorf("fentry needs the kernel's BTF (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF): %v", err)
		}
		return fmt.Errorf("fentry: none of %v in the kernel's BTF", commonFuncs)
	}
	prog, err := trivial(ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: ebpf.AttachTraceFEntry, AttachTo: fn})
	switch {
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("this kernel refuses to load fentry programs (EPERM from BPF_PROG_LOAD, before its verifier, as root: a lockdown or policy of this kernel)")
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("this kernel has no fentry programs (BPF_PROG_TYPE_TRACING, Linux 5.5 on x86-64): %v", err)
	case err != nil:
		return fmt.Errorf("loading a fentry program on %s fails: %v", fn, err)
	}
	defer prog.Close()
	l, err := AttachFentry(prog)
	if err != nil {
		return fmt.Errorf("attaching a fentry program on %s fails: %v", fn, err)
	}
	l.Close()
	return nil
}

const uprobePMUDir = "/sys/bus/event_source/devices/uprobe"

// probeUprobe opens a uprobe (or uretprobe) perf event, disabled, on the
// first byte of a file of its own that no process maps (so no
// instruction is ever replaced), and closes it.
func probeUprobe(ret bool) error {
	what := "uprobes"
	if ret {
		what = "uretprobes"
	}
	typ, bit, err := dynamicPMU(uprobePMUDir, "uprobes", "CONFIG_UPROBE_EVENTS", ret)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp("", "gprobes-uprobe-*")
	if err != nil {
		return fmt.Errorf("%s: a file to try one on: %v", what, err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(make([]byte, 4096))
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: a file to try one on: %v", what, err)
	}
	path, err := unix.BytePtrFromString(f.Name())
	if err != nil {
		return err
	}
	attr := unix.PerfEventAttr{
		Type:        typ,
		Size:        unix.PERF_ATTR_SIZE_VER1,
		Ext1:        uint64(uintptr(unsafe.Pointer(path))), // config1: the file
		Ext2:        0,                                     // config2: the offset
		Sample_type: unix.PERF_SAMPLE_RAW,
		Sample:      1,
		Bits:        unix.PerfBitDisabled,
	}
	if ret {
		attr.Config = 1 << bit
	}
	fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	runtime.KeepAlive(path)
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return fmt.Errorf("%s: perf_event_open refuses a uprobe (%s): run as root, or with CAP_PERFMON", what, errnoName(err))
		}
		return fmt.Errorf("%s: perf_event_open of a uprobe fails: %v", what, err)
	}
	unix.Close(fd)
	return nil
}

// watchProbeWord is the user address probeWatches puts a breakpoint on.
var watchProbeWord uint64

// openBreakpoint opens a write breakpoint on the 8 bytes at addr,
// disabled (the kernel checks it and reserves a debug register, never
// arms it), for pid on cpu as perf_event_open takes them, and closes it.
func openBreakpoint(addr uint64, pid, cpu int) error {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_BREAKPOINT,
		Size:   unix.PERF_ATTR_SIZE_VER1,
		Sample: 1,
		Bits:   unix.PerfBitDisabled,
		Ext1:   addr, // bp_addr
		Ext2:   8,    // bp_len
	}
	attr.Bp_type = hwBreakpointW
	fd, err := unix.PerfEventOpen(&attr, pid, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return err
	}
	unix.Close(fd)
	return nil
}

// kernelWatchAddr is a kernel address to try a breakpoint on: the first
// kernel address /proc/kallsyms shows in its first 4 KiB (not all of
// it: reading it all is slow under emulation; per-CPU symbols at small
// offsets may come first), or where x86-64's kernel image starts without
// KASLR. perf checks the address's half of the address space, not what
// is there.
func kernelWatchAddr() uint64 {
	const base = 0xffffffff81000000
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return base
	}
	defer f.Close()
	b := make([]byte, 4096)
	n, _ := io.ReadFull(f, b)
	lines := strings.Split(string(b[:n]), "\n")
	for _, l := range lines[:max(len(lines)-1, 0)] { // the last may be cut
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		if a, err := strconv.ParseUint(f[0], 16, 64); err == nil && a >= kernelHalf {
			return a &^ 7
		}
	}
	return base
}

// kernelHalf is where x86-64's kernel half of the address space starts.
const kernelHalf = 0xffff800000000000

// probeWatches finds out whether perf gives this process hardware
// breakpoints on kernel addresses (CPU-wide, as AttachWatch asks for
// them) and on user addresses (on this thread, as ptrace's are). When the
// kernel address is refused, a user address is tried the same way, CPU
// wide, so that the refusal names its cause: the address, or perf's
// permissions.
func probeWatches() (kernel, user error) {
	uaddr := uint64(uintptr(unsafe.Pointer(&watchProbeWord)))
	if err := openBreakpoint(uaddr, 0, -1); err != nil {
		user = breakpointRefusal("user", uaddr, err)
	}
	cpus, err := onlineCPUs()
	if err != nil || len(cpus) == 0 {
		return fmt.Errorf("hardware breakpoints on kernel addresses: the online CPUs: %v", err), user
	}
	kaddr := kernelWatchAddr()
	var kerr error
	for _, cpu := range cpus {
		if kerr = openBreakpoint(kaddr, -1, cpu); !errors.Is(kerr, unix.ENOSPC) {
			break
		}
	}
	switch {
	case kerr == nil:
		return nil, user
	case errors.Is(kerr, unix.ENOSPC):
		return fmt.Errorf("hardware breakpoints on kernel addresses: cannot tell: %w on any CPU now (ENOSPC)", ErrNoDebugRegister), user
	case errors.Is(kerr, unix.EPERM), errors.Is(kerr, unix.EACCES):
		name := errnoName(kerr)
		if uerr := openBreakpoint(uaddr, -1, cpus[0]); uerr != nil {
			return fmt.Errorf("perf_event_open refuses CPU-wide hardware breakpoints on kernel and user addresses alike (%s for %#x, %s for a user address): run as root, or with CAP_PERFMON and CAP_SYS_ADMIN (kernel.perf_event_paranoid is %s)",
				name, kaddr, errnoName(uerr), sysctl("kernel/perf_event_paranoid")), user
		}
		if !hasCap(capSysAdmin) {
			return fmt.Errorf("hardware breakpoints on kernel addresses need CAP_SYS_ADMIN, which gprobes lacks (perf_event_open: %s for %#x, while a user address is accepted)", name, kaddr), user
		}
		why := "gprobes has CAP_SYS_ADMIN, so it is the kernel's policy, not a missing permission"
		if l := Lockdown(); l != "" && l != "none" {
			why += "; lockdown: " + l
		}
		return fmt.Errorf("this kernel refuses hardware breakpoints on kernel addresses (perf_event_open: %s for %#x, while a user address is accepted): %s", name, kaddr, why), user
	}
	return breakpointRefusal("kernel", kaddr, kerr), user
}

// breakpointRefusal says why perf refused a breakpoint on a kernel or
// user address, for errors other than a policy's.
func breakpointRefusal(half string, addr uint64, err error) error {
	what := "hardware breakpoints on " + half + " addresses"
	switch {
	case errors.Is(err, unix.ENOSPC):
		return fmt.Errorf("%s: cannot tell: %w (ENOSPC)", what, ErrNoDebugRegister)
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENODEV):
		return fmt.Errorf("%s: this kernel or CPU has none (perf_event_open: %s for %#x: CONFIG_HAVE_HW_BREAKPOINT, or a hypervisor without debug registers)", what, errnoName(err), addr)
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("%s: perf_event_open refuses them (%s for %#x; kernel.perf_event_paranoid is %s)", what, errnoName(err), addr, sysctl("kernel/perf_event_paranoid"))
	}
	return fmt.Errorf("%s: perf_event_open: %s for %#x (%v)", what, errnoName(err), addr, err)
}

func errnoName(err error) string {
	var e unix.Errno
	if errors.As(err, &e) {
		if n := unix.ErrnoName(e); n != "" {
			return n
		}
	}
	return err.Error()
}

// sysctl is /proc/sys/NAME's value, or "unknown".
func sysctl(name string) string {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// Linux capability numbers (linux/capability.h).
const (
	capSysAdmin = 21
	capSyslog   = 34
	capPerfmon  = 38
	capBPF      = 39
)

// effectiveCaps is this process's effective capability set (CapEff of
// /proc/self/status).
func effectiveCaps() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			c, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return c
		}
	}
	return 0
}

func hasCap(c uint) bool { return effectiveCaps()&(1<<c) != 0 }

// Lockdown is the kernel's lockdown mode ("none", "integrity",
// "confidentiality") as securityfs shows it, or "" when it does not
// (securityfs not mounted, or no lockdown LSM).
func Lockdown() string {
	b, err := os.ReadFile("/sys/kernel/security/lockdown")
	if err != nil {
		return ""
	}
	// "none [integrity] confidentiality"
	s := string(b)
	i, j := strings.IndexByte(s, '['), strings.IndexByte(s, ']')
	if i < 0 || j < i {
		return ""
	}
	return s[i+1 : j]
}

// Detect is the host's ability matrix, for `gprobes doctor`: Available's
// base, Probe's mechanisms and what /proc/kallsyms shows (read whole:
// the kernel target does that once at its start, Probe does not).
func Detect() Report {
	var r Report
	r.OS = "linux"
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		r.Kernel = unix.ByteSliceToString(u.Release[:])
		r.Machine = unix.ByteSliceToString(u.Machine[:])
	}
	r.UID = os.Geteuid()
	caps := effectiveCaps()
	for _, c := range []struct {
		n    uint
		name string
	}{{capBPF, "CAP_BPF"}, {capPerfmon, "CAP_PERFMON"}, {capSysAdmin, "CAP_SYS_ADMIN"}, {capSyslog, "CAP_SYSLOG"}} {
		if caps&(1<<c.n) != 0 {
			r.Capabilities = append(r.Capabilities, c.name)
		}
	}
	r.Lockdown = Lockdown()
	for _, s := range []struct {
		name string
		v    **int
	}{{"kernel/perf_event_paranoid", &r.PerfEventParanoid}, {"kernel/kptr_restrict", &r.KptrRestrict}} {
		if n, err := strconv.Atoi(sysctl(s.name)); err == nil {
			*s.v = &n
		}
	}
	r.Abilities = append(r.Abilities, ability("ebpf", "every kernel probe (the BPF syscall, maps and helpers the kernel target needs)", Available()))
	r.Abilities = append(r.Abilities, Probe().List()...)
	b, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		e := fmt.Errorf("/proc/kallsyms: %v", err)
		r.Abilities = append(r.Abilities, Kallsyms{Addrs: e, DataSyms: e}.List()...)
	} else {
		r.Abilities = append(r.Abilities, ScanKallsyms(b).List()...)
	}
	return r
}
