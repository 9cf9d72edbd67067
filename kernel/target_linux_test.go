//go:build linux

package kernel

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
)

func compile(t testing.TB, src string) *rpn.Module {
	t.Helper()
	f, err := dpdf.ParseSource("test.dpdf", []byte(src), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	m, err := compiler.Compile(f, rpn.CompileOptions{})
	if err != nil {
		var b strings.Builder
		dpdf.PrintError(&b, err, false)
		t.Fatalf("%s\n%s", b.String(), src)
	}
	return m
}

type recs struct {
	mu  sync.Mutex
	all []probe.Record
}

func (r *recs) Commit(rec *probe.Record) {
	r.mu.Lock()
	r.all = append(r.all, *rec)
	r.mu.Unlock()
}

func start(t *testing.T, o Options) (*Target, *recs) {
	t.Helper()
	if err := bpf.Available(); err != nil {
		testkit.SkipOrFail(t, "%v", err)
	}
	r := &recs{}
	o.Sink = r
	o.Warn = func(msg string) { t.Log("warn:", msg) }
	k, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return k, r
}

func getppid(n int) {
	for i := 0; i < n; i++ {
		syscall.Getppid()
	}
}

// TestTracepointCounts: a counting probe on a syscall's tracepoint,
// filtered to this process, counts exactly its calls; getvars, query,
// --reset, remove.
func TestTracepointCounts(t *testing.T) {
	k, _ := start(t, Options{PID: os.Getpid()})
	m := compile(t, `name = vmlinux
modtype = kernel
vars = 2
tracepoint = syscalls:sys_enter_getppid
minor = 7
inc lv,0
exit 0
`)
	infos, err := k.Insert(m, probe.InsertNew)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].State != probe.StateActive || infos[0].How != "tracepoint" {
		t.Fatalf("insert: %+v", infos)
	}
	getppid(12345)
	lv, _, err := k.Vars("vmlinux", true)
	if err != nil || lv[0] != 12345 {
		t.Fatalf("lv %v %v, want lv0 12345", lv, err)
	}
	q := k.Query()
	if len(q) != 1 || q[0].Hits != 12345 || q[0].Faults != 0 || q[0].Minor != 7 {
		t.Fatalf("query: %+v", q)
	}
	getppid(10)
	if lv, _, _ := k.Vars("vmlinux", false); lv[0] != 10 {
		t.Fatalf("after --reset and 10 calls: lv %v", lv)
	}
	if n := ownLinks(t); n != 1 {
		t.Fatalf("%d eBPF links held with one probe in", n)
	}
	if n, err := k.Remove("vmlinux", nil); n != 1 || err != nil {
		t.Fatalf("remove: %d %v", n, err)
	}
	if len(k.Modules()) != 0 {
		t.Fatalf("modules after remove: %v", k.Modules())
	}
	// the link is gone from this process's files (other tests and
	// packages may hold gp_ programs meanwhile: count our own only)
	if n := ownLinks(t); n != 0 {
		t.Fatalf("%d eBPF links still held after remove", n)
	}
}

// ownLinks counts the eBPF links among this process's files.
func ownLinks(t *testing.T) int {
	fds, err := os.ReadDir("/proc/self/fdinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		b, err := os.ReadFile("/proc/self/fdinfo/" + fd.Name())
		if err == nil && strings.Contains(string(b), "link_id:") {
			n++
		}
	}
	return n
}

// TestTracepointFields: push field of integers and of a user string
// (openat's filename through log str), exact values.
func TestTracepointFields(t *testing.T) {
	k, r := start(t, Options{PID: os.Getpid()})
	m := compile(t, `name = vmlinux
modtype = kernel
tracepoint = syscalls:sys_enter_openat
push field,__syscall_nr
push field,flags
log 2
push d,64
push field,filename
log str
exit
`)
	infos, err := k.Insert(m, probe.InsertNew)
	if err != nil || infos[0].State != probe.StateActive {
		t.Fatalf("insert: %+v %v", infos, err)
	}
	path := t.TempDir() + "/gprobes-field-test"
	for i := 0; i < 3; i++ {
		fd, err := syscall.Open(path, syscall.O_CREAT|syscall.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		syscall.Close(fd)
	}
	k.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.all {
		if len(rec.Data) < 16 || !strings.HasPrefix(string(rec.Data[16:]), path) {
			continue
		}
		n++
		nr := binary.LittleEndian.Uint64(rec.Data)
		flags := binary.LittleEndian.Uint64(rec.Data[8:])
		if nr != syscall.SYS_OPENAT || flags&(syscall.O_CREAT|syscall.O_WRONLY) != syscall.O_CREAT|syscall.O_WRONLY {
			t.Errorf("record: nr %d flags %#x", nr, flags)
		}
		if rec.Pid != os.Getpid() || rec.Location != "syscalls:sys_enter_openat" {
			t.Errorf("record: %+v", rec)
		}
	}
	if n != 3 {
		t.Fatalf("%d records of %s, want 3 (of %d)", n, path, len(r.all))
	}
}

// TestExceptionRecord: a bad address read is an exception record with the
// DPDF line, counted as a fault; the program's other runs go on.
func TestExceptionRecord(t *testing.T) {
	k, r := start(t, Options{PID: os.Getpid()})
	m := compile(t, `name = vmlinux
modtype = kernel
tracepoint = syscalls:sys_enter_getppid
push d,8
push mrf,8
log 1
exit
`)
	if _, err := k.Insert(m, probe.InsertNew); err != nil {
		t.Fatal(err)
	}
	getppid(5)
	q := k.Query()
	k.Close()
	if q[0].Hits != 5 || q[0].Faults != 5 {
		t.Fatalf("query: %+v", q[0])
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.all) != 5 {
		t.Fatalf("%d records, want 5", len(r.all))
	}
	for _, rec := range r.all {
		if rec.Kind != "exception" || rec.Exception != rpn.ExInvalidAddress.String() || rec.Line != "test.dpdf:5:1" || rec.Address != 8 {
			t.Fatalf("record: %+v", rec)
		}
	}
}

// TestRefusals: what cannot go in is refused with its reason, the other
// probes of the module go in.
func TestRefusals(t *testing.T) {
	k, _ := start(t, Options{PID: os.Getpid()})
	m := compile(t, `name = vmlinux
modtype = kernel
tracepoint = syscalls:sys_enter_getppid
minor = 1
exit 0
tracepoint = syscalls:no_such_event
minor = 2
exit 0
tracepoint = syscalls:sys_enter_getppid
minor = 3
push field,no_such_field
exit 0
tracepoint = syscalls:sys_enter_getppid
minor = 4
exit 3
`)
	infos, err := k.Insert(m, probe.InsertNew)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint16]string{2: "no_such_event", 3: "no_such_field", 4: "exit 3"}
	for _, p := range infos {
		if w, ok := want[p.Minor]; ok {
			if p.State != probe.StateRefused || !strings.Contains(p.Reason, w) {
				t.Errorf("minor %d: %s %q, want refused naming %q", p.Minor, p.State, p.Reason, w)
			}
		} else if p.State != probe.StateActive {
			t.Errorf("minor %d: %s %q, want active", p.Minor, p.State, p.Reason)
		}
	}
	if _, err := k.Insert(compile(t, "name = no_such_module\nmodtype = kernel\ntracepoint = a:b\nexit 0\n"), probe.InsertNew); err == nil || !strings.Contains(err.Error(), "no kernel module no_such_module") {
		t.Errorf("unknown module: %v", err)
	}
	if _, err := k.Insert(compile(t, "name = /bin/true\nmodtype = user\noffset = 0x1000\nexit 0\n"), probe.InsertNew); err == nil || !strings.Contains(err.Error(), "modtype = kernel") {
		t.Errorf("user module: %v", err)
	}
}

// TestBTFLayout: offsetof from the running kernel's BTF (no debug
// package), push task and a kernel memory read: the current task's tgid
// and pid as the kernel keeps them are this process's.
func TestBTFLayout(t *testing.T) {
	k, r := start(t, Options{PID: os.Getpid()})
	m := compile(t, `name = vmlinux
modtype = kernel
tracepoint = syscalls:sys_enter_getppid
push task
push d,offsetof(struct task_struct, tgid)
add
push mrf,4
push task
push d,offsetof(struct task_struct, pid)
add
push mrf,4
push tid
log 3
exit
`)
	if infos, err := k.Insert(m, probe.InsertNew); err != nil || infos[0].State != probe.StateActive {
		t.Fatalf("insert: %+v %v", infos, err)
	}
	getppid(3)
	k.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.all) != 3 {
		t.Fatalf("%d records, want 3", len(r.all))
	}
	for _, rec := range r.all {
		if len(rec.Data) != 24 {
			t.Fatalf("record: %+v", rec)
		}
		tgid := binary.LittleEndian.Uint64(rec.Data)
		pid := binary.LittleEndian.Uint64(rec.Data[8:])
		tid := binary.LittleEndian.Uint64(rec.Data[16:])
		if int(tgid) != os.Getpid() || pid != tid || int(tid) != rec.Tid {
			t.Errorf("task's tgid %d pid %d, push tid %d, record tid %d; this process %d", tgid, pid, tid, rec.Tid, os.Getpid())
		}
	}
}

// TestUserRegisters: push u reads the task's user-mode registers saved at
// its entry into the kernel: at getppid's entry, rip is just past the
// syscall instruction of Go's runtime, orig rax the call's number.
func TestUserRegisters(t *testing.T) {
	k, r := start(t, Options{PID: os.Getpid()})
	m := compile(t, `name = vmlinux
modtype = kernel
tracepoint = syscalls:sys_enter_getppid
push u,rip
push u,rsp
log 2
exit
`)
	if infos, err := k.Insert(m, probe.InsertNew); err != nil || infos[0].State != probe.StateActive {
		t.Fatalf("insert: %+v %v", infos, err)
	}
	getppid(2)
	k.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.all) != 2 {
		t.Fatalf("%d records, want 2", len(r.all))
	}
	for _, rec := range r.all {
		rip := binary.LittleEndian.Uint64(rec.Data)
		rsp := binary.LittleEndian.Uint64(rec.Data[8:])
		fn := runtime.FuncForPC(uintptr(rip - 1))
		if fn == nil || !strings.Contains(fn.Name(), "yscall") {
			t.Errorf("user rip %#x is in %v, not Go's system call", rip, fn)
		}
		// a stack of this process (the goroutine's or the thread's
		// system stack): in a writable mapping
		if !writableMapping(t, rsp) {
			t.Errorf("user rsp %#x is in no writable mapping of this process", rsp)
		}
	}
}

// writableMapping reports whether addr is in a writable mapping of this
// process.
func writableMapping(t *testing.T, addr uint64) bool {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		var lo, hi uint64
		var perms string
		if n, _ := fmt.Sscanf(l, "%x-%x %s", &lo, &hi, &perms); n == 3 && lo <= addr && addr < hi && strings.Contains(perms, "w") {
			return true
		}
	}
	return false
}
