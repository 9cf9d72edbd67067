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

	qemulab "github.com/gprobes/gprobes/lab/qemu"
)

// A guest kernel in QEMU (the lab of lab/qemu) through the commands a user
// types: the daemon's insert --target gdb:..., query, getvars, log and
// remove, then gprobes run --target gdb:... ended by Ctrl-C. After each the
// guest runs on.
func TestGuestCommands(t *testing.T) {
	qemulab.Require(t)
	art, err := qemulab.Artifacts()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	vm, err := qemulab.Boot(ctx, qemulab.Options{KASLR: true})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Kill()
	target := "gdb:" + vm.GDBAddr()
	syms := []string{"--symbols", filepath.Join(art, "System.map"), "--symbols", filepath.Join(art, "vmlinux")}
	probe := filepath.Join(t.TempDir(), "guest.dpdf")
	os.WriteFile(probe, []byte(`name = vmlinux
modtype = kernel
vars = 1
offset = ksys_write
inc lv,0
push pid
push r,rdi
log 2
exit 1
`), 0o644)
	pidRe := regexp.MustCompile(`GPWORK pid (\d+)`)
	work := func(n int) int {
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
	mustRun(t, append([]string{"insert", "--socket", sock, "--target", target}, append(syms, probe)...)...)
	pid := work(4)
	var q struct {
		Probes []struct {
			Target, State, Location string
			Hits                    uint64
		}
	}
	out := mustRun(t, "query", "--socket", sock, "--all", "--json")
	if err := json.Unmarshal([]byte(out), &q); err != nil || len(q.Probes) != 1 {
		t.Fatalf("query: %v %s", err, out)
	}
	if p := q.Probes[0]; p.Target != target || p.State != "active" || p.Location != "ksys_write" || p.Hits < 4 {
		t.Errorf("query: %+v", p)
	}
	var v struct{ Modules []struct{ LV []string } }
	out = mustRun(t, "getvars", "--socket", sock, "--all", "--json")
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Modules) != 1 {
		t.Fatalf("getvars: %v %s", err, out)
	}
	var count int
	fmt.Sscan(v.Modules[0].LV[0], &count)
	if count < 4 {
		t.Errorf("lv0 %d, want at least 4", count)
	}
	// the workload's four writes to fd 4, each a record naming its process
	out = mustRun(t, "log", "--socket", sock, "--json")
	writes := 0
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var rec struct {
			Target, Location string
			Pid              int
			Data             string
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if rec.Target != target || rec.Location != "ksys_write" {
			t.Errorf("record %s", l)
		}
		if rec.Pid == pid && strings.HasSuffix(rec.Data, "0400000000000000") {
			writes++
		}
	}
	if writes != 4 {
		t.Errorf("%d records of pid %d writing to fd 4, want 4:\n%s", writes, pid, out)
	}
	mustRun(t, "remove", "--socket", sock, "--all")
	work(2)
	if out := mustRun(t, "query", "--socket", sock, "--all"); strings.Contains(out, "ksys_write") {
		t.Errorf("after remove: %s", out)
	}

	// gprobes run on the same stub, records on stdout, Ctrl-C to end
	exe, _ := os.Executable()
	run := exec.Command(exe, append(append([]string{"run", "--target", target}, syms...), probe)...)
	run.Env = append(os.Environ(), "GPROBES_TEST_MAIN=1")
	var rout, rerr syncBuf
	run.Stdout, run.Stderr = &rout, &rerr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	defer run.Process.Kill()
	// the guest runs while gprobes connects: run the workload until its
	// writes show up
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		pid = work(3)
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
	if !strings.Contains(rout.String(), target+" vmlinux: lv") || !strings.Contains(rout.String(), "ksys_write") {
		t.Errorf("the summary does not name the guest:\n%s", rout.String())
	}
	work(1)
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
