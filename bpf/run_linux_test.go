//go:build linux

package bpf_test

import (
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/bpf"
)

// getppid calls getppid n times on the calling thread.
func getppid(n int) {
	for i := 0; i < n; i++ {
		unix.Getppid()
	}
}

// The counting probe on syscalls:sys_enter_getppid, restricted to this
// process by the program's own filter: lv 0 is exactly the calls made.
func TestCountGetppid(t *testing.T) {
	needBPF(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p := compileSrc(t, "vars = 1\ninc lv,0\nexit 0")
	prog, m, _ := load(t, p, bpf.Options{PID: uint32(os.Getpid()), TID: uint32(unix.Gettid())})
	l, err := bpf.AttachTracepoint(prog, "syscalls", "sys_enter_getppid")
	if err != nil {
		t.Fatal(err)
	}
	const n = 12345
	getppid(n)
	l.Close()
	lv, err := m.Vars(false)
	if err != nil {
		t.Fatal(err)
	}
	cn, err := m.ProbeCounters(0)
	if err != nil {
		t.Fatal(err)
	}
	if lv[0] != n || cn.Runs != n || cn.Hits != n {
		t.Fatalf("lv 0 = %d, counters %+v: want %d", lv[0], cn, n)
	}
	_ = time.Second
}
