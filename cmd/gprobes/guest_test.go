package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gprobes/gprobes/lab/qemulab"
)

// Two guest kernels in QEMU (the lab of lab/qemulab) through the commands a
// user types: the daemon's insert --target gdb:... of two modules into one
// guest and one into the other, query, getvars, log, remove from one
// guest, then gprobes run --target gdb:... ended by Ctrl-C. After each the
// guests run on.
func TestGuestCommands(t *testing.T) {
	qemulab.Require(t)
	art, err := qemulab.Artifacts()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	vmA, err := qemulab.Boot(ctx, qemulab.Options{KASLR: true})
	if err != nil {
		t.Fatal(err)
	}
	defer vmA.Kill()
	vmB, err := qemulab.Boot(ctx, qemulab.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer vmB.Kill()
	targetA, targetB := "gdb:"+vmA.GDBAddr(), "gdb:"+vmB.GDBAddr()
	syms := []string{"--symbols", filepath.Join(art, "System.map"), "--symbols", filepath.Join(art, "vmlinux")}
	dir := t.TempDir()
	// the same kernel image as two modules: "vmlinux" and "kernel"
	writes := filepath.Join(dir, "writes.dpdf")
	os.WriteFile(writes, []byte(`name = vmlinux
modtype = kernel
vars = 1
offset = ksys_write
inc lv,0
push pid
push r,rdi
log 2
exit 1
`), 0o644)
	reads := filepath.Join(dir, "reads.dpdf")
	os.WriteFile(reads, []byte(`name = kernel
modtype = kernel
offset = ksys_read
push pid
push r,rdi
log 2
exit 1
`), 0o644)
	pidRe := regexp.MustCompile(`GPWORK pid (\d+)`)
	work := func(vm *qemulab.VM, n int) int {
		t.Helper()
		out, rc, err := vm.Run(fmt.Sprintf("gpwork counts %d", n), 3*time.Minute)
		if err != nil || rc != 0 || !strings.Contains(out, fmt.Sprintf("write %d ", n)) {
			t.Fatalf("gpwork in the guest: rc %d %v\n%s", rc, err, out)
		}
		m := pidRe.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no pid in %q", out)
		}
		var pid int
		fmt.Sscan(m[1], &pid)
		return pid
	}
	sock, _ := startDaemon(t)
	// count returns the logged calls of a process on fd, by target and module
	count := func(target, module string, pid, fd int) int {
		t.Helper()
		out := mustRun(t, "log", "--socket", sock, "--json")
		n := 0
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var rec struct {
				Target, Module string
				Pid            int
				Data           string
			}
			if err := json.Unmarshal([]byte(l), &rec); err != nil {
				t.Fatalf("log line %q: %v", l, err)
			}
			if rec.Target == target && rec.Module == module && rec.Pid == pid && len(rec.Data) == 32 && rec.Data[16:] == fmt.Sprintf("%02x00000000000000", fd) {
				n++
			}
		}
		return n
	}

	mustRun(t, append([]string{"insert", "--socket", sock, "--target", targetA}, append(syms, writes)...)...)
	mustRun(t, append([]string{"insert", "--socket", sock, "--target", targetA}, append(syms, reads)...)...)
	mustRun(t, append([]string{"insert", "--socket", sock, "--target", targetB}, append(syms, writes)...)...)
	pidA, pidB := work(vmA, 4), work(vmB, 3)
	var q struct {
		Probes []struct {
			Target, Module, State, Location string
			Hits                            uint64
		}
	}
	out := mustRun(t, "query", "--socket", sock, "--all", "--json")
	if err := json.Unmarshal([]byte(out), &q); err != nil || len(q.Probes) != 3 {
		t.Fatalf("query: %v %s", err, out)
	}
	for _, p := range q.Probes {
		if p.State != "active" || p.Hits < 3 {
			t.Errorf("query: %+v", p)
		}
	}
	var v struct {
		Modules []struct{ Target, Module string }
	}
	out = mustRun(t, "getvars", "--socket", sock, "--all", "--json")
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Modules) != 3 {
		t.Fatalf("getvars: %v %s", err, out)
	}
	// the workload writes to fd 4 and reads fd 3; each record names its
	// guest, its module and its process
	if n := count(targetA, "vmlinux", pidA, 4); n != 4 {
		t.Errorf("guest A: %d writes of pid %d logged, want 4", n, pidA)
	}
	if n := count(targetA, "kernel", pidA, 3); n != 4 {
		t.Errorf("guest A: %d reads of pid %d logged, want 4", n, pidA)
	}
	if n := count(targetB, "vmlinux", pidB, 4); n != 3 {
		t.Errorf("guest B: %d writes of pid %d logged, want 3", n, pidB)
	}
	// vmlinux out of guest A only
	mustRun(t, "remove", "--socket", sock, "--target", targetA, "vmlinux")
	pidA, pidB = work(vmA, 2), work(vmB, 2)
	if n := count(targetA, "vmlinux", pidA, 4); n != 0 {
		t.Errorf("guest A: %d writes logged after their probe was removed", n)
	}
	if n := count(targetA, "kernel", pidA, 3); n != 2 {
		t.Errorf("guest A: %d reads of pid %d logged, want 2", n, pidA)
	}
	if n := count(targetB, "vmlinux", pidB, 4); n != 2 {
		t.Errorf("guest B: %d writes of pid %d logged, want 2", n, pidB)
	}
	if _, errs, code := gprobes(t, "remove", "--socket", sock, "--target", targetA, "vmlinux"); code == 0 || !strings.Contains(errs, "vmlinux") {
		t.Errorf("removing a module that is not in: %d %s", code, errs)
	}
	mustRun(t, "remove", "--socket", sock, "--all")
	work(vmA, 1)
	work(vmB, 1)
	if out := mustRun(t, "query", "--socket", sock, "--all"); strings.Contains(out, "ksys_") {
		t.Errorf("after remove --all: %s", out)
	}

	// gprobes run on the same stub, records on stdout, Ctrl-C to end
	exe, _ := os.Executable()
	run := exec.Command(exe, append(append([]string{"run", "--target", targetB}, syms...), writes)...)
	run.Env = append(os.Environ(), "GPROBES_TEST_MAIN=1")
	var rout, rerr syncBuf
	run.Stdout, run.Stderr = &rout, &rerr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	defer run.Process.Kill()
	// the guest runs while gprobes connects: run the workload until its
	// writes show up
	var pid int
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		pid = work(vmB, 3)
		if strings.Contains(rout.String(), fmt.Sprintf(" pid %d tid ", pid)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gprobes run printed no record of pid %d:\n%s%s", pid, rout.String(), rerr.String())
		}
	}
	run.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- run.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("gprobes run after Ctrl-C: %v\n%s", err, rerr.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("gprobes run did not end on Ctrl-C\n%s%s", rout.String(), rerr.String())
	}
	if !strings.Contains(rout.String(), targetB+" vmlinux: lv") || !strings.Contains(rout.String(), "ksys_write") {
		t.Errorf("the summary does not name the guest:\n%s", rout.String())
	}
	work(vmB, 1)
}

// syncBuf is a buffer a command writes while the test reads it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
