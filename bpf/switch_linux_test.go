//go:build linux

package bpf_test

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/bpf"
	dpdfc "github.com/gprobes/gprobes/compiler" // bpf has a type compiler
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/rpn"
)

// Switching in the kernel: B (sys_enter_getppid, minor 2) counts only
// between A (sys_enter_getpid: enable 2) and C (sys_enter_gettid:
// disable 2); while it is off it counts nothing at all (no hit, no skip);
// SetSwitch switches it from outside, a second module given the same
// switch map (a --merge'd source) switches the first's B.
func TestSwitch(t *testing.T) {
	needBPF(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	compile := func(src string) *rpn.Program {
		f, err := dpdf.ParseSource("switch.dpdf", []byte(src), dpdf.Options{NoPreprocessor: true})
		if err != nil {
			t.Fatal(err)
		}
		p, err := dpdfc.CompileProgram(f, rpn.CompileOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := compile("name = vmlinux\nmodtype = kernel\nvars = 1\n" +
		"tracepoint = syscalls:sys_enter_getpid\nminor = 1\nenable 2\nexit 0\n" +
		"tracepoint = syscalls:sys_enter_getppid\nminor = 2\nenabled = no\ninc lv,0\nexit 0\n" +
		"tracepoint = syscalls:sys_enter_gettid\nminor = 3\ndisable 2\nexit 0\n")
	sw, err := bpf.NewSwitch()
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	if err := bpf.SetSwitch(sw, 2, false); err != nil { // enabled = no, as the kernel target does
		t.Fatal(err)
	}
	m, err := bpf.LoadModule(p, bpf.ModuleOptions{MapOptions: bpf.MapOptions{Switch: sw}, PID: uint32(os.Getpid()), TID: uint32(unix.Gettid())})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for i, ev := range []string{"sys_enter_getpid", "sys_enter_getppid", "sys_enter_gettid"} {
		if m.Errs[i] != nil {
			t.Fatalf("probe %d: %v", i, m.Errs[i])
		}
		l, err := bpf.AttachTracepoint(m.Progs[i], "syscalls", ev)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
	}
	round := func(k, m int) {
		getppid(3) // off
		unix.Getpid()
		getppid(k)
		unix.Gettid()
		getppid(m)
	}
	for i := 0; i < 10; i++ {
		round(5, 7)
	}
	lv, _ := m.Maps.Vars(false)
	c, _ := m.Counters(1)
	if lv[0] != 50 || c.Hits != 50 || c.Runs != 50 || c.Skipped != 0 {
		t.Errorf("between A and C: lv 0 = %d, counters %+v; want 50", lv[0], c)
	}
	if off, err := bpf.SwitchedOff(sw, 2); err != nil || !off {
		t.Errorf("minor 2 after C: off %v (%v)", off, err)
	}
	// from outside: on, 9 counted; off, none
	bpf.SetSwitch(sw, 2, true)
	getppid(9)
	bpf.SetSwitch(sw, 2, false)
	getppid(9)
	lv, _ = m.Maps.Vars(false)
	if lv[0] != 59 {
		t.Errorf("switched from outside: lv 0 = %d, want 59", lv[0])
	}
	// another source of the module, on the same switch map: its
	// sys_enter_getpid enables minor 2 of the first
	p2 := compile("name = vmlinux\nmodtype = kernel\n" +
		"tracepoint = syscalls:sys_enter_getpgid\nminor = 2\nexit 0\n" +
		"tracepoint = syscalls:sys_enter_getpgid\nminor = 5\nenable 2\nexit 0\n")
	m2, err := bpf.LoadModule(p2, bpf.ModuleOptions{MapOptions: bpf.MapOptions{Switch: sw}, PID: uint32(os.Getpid()), TID: uint32(unix.Gettid())})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	l, err := bpf.AttachTracepoint(m2.Progs[1], "syscalls", "sys_enter_getpgid")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	unix.Getpgid(0)
	getppid(4)
	lv, _ = m.Maps.Vars(false)
	if lv[0] != 63 {
		t.Errorf("enabled by the other source: lv 0 = %d, want 63", lv[0])
	}
}
