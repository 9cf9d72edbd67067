//go:build linux

package bpf_test

import (
	"errors"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/bpf"
	dpdfc "github.com/gprobes/gprobes/compiler" // bpf has a type compiler
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/rpn"
)

// A module of three probes: a tracepoint (sys_enter_getppid) and a raw
// tracepoint (sys_enter, every system call of the thread) counting into
// lv 0 and lv 1, and one that writes memory, refused with its line while
// the others go in.
func TestModule(t *testing.T) {
	needBPF(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	src := "name = vmlinux\nmodtype = kernel\nvars = 2\n" +
		"offset = 0x1000\ninc lv,0\nexit 0\n" +
		"offset = 0x2000\ninc lv,1\nexit 0\n" +
		"offset = 0x3000\npush d,0\npush d,1\npop mrf\nexit 1\n"
	f, err := dpdf.ParseSource("module.dpdf", []byte(src), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatal(err)
	}
	p, err := dpdfc.CompileProgram(f, rpn.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := bpf.LoadModule(p, bpf.ModuleOptions{
		Kind: func(pi int) bpf.Kind {
			if pi == 1 {
				return bpf.KindRawTracepoint
			}
			return bpf.KindTracepoint
		},
		PID: uint32(os.Getpid()), TID: uint32(unix.Gettid()),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var u *bpf.Unsupported
	if m.Errs[0] != nil || m.Errs[1] != nil || !errors.As(m.Errs[2], &u) || u.Where != "module.dpdf:13:1" {
		t.Fatalf("errors %v", m.Errs)
	}
	t.Logf("probe 2: %v", m.Errs[2])
	l0, err := bpf.AttachTracepoint(m.Progs[0], "syscalls", "sys_enter_getppid")
	if err != nil {
		t.Fatal(err)
	}
	defer l0.Close()
	l1, err := bpf.AttachRawTracepoint(m.Progs[1], "sys_enter")
	if err != nil {
		t.Fatal(err)
	}
	defer l1.Close()
	const n = 10000
	getppid(n)
	l0.Close()
	l1.Close()
	lv, err := m.Maps.Vars(false)
	if err != nil {
		t.Fatal(err)
	}
	// the raw tracepoint sees every system call of the thread: the
	// getppids, the close of l0, and whatever the runtime made meanwhile
	// (a preemption signal's rt_sigreturn)
	if lv[0] != n || lv[1] < n || lv[1] > n+n/10 {
		t.Fatalf("lv %v: want %d getppid and about as many system calls", lv, n)
	}
	for pi := 0; pi < 2; pi++ {
		if cn, err := m.Counters(pi); err != nil || cn.Runs != lv[pi] || cn.Missed != 0 {
			t.Errorf("probe %d: counters %+v (%v), lv %d", pi, cn, err, lv[pi])
		}
	}
	t.Logf("lv 0 = %d getppid, lv 1 = %d system calls", lv[0], lv[1])
}
