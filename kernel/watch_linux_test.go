package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/probe"
)

// TestWatch: watch probes on --target kernel, on fields of this
// process's task_struct named by "task" (the process the probes follow,
// found at insert by walking the kernel's list of processes) plus BTF's
// offsetof. First a tracepoint probe tells the test where this process's
// leader is without that walk: current->group_leader, read at a hit.
//
// Whether this kernel gives breakpoints on its addresses is bpf.Probe's
// answer, checked here against a perf_event_open of the test's own on
// the watched address: they must agree. Where they are refused (this
// development machine's 6.18, as root), every watch probe is refused
// with that reason, exactly, after its address was resolved (the query
// shows it: the leader's comm); a user address is refused naming that.
// Where they are given, a module watches comm's first byte (written
// once by each write of /proc/self/comm, which renames the leader) and
// three more words of the task (four debug registers in all); a fifth
// watch is refused naming the registers, a user address naming that;
// the counts are exactly the writes, each record the byte written (read
// by the program through current->group_leader, not the watched
// address), by this thread, in order.
func TestWatch(t *testing.T) {
	k, r := start(t, Options{PID: os.Getpid()})
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	defer os.WriteFile("/proc/self/comm", orig, 0)
	if _, err := k.Insert(compile(t, `name = vmlinux
modtype = kernel
tracepoint = syscalls:sys_enter_getppid
push task
push d,offsetof(struct task_struct, group_leader)
add
push mrf
push d,offsetof(struct task_struct, comm)
log 2
exit 1
`), probe.InsertNew); err != nil {
		t.Fatal(err)
	}
	getppid(1)
	k.Remove("vmlinux", nil)
	if len(r.all) != 1 || len(r.all[0].Data) != 16 {
		t.Fatalf("records %+v", r.all)
	}
	leader, off := binary.LittleEndian.Uint64(r.all[0].Data), binary.LittleEndian.Uint64(r.all[0].Data[8:])
	comm := leader + off
	r.all = nil
	t.Logf("this process's task_struct %#x, comm at +%d", leader, off)

	// the kernel's answer, asked by the test itself, on the address
	mech := bpf.Probe().KernelWatch
	raw := rawBreakpoint(comm)
	t.Logf("bpf.Probe: %v; perf_event_open of a breakpoint on %#x: %v", mech, comm, raw)
	if (mech == nil) != (raw == nil) || raw != nil && !errors.Is(raw, unix.EPERM) && !errors.Is(raw, unix.EACCES) {
		t.Fatalf("bpf.Probe says %v; perf_event_open on %#x: %v", mech, comm, raw)
	}

	m := compile(t, `name = vmlinux
modtype = kernel
vars = 4
watch = task + offsetof(struct task_struct, comm),1,w
minor = 1
inc lv,0
push task
push d,offsetof(struct task_struct, group_leader)
add
push mrf
push d,offsetof(struct task_struct, comm)
add
push mrf,1
push tid
log 2
exit 1
watch = task + offsetof(struct task_struct, comm) + 8,8,rw
minor = 2
inc lv,1
exit 0
watch = task,8,w
minor = 3
exit 0
watch = task+8,8,w
minor = 4
exit 0
watch = task+16,8,w
minor = 5
exit 0
watch = 0x1000,8,w
minor = 6
exit 0
`)
	infos, err := k.Insert(m, probe.InsertNew)
	if err != nil {
		t.Fatal(err)
	}
	addrs := map[uint16]uint64{1: comm, 2: comm + 8, 3: leader, 4: leader + 8, 5: leader + 16, 6: 0x1000}
	for _, p := range infos {
		if p.Address != addrs[p.Minor] {
			t.Errorf("minor %d at %#x, want %#x", p.Minor, p.Address, addrs[p.Minor])
		}
		switch {
		case p.Minor == 6:
			if p.State != probe.StateRefused || !strings.Contains(p.Reason, "not a kernel address") {
				t.Errorf("minor 6, a user address: %s %q; want refused, not a kernel address", p.State, p.Reason)
			}
		case mech != nil:
			want := fmt.Sprintf("watch = %s (%#x): %v; gprobes has no other way to watch the kernel's memory", p.Location, p.Address, mech)
			if p.State != probe.StateRefused || p.Reason != want {
				t.Errorf("minor %d: %s %q;\nwant refused %q", p.Minor, p.State, p.Reason, want)
			}
		case p.Minor <= 4 && (p.State != probe.StateActive || p.How != "watch"):
			t.Errorf("minor %d: %s %q, how %q; want active, watch", p.Minor, p.State, p.Reason, p.How)
		case p.Minor == 5 && (p.State != probe.StateRefused || !strings.Contains(p.Reason, "no debug register free")):
			t.Errorf("minor 5, a fifth watch: %s %q; want refused, no debug register free", p.State, p.Reason)
		}
	}
	if mech != nil {
		t.Logf("refused here: %s", infos[0].Reason)
		return
	}
	const n = 300
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("%ckw%05d", 'a'+i%26, i)
		if err := os.WriteFile("/proc/self/comm", []byte(names[i]), 0); err != nil {
			t.Fatal(err)
		}
	}
	lv, _, err := k.Vars("vmlinux", false)
	if err != nil || lv[0] != n {
		t.Errorf("lv %v %v: want %d writes of the first byte", lv, err, n)
	}
	q := k.Query()
	for _, p := range q {
		if p.Minor == 1 && (p.Hits != n || p.Faults != 0) {
			t.Errorf("query minor 1: %+v, want %d hits", p, n)
		}
	}
	if _, err := k.Remove("vmlinux", nil); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.all) != n {
		t.Fatalf("%d records, want %d", len(r.all), n)
	}
	for i, rec := range r.all {
		if rec.Minor != 1 || len(rec.Data) != 16 || rec.Data[0] != names[i][0] || binary.LittleEndian.Uint64(rec.Data[8:]) != uint64(unix.Gettid()) || rec.Address != comm {
			t.Fatalf("record %d: %+v; want %q's first byte, the thread, address %#x", i, rec, names[i], comm)
		}
	}
}

// TestWatchTask: "task" in a watch probe's address is the task_struct
// of the process the probes follow, found by walking the kernel's list
// of processes: here a cat started by the test, whose task a tracepoint
// probe logs at its write (push task: the kernel's current, not the
// walk). The watch's address, shown by the query whether the probe went
// in or was refused (this kernel's policy, as TestWatch checks), is that
// task's comm. A process that has exited is refused naming it, after a
// walk of the whole list; a target following every process refuses
// "task".
func TestWatchTask(t *testing.T) {
	cat := exec.Command("cat")
	in, err := cat.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cat.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.Start(); err != nil {
		t.Fatal(err)
	}
	defer cat.Wait()
	defer in.Close()
	k, r := start(t, Options{PID: cat.Process.Pid})
	infos, err := k.Insert(compile(t, `name = vmlinux
modtype = kernel
tracepoint = syscalls:sys_enter_write
minor = 1
push task
log 1
exit 1
watch = task + offsetof(struct task_struct, comm),1,w
minor = 2
exit 0
`), probe.InsertNew)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Write([]byte("x\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(out, make([]byte, 2)); err != nil {
		t.Fatal(err)
	}
	k.Remove("vmlinux", nil)
	if len(r.all) != 1 || len(r.all[0].Data) != 8 {
		t.Fatalf("records %+v, want cat's one write", r.all)
	}
	task := binary.LittleEndian.Uint64(r.all[0].Data)
	off, err := k.syms.set.Offsetof("struct task_struct", "comm")
	if err != nil {
		t.Fatal(err)
	}
	w := infos[1]
	t.Logf("cat %d: task %#x; the watch: %#x %s %s", cat.Process.Pid, task, w.Address, w.State, w.Reason)
	if w.Address != task+off || w.State == probe.StateRefused && !strings.Contains(w.Reason, "hardware breakpoints") {
		t.Errorf("the watch at %#x (%s: %s), want %#x (task %#x + %d)", w.Address, w.State, w.Reason, task+off, task, off)
	}

	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	k2, _ := start(t, Options{PID: gone.Process.Pid})
	infos, err = k2.Insert(compile(t, "name = vmlinux\nmodtype = kernel\nwatch = task,8,w\nexit 0\n"), probe.InsertNew)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(fmt.Sprintf(`^watch = task: task, process %d's task_struct: no process %d in the kernel's list of (\d+) processes \(it has exited\?\)$`, gone.Process.Pid, gone.Process.Pid))
	m := re.FindStringSubmatch(infos[0].Reason)
	if infos[0].State != probe.StateRefused || m == nil {
		t.Errorf("an exited process: %s %q", infos[0].State, infos[0].Reason)
	} else {
		procs, _ := filepath.Glob("/proc/[0-9]*")
		t.Logf("walked %s processes; /proc lists %d", m[1], len(procs))
	}

	k3, _ := start(t, Options{})
	infos, err = k3.Insert(compile(t, "name = vmlinux\nmodtype = kernel\nwatch = task+8,8,w\nexit 0\n"), probe.InsertNew)
	if err != nil {
		t.Fatal(err)
	}
	if want := "watch = task+8: task is the task_struct of the process the probes follow (run --target kernel -- CMD), and these follow every process"; infos[0].State != probe.StateRefused || infos[0].Reason != want {
		t.Errorf("every process: %s %q, want refused %q", infos[0].State, infos[0].Reason, want)
	}
}

// TestWatchSymbols: a kernel variable by name. Without --symbols,
// jiffies_64 is kallsyms' where kallsyms lists variables, else refused
// naming what kallsyms lacks and what to give (the test reads kallsyms
// itself to know which). With --symbols (a System.map, here one written
// by the test: _stext and a variable 0x1000 past it, in the text), a name
// kallsyms lacks is the map's address slid by _stext's.
func TestWatchSymbols(t *testing.T) {
	kall, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	find := func(name string) uint64 {
		for _, l := range strings.Split(string(kall), "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[2] == name {
				a, _ := strconv.ParseUint(f[0], 16, 64)
				return a
			}
		}
		return 0
	}
	k, _ := start(t, Options{})
	infos, err := k.Insert(compile(t, "name = vmlinux\nmodtype = kernel\nwatch = jiffies_64,8,w\nexit 0\n"), probe.InsertNew)
	if err != nil {
		t.Fatal(err)
	}
	k.Remove("vmlinux", nil)
	p := infos[0]
	if a := find("jiffies_64"); a != 0 {
		if p.Address != a || k.syms.facts.DataSyms != nil {
			t.Errorf("jiffies_64 at %#x in kallsyms: the probe at %#x (%s %s); kallsyms' data: %v", a, p.Address, p.State, p.Reason, k.syms.facts.DataSyms)
		}
	} else {
		why := k.syms.facts.DataSyms
		if why == nil || p.State != probe.StateRefused || !strings.HasPrefix(p.Reason, `watch = jiffies_64: symbol "jiffies_64" not found in /proc/kallsyms`) ||
			!strings.HasSuffix(p.Reason, ": "+why.Error()+"; the kernel's BTF has its types, not its variables' addresses: give --symbols with this kernel's System.map or vmlinux (gprobes slides their addresses by _stext's)") {
			t.Errorf("no jiffies_64 in kallsyms (%v): %s %q", why, p.State, p.Reason)
		}
		t.Logf("%s", p.Reason)
	}

	stext := find("_stext")
	if stext == 0 {
		t.Fatal("no _stext in kallsyms")
	}
	sysmap := filepath.Join(t.TempDir(), "System.map")
	if err := os.WriteFile(sysmap, []byte("ffffffff81000000 T _stext\nffffffff81001000 D gp_test_variable\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k2, _ := start(t, Options{Symbols: []string{sysmap}})
	infos, err = k2.Insert(compile(t, "name = vmlinux\nmodtype = kernel\nwatch = gp_test_variable,8,w\nexit 0\n"), probe.InsertNew)
	if err != nil {
		t.Fatal(err)
	}
	k2.Remove("vmlinux", nil)
	if p := infos[0]; p.Address != stext+0x1000 || p.State == probe.StateRefused && !strings.Contains(p.Reason, "hardware breakpoints") {
		t.Errorf("gp_test_variable: %#x %s %q, want %#x (kallsyms' _stext %#x + 0x1000)", p.Address, p.State, p.Reason, stext+0x1000, stext)
	}
}

// rawBreakpoint is the kernel's answer to a hardware breakpoint on 8
// bytes at addr on CPU 0, asked without gprobes' code: made disabled, and
// closed at once.
func rawBreakpoint(addr uint64) error {
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_BREAKPOINT, Size: unix.PERF_ATTR_SIZE_VER1, Sample: 1, Bits: unix.PerfBitDisabled, Ext1: addr &^ 7, Ext2: 8}
	attr.Bp_type = 2 // HW_BREAKPOINT_W
	fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err == nil {
		unix.Close(fd)
	}
	return err
}
