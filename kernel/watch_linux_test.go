package kernel

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/engine"
)

// TestWatch: watch probes on --target kernel. The address: this thread's
// task_struct comm (push task, and offsetof from the kernel's BTF, in a
// first module); a second module watches its first byte (written once by
// each prctl(PR_SET_NAME): 6.18 copies a name a byte at a time) and three
// more words of the task (four debug registers in all); a fifth watch is
// refused naming the registers, and a user-space address naming that; the
// counts are exactly the calls, each record the byte written, in order.
func TestWatch(t *testing.T) {
	k, r := start(t, Options{PID: os.Getpid()})
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer setComm("kernel.test")
	if _, err := k.Insert(compile(t, `name = vmlinux
modtype = kernel
tracepoint = syscalls:sys_enter_getppid
push task
push d,offsetof(struct task_struct, comm)
log 2
exit 1
`), engine.InsertNew); err != nil {
		t.Fatal(err)
	}
	getppid(1)
	k.Remove("vmlinux", nil)
	if len(r.all) != 1 || len(r.all[0].Data) != 16 {
		t.Fatalf("records %+v", r.all)
	}
	task, off := binary.LittleEndian.Uint64(r.all[0].Data), binary.LittleEndian.Uint64(r.all[0].Data[8:])
	comm := task + off
	r.all = nil
	m := compile(t, fmt.Sprintf(`name = vmlinux
modtype = kernel
vars = 4
watch = %#[1]x,1,w
minor = 1
inc lv,0
push d,%#[1]x
push mrf,1
push tid
log 2
exit 1
watch = %#[2]x,8,rw
minor = 2
inc lv,1
exit 0
watch = %#[3]x,8,w
minor = 3
exit 0
watch = %#[4]x,8,w
minor = 4
exit 0
watch = %#[5]x,8,w
minor = 5
exit 0
watch = 0x1000,8,w
minor = 6
exit 0
`, comm, comm+8, task, task+8, task+16))
	infos, err := k.Insert(m, engine.InsertNew)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range infos {
		switch {
		case p.Minor <= 4 && (p.State != engine.StateActive || p.How != "watch"):
			t.Errorf("minor %d: %s %q, how %q; want active, watch", p.Minor, p.State, p.Reason, p.How)
		case p.Minor == 5 && (p.State != engine.StateRefused || !strings.Contains(p.Reason, "no debug register free")):
			t.Errorf("minor 5, a fifth watch: %s %q; want refused, no debug register free", p.State, p.Reason)
		case p.Minor == 6 && (p.State != engine.StateRefused || !strings.Contains(p.Reason, "not a kernel address")):
			t.Errorf("minor 6, a user address: %s %q; want refused, not a kernel address", p.State, p.Reason)
		}
	}
	const n = 300
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("%ckw%05d", 'a'+i%26, i)
		if err := setComm(names[i]); err != nil {
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

func setComm(s string) error {
	b, _ := unix.BytePtrFromString(s)
	err := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(b)), 0, 0, 0)
	runtime.KeepAlive(b)
	return err
}
