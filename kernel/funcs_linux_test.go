package kernel

import (
	"encoding/binary"
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

	"github.com/gprobes/gprobes/probe"
)

// rawKprobe asks the kernel, without gprobes' code, for a kprobe (or a
// kretprobe) perf event on fn through the kprobe PMU, made disabled and
// closed at once: nil, or why not (no PMU, the kernel's errno).
func rawKprobe(fn string, ret bool) error {
	const dir = "/sys/bus/event_source/devices/kprobe"
	b, err := os.ReadFile(filepath.Join(dir, "type"))
	if err != nil {
		return err
	}
	typ, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	attr := unix.PerfEventAttr{Type: uint32(typ), Size: unix.PERF_ATTR_SIZE_VER1, Sample_type: unix.PERF_SAMPLE_RAW, Sample: 1, Bits: unix.PerfBitDisabled}
	if ret {
		b, err := os.ReadFile(filepath.Join(dir, "format", "retprobe"))
		if err != nil {
			return err
		}
		var bit uint
		fmt.Sscanf(strings.TrimSpace(string(b)), "config:%d", &bit)
		attr.Config = 1 << bit
	}
	p, _ := unix.BytePtrFromString(fn)
	attr.Ext1 = uint64(uintptr(unsafe.Pointer(p)))
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

// TestFunctionProbes: an entry probe (fentry where it can), an entry
// probe reading rsp (a kprobe: fentry has no rsp) and a return probe on
// do_sys_openat2, filtered to this process. The kernel target decides by
// bpf.Probe's answers, which the test checks against the kernel's own (a
// kprobe and a kretprobe perf event, a fentry load, asked without
// gprobes' code). Where the kernel has them, each counts exactly this
// thread's openat calls of a file that does not exist (the name, and
// -ENOENT); where it has not (this development machine's 6.18: no
// kprobes, fentry refused), each probe is refused naming exactly what is
// missing, the module's tracepoint probe going in.
func TestFunctionProbes(t *testing.T) {
	k, r := start(t, Options{PID: os.Getpid()})
	mech := k.mech
	const fn = "do_sys_openat2"
	for _, c := range []struct {
		name      string
		got, want error
	}{{"kprobe", mech.Kprobe, rawKprobe(fn, false)}, {"kretprobe", mech.Kretprobe, rawKprobe(fn, true)}, {"fentry", mech.Fentry, rawFentry(fn)}} {
		if (c.got == nil) != (c.want == nil) {
			t.Fatalf("%s: bpf.Probe says %v; the kernel, asked by the test: %v", c.name, c.got, c.want)
		}
		t.Logf("%s: %v (the kernel: %v)", c.name, c.got, c.want)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	infos, err := k.Insert(compile(t, `name = vmlinux
modtype = kernel
offset = do_sys_openat2
minor = 1
push d,200
push r,rsi
log str
exit 1
offset = do_sys_openat2
minor = 2
push r,rsp
log 1
exit 1
retprobe = do_sys_openat2
minor = 3
push r,rax
log 1
exit 1
tracepoint = syscalls:sys_enter_getppid
minor = 4
exit 0
`), probe.InsertNew)
	if err != nil {
		t.Fatal(err)
	}
	entry := fmt.Sprintf("%s+0x0: %v", fn, mech.Kprobe)
	if mech.Fentry != nil {
		entry += fmt.Sprintf("; and fentry: %v", mech.Fentry)
	}
	for _, p := range infos {
		var want string // the refusal, "" for active
		how := map[uint16]string{1: "fentry", 2: "kprobe", 3: "kretprobe", 4: "tracepoint"}[p.Minor]
		switch p.Minor {
		case 1:
			if mech.Fentry != nil {
				how = "kprobe"
				if mech.Kprobe != nil {
					want = entry
				}
			}
		case 2:
			if mech.Kprobe != nil {
				want = entry
			}
		case 3:
			if mech.Kretprobe != nil {
				want = fmt.Sprintf("retprobe: %v", mech.Kretprobe)
			}
		}
		if want != "" && (p.State != probe.StateRefused || p.Reason != want) {
			t.Errorf("minor %d: %s %q;\nwant refused %q", p.Minor, p.State, p.Reason, want)
		}
		if want == "" && (p.State != probe.StateActive || p.How != how) {
			t.Errorf("minor %d: %s %q, how %q; want active, %s", p.Minor, p.State, p.Reason, p.How, how)
		}
	}
	const name = "/nonexistent/gprobes-kernel-test"
	const n = 1000
	for range n {
		unix.Openat(unix.AT_FDCWD, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	k.Remove("vmlinux", nil)
	count := map[uint16]int{}
	for _, rec := range r.all {
		switch {
		case rec.Minor == 1 && string(rec.Data) == name:
			count[1]++
		case rec.Minor == 2 && len(rec.Data) == 8 && binary.LittleEndian.Uint64(rec.Data) >= 0xffff800000000000:
			count[2]++
		case rec.Minor == 3 && len(rec.Data) == 8 && int64(binary.LittleEndian.Uint64(rec.Data)) == -int64(unix.ENOENT):
			count[3]++
		}
	}
	for _, p := range infos[:3] {
		want := n
		if p.State != probe.StateActive {
			want = 0
		}
		// minor 2 counts every openat of the process (a kernel stack
		// address each), the others this thread's of the name
		if got := count[p.Minor]; got != want && !(p.Minor == 2 && want > 0 && got >= want) {
			t.Errorf("minor %d (%s): %d records, want %d", p.Minor, p.State, got, want)
		}
	}
	t.Logf("records by minor: %v", count)
}
