//go:build linux

package bpf_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/rpn"
)

// A watch probe on the kernel's memory: a hardware breakpoint on the
// first byte of this thread's task_struct comm (its address from a
// probe's push task, the offset from the kernel's BTF), written by
// prctl(PR_SET_NAME) n times with names whose first bytes differ (6.18
// copies the name a byte at a time: a watch on 8 bytes sees 8 writes a
// call). The program runs after each write: exactly n records, in order,
// each with the byte just written (push mrf), the writing thread and an
// rip in the kernel. Then five watches on one CPU's four debug registers: the fifth
// is refused, naming them.
//
// Whether this kernel gives breakpoints on its addresses is bpf.Probe's
// answer, checked against a perf_event_open of the test's own on the
// address: they must agree. Where it refuses them (this development
// machine's 6.18, as root), AttachWatch's error is exactly bpf.Probe's
// reason, which must name the cause as the kernel shows it (a user
// address accepted the same way, or not).
func TestWatch(t *testing.T) {
	needBPF(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, tid := uint32(os.Getpid()), uint32(unix.Gettid())
	defer setName("bpf.test")

	// this thread's task_struct
	p := compileSrc(t, "push task\nlog 1\nexit 1")
	prog, m, _ := load(t, p, bpf.Options{PID: pid, TID: tid})
	rd, err := bpf.NewReader(m)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	detach := attachGetppid(t, prog)
	getppid(1)
	detach()
	rd.SetDeadline(time.Now().Add(2 * time.Second))
	r, err := rd.Read()
	if err != nil {
		t.Fatal(err)
	}
	task := binary.LittleEndian.Uint64(r.Log)
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		t.Fatal(err)
	}
	var ts *btf.Struct
	if err := spec.TypeByName("task_struct", &ts); err != nil {
		t.Fatal(err)
	}
	off := uint64(0)
	for _, mb := range ts.Members {
		if mb.Name == "comm" {
			off = uint64(mb.Offset.Bytes())
		}
	}
	if off == 0 || off%8 != 0 {
		t.Fatalf("task_struct.comm at %d: want a multiple of 8", off)
	}
	addr := task + off
	t.Logf("task %#x, comm at +%d", task, off)

	w := compileSrc(t, fmt.Sprintf("push d,%#x\npush mrf,1\npush tid\npush r,rip\nlog 3\nexit 1", addr))
	wprog, wm, _ := load(t, w, bpf.Options{Kind: bpf.KindWatch})
	wr, err := bpf.NewReader(wm)
	if err != nil {
		t.Fatal(err)
	}
	defer wr.Close()
	const n = 500
	var names []string
	// the kernel's answer, asked by the test itself, on the address
	mech := bpf.Probe().KernelWatch
	raw := rawBreakpoint(-1, 0, addr)
	t.Logf("bpf.Probe: %v; perf_event_open of a breakpoint on %#x: %v", mech, addr, raw)
	if (mech == nil) != (raw == nil) || raw != nil && !errors.Is(raw, unix.EPERM) && !errors.Is(raw, unix.EACCES) {
		t.Fatalf("bpf.Probe says %v; perf_event_open on %#x: %v", mech, addr, raw)
	}
	l, err := bpf.AttachWatch(wprog, addr, 1, rpn.WatchWrite)
	if mech != nil {
		// refused naming the kernel's policy, on the first online CPU
		b, _ := os.ReadFile("/sys/devices/system/cpu/online")
		first, _, _ := strings.Cut(strings.TrimSpace(string(b)), "-")
		first, _, _ = strings.Cut(first, ",")
		want := fmt.Sprintf("watch %#x,1 on CPU %s: %v", addr, first, mech)
		if err == nil || err.Error() != want {
			t.Fatalf("AttachWatch: %v\nwant %s", err, want)
		}
		// the cause named as the kernel shows it: a user address the
		// same way is accepted, or refused too
		var word uint64
		uerr := rawBreakpoint(-1, 0, uint64(uintptr(unsafe.Pointer(&word))))
		if uerr == nil && !strings.Contains(mech.Error(), "while a user address is accepted") ||
			uerr != nil && !strings.Contains(mech.Error(), "on kernel and user addresses alike") {
			t.Fatalf("a user address, CPU-wide: %v; bpf.Probe: %v", uerr, mech)
		}
		t.Logf("refused: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	names = make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("%cw%06d", 'a'+i%26, i) // byte 0 differs from the last name's
		if err := setName(names[i]); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	for i := range n {
		wr.SetDeadline(time.Now().Add(2 * time.Second))
		r, err := wr.Read()
		if err != nil {
			t.Fatalf("record %d of %d: %v", i, n, err)
		}
		if len(r.Log) != 24 || r.Log[0] != names[i][0] || binary.LittleEndian.Uint64(r.Log[8:]) != uint64(tid) ||
			binary.LittleEndian.Uint64(r.Log[16:]) < 0xffff800000000000 {
			t.Fatalf("record %d: %x; want %q's first byte, tid %d, a kernel rip", i, r.Log, names[i], tid)
		}
	}
	if wr.Available() != 0 {
		t.Fatalf("%d bytes of records more than the %d writes", wr.Available(), n)
	}

	// four debug registers a CPU: the fifth watch is refused
	var ls []interface{ Close() error }
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := range 5 {
		l, err := bpf.AttachWatch(wprog, addr+8*uint64(i%2), 8, rpn.WatchWrite)
		if i < 4 {
			if err != nil {
				t.Fatalf("watch %d: %v", i, err)
			}
			ls = append(ls, l)
			continue
		}
		if err == nil {
			l.Close()
			t.Fatal("a fifth watch went in")
		}
		if !errors.Is(err, bpf.ErrNoDebugRegister) {
			t.Fatalf("the fifth watch: %v, want ErrNoDebugRegister", err)
		}
		t.Logf("the fifth: %v", err)
	}
}

// setName is prctl(PR_SET_NAME, s): the thread's comm.
func setName(s string) error {
	b, _ := unix.BytePtrFromString(s)
	err := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(b)), 0, 0, 0)
	runtime.KeepAlive(b)
	return err
}

// rawBreakpoint is the kernel's answer to a hardware breakpoint on 8
// bytes at addr for pid on cpu, asked without gprobes' code: made
// disabled, and closed at once.
func rawBreakpoint(pid, cpu int, addr uint64) error {
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_BREAKPOINT, Size: unix.PERF_ATTR_SIZE_VER1, Sample: 1, Bits: unix.PerfBitDisabled, Ext1: addr &^ 7, Ext2: 8}
	attr.Bp_type = 2 // HW_BREAKPOINT_W
	fd, err := unix.PerfEventOpen(&attr, pid, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err == nil {
		unix.Close(fd)
	}
	return err
}
