//go:build linux

package bpf_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/bpf"
)

// The kernel's own answers, asked without gprobes' code (bpf.Probe's):
// a test of an ability decides by bpf.Probe and checks it against
// these, so that a detector that always says "refused" (or always
// "present") fails.

// rawPMU opens a kprobe or uprobe perf event (config1 the symbol or the
// path, config2 the offset) through the PMU in /sys/bus/event_source,
// disabled, and closes it: nil, or the kernel's errno (os.ErrNotExist
// without the PMU).
func rawPMU(pmu, target string, off uint64, ret bool) error {
	dir := "/sys/bus/event_source/devices/" + pmu
	b, err := os.ReadFile(filepath.Join(dir, "type"))
	if err != nil {
		return err
	}
	typ, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		return err
	}
	attr := unix.PerfEventAttr{Type: uint32(typ), Size: unix.PERF_ATTR_SIZE_VER1, Sample_type: unix.PERF_SAMPLE_RAW, Sample: 1, Bits: unix.PerfBitDisabled}
	if ret {
		b, err := os.ReadFile(filepath.Join(dir, "format", "retprobe"))
		if err != nil {
			return err
		}
		var bit uint
		if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "config:%d", &bit); err != nil {
			return err
		}
		attr.Config = 1 << bit
	}
	p, _ := unix.BytePtrFromString(target)
	attr.Ext1, attr.Ext2 = uint64(uintptr(unsafe.Pointer(p))), off
	fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	runtime.KeepAlive(p)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

// rawFentry loads a trivial fentry program on fn with cilium/ebpf.
func rawFentry(fn string) error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: ebpf.AttachTraceFEntry, AttachTo: fn, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err == nil {
		prog.Close()
	}
	return err
}

// agree fails the test unless the ability's detection and the kernel's
// own answer agree: both nil, or both not.
func agree(t *testing.T, name string, detected, kernel error) {
	t.Helper()
	if (detected == nil) != (kernel == nil) {
		t.Errorf("%s: bpf.Probe says %v; the kernel, asked by the test: %v", name, detected, kernel)
	} else {
		t.Logf("%s: %v (the kernel: %v)", name, detected, kernel)
	}
}

// TestAbilities: every mechanism bpf.Probe finds (or refuses) is checked
// against the kernel's own answer to the test: a kprobe and a kretprobe
// perf event on vfs_read, a uprobe and a uretprobe on a file of the
// test's, a fentry program loaded, the kernel's BTF, breakpoints on a
// kernel and a user address. The refusals name their cause; what
// kallsyms shows agrees with a look for the variables every kernel has
// (jiffies_64, init_task).
func TestAbilities(t *testing.T) {
	needBPF(t)
	m := bpf.Probe()
	kp := rawPMU("kprobe", "vfs_read", 0, false)
	agree(t, "kprobe", m.Kprobe, kp)
	agree(t, "kretprobe", m.Kretprobe, rawPMU("kprobe", "vfs_read", 0, true))
	if errors.Is(kp, os.ErrNotExist) && (m.Kprobe == nil || !strings.Contains(m.Kprobe.Error(), "CONFIG_KPROBES")) {
		t.Errorf("no kprobe PMU; bpf.Probe: %v", m.Kprobe)
	}
	f := filepath.Join(t.TempDir(), "uprobed")
	if err := os.WriteFile(f, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	agree(t, "uprobe", m.Uprobe, rawPMU("uprobe", f, 0, false))
	agree(t, "uretprobe", m.Uretprobe, rawPMU("uprobe", f, 0, true))
	fe := rawFentry("vfs_read")
	agree(t, "fentry", m.Fentry, fe)
	if errors.Is(fe, unix.EPERM) && (m.Fentry == nil || !strings.Contains(m.Fentry.Error(), "EPERM")) {
		t.Errorf("fentry refused with EPERM; bpf.Probe: %v", m.Fentry)
	}
	_, btfErr := os.Stat("/sys/kernel/btf/vmlinux")
	agree(t, "btf", m.BTF, btfErr)

	var word uint64
	user := uint64(uintptr(unsafe.Pointer(&word)))
	agree(t, "user_watch", m.UserWatch, rawBreakpoint(0, -1, user))
	kernel := uint64(0xffffffff81000000)
	kw := rawBreakpoint(-1, 0, kernel)
	agree(t, "kernel_watch", m.KernelWatch, kw)
	if errors.Is(kw, unix.EPERM) {
		uw := rawBreakpoint(-1, 0, user)
		want := "this kernel refuses hardware breakpoints on kernel addresses (perf_event_open: EPERM for 0x"
		switch {
		case uw != nil:
			want = "perf_event_open refuses CPU-wide hardware breakpoints on kernel and user addresses alike"
		case unix.Geteuid() != 0:
			want = "hardware breakpoints on kernel addresses need CAP_SYS_ADMIN"
		}
		if m.KernelWatch == nil || !strings.HasPrefix(m.KernelWatch.Error(), want) {
			t.Errorf("kernel_watch: %v; want %q... (a user address, the same way: %v)", m.KernelWatch, want, uw)
		}
	}

	b, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	k := bpf.ScanKallsyms(b)
	vars := strings.Contains(string(b), " jiffies_64\n") && strings.Contains(string(b), " init_task\n")
	agree(t, "kallsyms_data", k.DataSyms, map[bool]error{true: nil, false: errors.New("no jiffies_64 or init_task in /proc/kallsyms")}[vars])
	// _stext's address (the first lines may be per-CPU symbols at 0)
	var addrsShown error
	if i := strings.Index(string(b), " T _stext\n"); i < 16 || strings.Trim(string(b[i-16:i]), "0") == "" {
		addrsShown = errors.New("_stext's address is 0")
	}
	agree(t, "kallsyms_addresses", k.Addrs, addrsShown)
	t.Logf("kallsyms: %d symbols, %d data", k.Symbols, k.Data)

	r := bpf.Detect()
	if r.Kernel == "" || len(r.Abilities) != 1+len(m.List())+2 || r.Abilities[0].Name != "ebpf" || !r.Abilities[0].OK {
		t.Errorf("Detect: %+v", r)
	}
	for _, a := range r.Abilities {
		if a.OK != (a.Why == "") || a.For == "" {
			t.Errorf("%+v", a)
		}
	}
}

// TestScanKallsyms: the counts (the kernel image's lines) and the two
// refusals, on kallsyms text.
func TestScanKallsyms(t *testing.T) {
	all := "ffffffff81000000 T _stext\nffffffff82400000 D __start_rodata\nffffffffc0000000 t f\t[mod]\n"
	k := bpf.ScanKallsyms([]byte(all))
	// the module's line is not the kernel image's
	if k.Symbols != 2 || k.Data != 1 || k.Addrs != nil || k.DataSyms == nil ||
		k.DataSyms.Error() != "/proc/kallsyms lists 1 data symbols of 2, section bounds (__start_rodata...), not the kernel's variables: a kernel built without CONFIG_KALLSYMS_ALL" {
		t.Errorf("%+v", k)
	}
	var b strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&b, "%016x d v%d\n", uint64(0xffffffff82000000)+uint64(8*i), i)
	}
	if k := bpf.ScanKallsyms([]byte(b.String())); k.Data != 1000 || k.DataSyms != nil || k.Addrs != nil {
		t.Errorf("1000 variables: %+v", k)
	}
	if k := bpf.ScanKallsyms([]byte("0000000000000000 T _stext\n0000000000000000 D x\n")); k.Addrs == nil || !strings.Contains(k.Addrs.Error(), "every address as 0") {
		t.Errorf("hidden addresses: %+v", k)
	}
	if k := bpf.ScanKallsyms(nil); k.Addrs == nil || k.DataSyms == nil {
		t.Errorf("empty: %+v", k)
	}
}
