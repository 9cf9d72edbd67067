//go:build linux

package bpf_test

import (
	"bufio"
	"errors"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/internal/testkit"
)

// Function probes: fentry, kprobe, kretprobe. This host's kernel (6.18)
// has none of them attachable (no CONFIG_KPROBES; BPF_PROG_LOAD refuses
// fentry programs with EPERM): there the tests check that the programs
// compile (and load, for the kprobe program type) and that attaching is
// refused naming what is missing, as bpf.Probe says, bpf.Probe's answer
// being checked against the kernel's own to a perf_event_open or a load
// of the test's. On a kernel with them (the QEMU lab's Debian 6.1), they
// attach to do_sys_openat2 and count exactly.

func TestMechanisms(t *testing.T) {
	needBPF(t)
	start := time.Now()
	m := bpf.Probe()
	t.Logf("probed in %v:\n%s", time.Since(start), m)
	if m.Tracepoint != nil || m.RawTracepoint != nil || m.Ringbuf != nil || m.Loop != nil {
		t.Errorf("the kernel target's base is missing:\n%s", m)
	}
	if m.Kretprobe == nil && m.Kprobe != nil {
		t.Errorf("kretprobes without kprobes:\n%s", m)
	}
	if _, err := os.Stat("/sys/bus/event_source/devices/kprobe"); err != nil && m.Kprobe == nil {
		t.Errorf("kprobes without the kprobe PMU:\n%s", m)
	}
	if again := bpf.Probe(); again != m {
		t.Errorf("a second Probe differs: %v", again)
	}
	for k := bpf.KindTracepoint; k <= bpf.KindKretprobe; k++ {
		t.Logf("%v: %v", k, m.ForKind(k))
	}
}

// kallsyms returns the address of a kernel text symbol.
func kallsyms(t testing.TB, name string) uint64 {
	t.Helper()
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 3 && fs[2] == name && (fs[1] == "t" || fs[1] == "T") {
			a, _ := strconv.ParseUint(fs[0], 16, 64)
			if a == 0 {
				testkit.SkipOrFail(t, "kallsyms hides addresses (kernel.kptr_restrict)")
			}
			return a
		}
	}
	testkit.SkipOrFail(t, "no %s in kallsyms", name)
	return 0
}

const openName = "/nonexistent/gprobes-kfunc-test"

// openats makes n openat calls of openName on this thread.
func openats(n int) {
	for i := 0; i < n; i++ {
		unix.Openat(unix.AT_FDCWD, openName, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
}

// checkOpenRecords reads n records logging rdi (dfd), rip, and the file
// name (log str of rsi). rip is one of rips.
func checkOpenRecords(t *testing.T, m *bpf.Maps, rd *bpf.Reader, n int, rips ...uint64) {
	t.Helper()
	for i := 0; i < n; i++ {
		rd.SetDeadline(time.Now().Add(2 * time.Second))
		r, err := rd.Read()
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		w := words(r.Log[:16])
		// dfd is an int: the register's upper half is not the argument's
		if uint32(w[0]) != 0xffffff9c || !slices.Contains(rips, w[1]) || string(r.Log[16:]) != openName {
			t.Fatalf("record %d: dfd %#x rip %#x %q, want -100 %#x %q", i, w[0], w[1], r.Log[16:], rips, openName)
		}
	}
	lv, _ := m.Vars(false)
	if lv[0] != uint64(n) {
		t.Fatalf("lv 0 = %d, want %d", lv[0], n)
	}
}

const openProbe = "vars = 1\ninc lv,0\npush r,rdi\npush r,rip\nlog 2\npush d,200\npush r,rsi\nlog str\nexit 1"

// fentry at do_sys_openat2(int dfd, const char __user *filename, struct
// open_how *how): rdi, rsi from the context, rip the function's address.
// This kernel refusing fentry, the test checks that the load is refused
// so (EPERM) and Probe says it.
func TestFentry(t *testing.T) {
	needBPF(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const fn = "do_sys_openat2"
	nargs, err := bpf.FuncArgs(fn)
	if err != nil {
		if _, serr := os.Stat("/sys/kernel/btf/vmlinux"); serr != nil {
			testkit.SkipOrFail(t, "%v", err)
		}
		t.Fatalf("FuncArgs(%s), the kernel's BTF there: %v", fn, err)
	}
	if nargs != 3 {
		t.Fatalf("FuncArgs(%s) = %d, want 3", fn, nargs)
	}
	addr := kallsyms(t, fn)
	p := compileProbe(t, "offset = "+fn+"\n"+openProbe)
	m, err := bpf.NewMaps(p.Module(), bpf.MapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c, err := bpf.CompileProbe(p, 0, bpf.Options{Maps: m, Kind: bpf.KindFentry, AttachTo: fn, NumArgs: nargs, Addr: addr, PID: uint32(os.Getpid()), TID: uint32(unix.Gettid())})
	if err != nil {
		t.Fatal(err)
	}
	mech := bpf.Probe().Fentry
	prog, err := c.Load()
	if raw := rawFentry(fn); (raw == nil) != (mech == nil) {
		t.Fatalf("Probe says %v; the kernel, asked by the test: %v", mech, raw)
	}
	if mech != nil {
		if err == nil || !errors.Is(err, unix.EPERM) {
			t.Fatalf("Probe says %q; the load: %v", mech, err)
		}
		t.Logf("this kernel: %v; the load: %v", mech, err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	rd, err := bpf.NewReader(m)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	l, err := bpf.AttachFentry(prog)
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	openats(n)
	l.Close()
	checkOpenRecords(t, m, rd, n, addr)
}

// The fentry program as a BTF raw tracepoint (tp_btf, the same program
// type and context) on sys_enter(struct pt_regs *regs, long id), which
// this kernel loads and attaches: rsi is the system call's number, rdi
// the pt_regs pointer, whose orig_ax (offset 120) push mrf reads with
// bpf_probe_read_kernel; rip is Options.Addr; push u and push ts work
// in a tracing program; straight and loop mode.
func TestFentryContext(t *testing.T) {
	needBPF(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p := compileProbe(t, "offset = 0x1000\nvars = 1\ninc lv,0\npush r,rsi\npush r,rdi\npush r,rip\npush r,esi\nlog 4\n"+
		"push r,rdi\npush d,120\nadd\npush mrf\npush u,rdi\npush ts\njz bad\npop\nlog 2\nexit 1\nbad: exit 0")
	for _, loop := range []bool{false, true} {
		m, err := bpf.NewMaps(p.Module(), bpf.MapOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		o := bpf.WithTPBTF(bpf.Options{Maps: m, Kind: bpf.KindFentry, NumArgs: 2, Addr: 0xffffffff81234567, Loop: loop, PID: uint32(os.Getpid()), TID: uint32(unix.Gettid())}, "sys_enter")
		c, err := bpf.CompileProbe(p, 0, o)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := c.Load()
		if err != nil {
			t.Fatalf("load (loop mode %v): %v", loop, err)
		}
		defer prog.Close()
		rd, err := bpf.NewReader(m)
		if err != nil {
			t.Fatal(err)
		}
		defer rd.Close()
		l, err := link.AttachTracing(link.TracingOptions{Program: prog, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			t.Fatal(err)
		}
		const n = 500
		getppid(n)
		l.Close()
		lv, _ := m.Vars(false)
		if lv[0] < n || lv[0] > n+n/10 {
			t.Fatalf("lv 0 = %d, want about %d (every system call of the thread)", lv[0], n)
		}
		seen := 0
		for i := uint64(0); i < lv[0]; i++ {
			rd.SetDeadline(time.Now().Add(2 * time.Second))
			r, err := rd.Read()
			if err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
			w := words(r.Log)
			if len(w) != 6 || w[2] != 0xffffffff81234567 || w[1] < 0xffff800000000000 || w[3] != w[0] || w[4] != w[0] {
				t.Fatalf("record %d: %#x: want nr, regs, rip, esi = nr, orig_ax = nr, user rdi", i, w)
			}
			if w[0] == unix.SYS_GETPPID {
				seen++
			}
		}
		if seen != n {
			t.Fatalf("%d getppid records, want %d", seen, n)
		}
		t.Logf("loop mode %v: %d records, %d of getppid", c.Loop, lv[0], seen)
	}
}

// What fentry cannot do and a kprobe can (ErrNeedsKprobe), and what
// nothing can.
func TestFentryRefused(t *testing.T) {
	for _, c := range []struct {
		src    string
		kprobe bool
	}{
		{"push r,rdx\nexit 0", true},
		{"push r,rax\nexit 0", true},
		{"push r,r9\nexit 0", true},
		{"push r,rsp\nexit 0", true},
		{"push d,0\npush d,1\npop mrf\nexit 0", false},
	} {
		p := compileProbe(t, "offset = 0x1000\n"+c.src)
		_, err := bpf.CompileProbe(p, 0, bpf.Options{Kind: bpf.KindFentry, AttachTo: "f", NumArgs: 2, Addr: 1})
		var u *bpf.Unsupported
		if !errors.As(err, &u) || errors.Is(err, bpf.ErrNeedsKprobe) != c.kprobe {
			t.Errorf("%q: %v; want a kprobe to be able to: %v", c.src, err, c.kprobe)
		}
		t.Logf("%v", err)
		if c.kprobe {
			if _, err := bpf.CompileProbe(p, 0, bpf.Options{Kind: bpf.KindKprobe}); err != nil {
				t.Errorf("%q as a kprobe: %v", c.src, err)
			}
		}
	}
	p := compileProbe(t, "offset = 0x1000\npush r,rip\nexit 0")
	if _, err := bpf.CompileProbe(p, 0, bpf.Options{Kind: bpf.KindFentry, AttachTo: "f"}); !errors.Is(err, bpf.ErrNeedsKprobe) {
		t.Errorf("rip without Options.Addr: %v", err)
	}
	if _, err := bpf.CompileProbe(p, 0, bpf.Options{Kind: bpf.KindFentry}); err == nil {
		t.Errorf("fentry without AttachTo compiled")
	}
}

// A kretprobe's program (the kprobe program type, which this kernel
// loads): rax the return value, rip the return address. Attached where
// the kernel has kretprobes (openat's -ENOENT, counted exactly), else
// refused naming what is missing.
func TestKretprobe(t *testing.T) {
	needBPF(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// first: Probe opens files and kprobes, which the probe would see
	mech := bpf.Probe().Kretprobe
	if raw := rawPMU("kprobe", "do_sys_openat2", 0, true); (raw == nil) != (mech == nil) {
		t.Fatalf("Probe says %v; the kernel, asked by the test: %v", mech, raw)
	}
	p := compileProbe(t, "retprobe = do_sys_openat2\nvars = 1\ninc lv,0\npush r,rax\npush r,rip\npush r,rsp\nlog 3\nexit 1")
	for _, loop := range []bool{false, true} {
		prog, m, _ := load(t, p, bpf.Options{Kind: bpf.KindKretprobe, Loop: loop, PID: uint32(os.Getpid()), TID: uint32(unix.Gettid())})
		for _, maxactive := range []int{0, 1000} {
			// the reader first: making one may open files (cilium/ebpf's
			// first look at the system), which the probe would see
			rd, err := bpf.NewReader(m)
			if err != nil {
				t.Fatal(err)
			}
			before, _ := m.Vars(false)
			l, err := bpf.AttachKretprobe(prog, "do_sys_openat2", maxactive)
			if mech != nil {
				rd.Close()
				if err == nil || err.Error() != mech.Error() {
					t.Fatalf("Probe says %q; AttachKretprobe: %v", mech, err)
				}
				t.Logf("loaded (loop mode %v); this kernel: %v", loop, err)
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			const n = 1000
			openats(n)
			l.Close()
			for i := 0; i < n; i++ {
				rd.SetDeadline(time.Now().Add(2 * time.Second))
				r, err := rd.Read()
				if err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
				w := words(r.Log)
				if w[0] != uint64(0xfffffffffffffffe) || w[1] < 0xffff800000000000 || w[2] < 0xffff800000000000 {
					t.Fatalf("record %d: rax %#x rip %#x rsp %#x: want -ENOENT and kernel addresses", i, w[0], w[1], w[2])
				}
			}
			rd.Close()
			lv, _ := m.Vars(false)
			if lv[0]-before[0] != n {
				t.Fatalf("maxactive %d: %d returns counted, want %d", maxactive, lv[0]-before[0], n)
			}
		}
	}
}

// RemoveStaleKprobeEvents removes a gprobes_* kprobe event nobody uses
// (what a gprobes killed with SIGKILL leaves) and leaves others.
func TestRemoveStaleKprobeEvents(t *testing.T) {
	needBPF(t)
	if err := bpf.Probe().Kretprobe; err != nil {
		t.Skip(err)
	}
	const events = "/sys/kernel/tracing/kprobe_events"
	add := func(def string) {
		f, err := os.OpenFile(events, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Skip(err)
		}
		defer f.Close()
		if _, err := f.WriteString(def + "\n"); err != nil {
			t.Fatalf("%s: %v", def, err)
		}
	}
	add("r100:gprobes_stale/gp_test do_sys_openat2")
	add("r100:gprobes_other_test/gp_keep vfs_read")
	// an event in use stays: a perf event open on gprobes_other_test's
	id, err := os.ReadFile("/sys/kernel/tracing/events/gprobes_other_test/gp_keep/id")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := strconv.ParseUint(strings.TrimSpace(string(id)), 10, 64)
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_TRACEPOINT, Size: unix.PERF_ATTR_SIZE_VER1, Config: cfg, Sample_type: unix.PERF_SAMPLE_RAW, Sample: 1, Wakeup: 1}
	fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	n, err := bpf.RemoveStaleKprobeEvents()
	b, _ := os.ReadFile(events)
	unix.Close(fd)
	if err != nil || n != 1 || strings.Contains(string(b), "gprobes_stale") || !strings.Contains(string(b), "gprobes_other_test/gp_keep") {
		t.Fatalf("removed %d (%v); left:\n%s", n, err, b)
	}
	if n, err := bpf.RemoveStaleKprobeEvents(); err != nil || n != 1 {
		t.Fatalf("the second, unused now: removed %d (%v)", n, err)
	}
}

// A kprobe at do_sys_openat2+0 (rip is the probed address), and the
// kernel's refusals: a non-boundary, an unknown symbol, a blacklisted
// function. Where the kernel has no kprobes, the refusal naming that.
func TestKprobe(t *testing.T) {
	needBPF(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const fn = "do_sys_openat2"
	mech := bpf.Probe().Kprobe // first: it opens files and kprobes
	if raw := rawPMU("kprobe", fn, 0, false); (raw == nil) != (mech == nil) {
		t.Fatalf("Probe says %v; the kernel, asked by the test: %v", mech, raw)
	}
	p := compileProbe(t, "offset = "+fn+"\n"+openProbe)
	prog, m, _ := load(t, p, bpf.Options{Kind: bpf.KindKprobe, PID: uint32(os.Getpid()), TID: uint32(unix.Gettid())})
	rd, err := bpf.NewReader(m)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	l, err := bpf.AttachKprobe(prog, fn, 0)
	if mech != nil {
		if err == nil || err.Error() != mech.Error() {
			t.Fatalf("Probe says %q; AttachKprobe: %v", mech, err)
		}
		t.Logf("this kernel: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	openats(n)
	l.Close()
	// a kernel with IBT moves a kprobe at a function's entry past its
	// endbr64 (arch_adjust_kprobe_addr): rip is then the function + 4
	addr := kallsyms(t, fn)
	checkOpenRecords(t, m, rd, n, addr, addr+4)

	for _, c := range []struct {
		sym  string
		off  uint64
		want error
	}{
		{fn, 1, bpf.ErrNotBoundary},
		{"gprobes_no_such_function", 0, bpf.ErrUnknownSymbol},
		{"kprobe_int3_handler", 0, bpf.ErrCannotProbe},
	} {
		l, err := bpf.AttachKprobe(prog, c.sym, c.off)
		if err == nil {
			l.Close()
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s+%d: %v, want %v", c.sym, c.off, err, c.want)
		}
		t.Logf("%s+%d: %v", c.sym, c.off, err)
	}
}
