package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/testkit"
)

// autostacktrace = yes on the kernel target: at the tracepoint
// syscalls:sys_enter_getppid, which testdata/stacks/fact.c reaches from
// leaf, a program reading address 0 raises invalid-address, and its
// exception record carries the kernel stack at the hit (bpf_get_stack in
// the prologue, copied to the record by the exception tail): frames named
// in vmlinux, the system call's entry among them, 16 at most. The same
// probe with autostacktrace = no records its exception without a stack.
func TestKernelAutoStack(t *testing.T) {
	needKernelBPF(t)
	dir := t.TempDir()
	sock, state := filepath.Join(dir, "d.sock"), filepath.Join(dir, "state")
	daemonProcess(t, sock, state)
	prog := testkit.CC(t, "fact-O2", "-O2", "../../testdata/stacks/fact.c")
	cmd := exec.Command(prog, "3", "1", "getppid")
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	body := fmt.Sprintf(`push pid
push d,%d
sub
jnz other
push d,0
push mrf,8
log 1
exit 1
other:
exit 0
`, cmd.Process.Pid)
	src := filepath.Join(dir, "k.dpdf")
	os.WriteFile(src, []byte("name = vmlinux\nmodtype = kernel\nautostacktrace = yes\ntracepoint = syscalls:sys_enter_getppid\nminor = 1\n"+body+
		"tracepoint = syscalls:sys_enter_getppid\nminor = 2\nautostacktrace = no\n"+body), 0o644)
	mustRun(t, "insert", "--socket", sock, "--target", "kernel", src)
	fmt.Fprintln(stdin)
	type rec struct {
		Kind, Exception string
		Minor, Pid      int
		Stacks          []struct {
			Kind   string
			Frames []struct{ Function, Module string }
		}
	}
	got := map[int]rec{}
	testkit.Wait(t, time.Minute, "the exception records of the fixture's getppid", func() (bool, string) {
		out := mustRun(t, "log", "--socket", sock, "--json")
		for _, l := range strings.Split(out, "\n") {
			var r rec
			if json.Unmarshal([]byte(l), &r) == nil && r.Pid == cmd.Process.Pid {
				got[r.Minor] = r
			}
		}
		return len(got) == 2, out
	})
	fmt.Fprintln(stdin)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the fixture: %v", err)
	}
	mustRun(t, "remove", "--socket", sock, "--target", "kernel", "vmlinux")

	r := got[1]
	if r.Kind != "exception" || r.Exception != "invalid-address" || len(r.Stacks) != 1 || r.Stacks[0].Kind != "kernel" {
		t.Fatalf("minor 1 (autostacktrace = yes): %+v, want an invalid-address exception with a kernel stack", r)
	}
	var names []string
	for _, f := range r.Stacks[0].Frames {
		names = append(names, f.Function)
		if f.Function == "" || f.Module != "vmlinux" {
			t.Errorf("kernel frame %+v not named in vmlinux", f)
		}
	}
	t.Logf("kernel frames %v", names)
	if n := len(names); n < 2 || n > 16 || !strings.Contains(strings.Join(names, " "), "do_syscall_64") {
		t.Errorf("kernel frames %v: want 2..16, the system call's entry among them", names)
	}
	if r := got[2]; r.Kind != "exception" || r.Exception != "invalid-address" || len(r.Stacks) != 0 {
		t.Errorf("minor 2 (autostacktrace = no): %+v, want an invalid-address exception without stacks", r)
	}
}
