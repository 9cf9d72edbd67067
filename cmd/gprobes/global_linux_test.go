package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/kernel"
	"github.com/gprobes/gprobes/ptrace"
	"github.com/gprobes/gprobes/symbols"
)

// probedByte reads the byte a running process has at the start of a
// function of the program it runs (where a uprobe puts its int3), and
// the file's byte there.
func probedByte(t *testing.T, pid int, prog, fn string) (have, file byte) {
	t.Helper()
	tab, err := symbols.Open(prog)
	if err != nil {
		t.Fatal(err)
	}
	s, err := symbols.NewSet(tab).Lookup(fn)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	maps, err := ptrace.Maps(pid)
	if err != nil {
		t.Fatal(err)
	}
	var base uint64
	found := false
	for _, m := range maps {
		if m.Path == prog && m.Offset == 0 {
			base, found = m.Start, true
			break
		}
	}
	if !found {
		t.Fatalf("process %d does not map %s", pid, prog)
	}
	// hits is a PIE whose first segment is at address 0 and offset 0,
	// and its text's offsets are its addresses
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	one := make([]byte, 1)
	if _, err := mem.ReadAt(one, int64(base+s.Addr)); err != nil {
		t.Fatal(err)
	}
	return one[0], b[s.Addr]
}

// run without a command and without --target is the host target: the
// probe on a program's function counts the calls of every process that
// runs it (here two, started after the probes are in), and its records
// carry each process's pid and command name.
func TestRunHostDefault(t *testing.T) {
	needKernelBPF(t)
	hits := buildHits(t)
	exe, _ := os.Executable()
	r := exec.Command(exe, "run", "--json", "-e",
		fmt.Sprintf("name = %s; modtype = user; vars = 1; offset = probed; inc lv,0; push r,rdi; log 1; exit 1", hits))
	r.Env = append(os.Environ(), "GPROBES_TEST_MAIN=1")
	var rout, rerr lockedBuffer
	r.Stdout, r.Stderr = &rout, &rerr
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	defer r.Process.Kill()
	waitFor(t, func() bool { return strings.Contains(rerr.String(), "gprobes: ready on host (probes: 1 active)") }, "run's ready line on host:\n"+rerr.String())
	pids := map[int]bool{}
	for i := 0; i < 2; i++ {
		c := exec.Command(hits, "-n", "5")
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("%s -n 5: %v\n%s", hits, err, out)
		}
		pids[c.Process.Pid] = true
	}
	waitFor(t, func() bool { return strings.Count(rout.String(), "\n") >= 10 }, "10 records")
	r.Process.Signal(syscall.SIGINT)
	if err := r.Wait(); err != nil {
		t.Fatalf("run after Ctrl-C: %v\n%s%s", err, rout.String(), rerr.String())
	}
	out := rout.String()
	seen := map[int]int{}
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var rec struct {
			Pid  int
			Comm string
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		if !pids[rec.Pid] || rec.Comm != "hits" {
			t.Fatalf("a record of pid %d comm %q, want one of %v, comm hits: %s", rec.Pid, rec.Comm, pids, l)
		}
		seen[rec.Pid]++
	}
	for p := range pids {
		if seen[p] != 5 {
			t.Fatalf("records by pid %v, want 5 of each of %v:\n%s", seen, pids, out)
		}
	}
	if !strings.Contains(out, "lv 0=10") {
		t.Errorf("run's summary, want lv 0=10:\n%s", out)
	}
}

// insert without --target is the host target too, through the daemon:
// query names it and counts the hits of a process that ran before the
// insert; the daemon killed with SIGKILL leaves no uprobe in the running
// process (its int3 gone) and no uprobe link in the kernel.
func TestDaemonHostKilled(t *testing.T) {
	needKernelBPF(t)
	hits := buildHits(t)
	dir := t.TempDir()
	sock, state := filepath.Join(dir, "d.sock"), filepath.Join(dir, "state")
	d, dout := daemonProcess(t, sock, state)
	target, lines := startLooping(t, hits)
	if have, file := probedByte(t, target.Process.Pid, hits, "probed"); have != file || have == 0xcc {
		t.Fatalf("before the insert: %#02x in the process, %#02x in the file", have, file)
	}
	mustRun(t, "insert", "--socket", sock, "-e", fmt.Sprintf("name = %s; modtype = user; vars = 1; offset = probed; inc lv,0; exit 0", hits))
	if have, _ := probedByte(t, target.Process.Pid, hits, "probed"); have != 0xcc {
		t.Fatalf("with the probe in, the running process has %#02x at probed, not the int3", have)
	}
	var q struct {
		Probes []struct {
			Target, State, How string
			Hits               uint64
		}
	}
	// the process's lines in the pipe may be from before the insert:
	// wait for the hits themselves
	waitFor(t, func() bool {
		if err := json.Unmarshal([]byte(mustRun(t, "query", "--socket", sock, "--json")), &q); err != nil {
			t.Fatal(err)
		}
		return len(q.Probes) == 1 && q.Probes[0].Hits > 0
	}, "hits of the process that ran before the insert")
	if len(q.Probes) != 1 || q.Probes[0].Target != "host" || q.Probes[0].State != "active" || q.Probes[0].How != "uprobe" || q.Probes[0].Hits == 0 {
		t.Fatalf("query: %+v", q)
	}
	// query --processes: the one process, by its pid and name
	if out := mustRun(t, "query", "--socket", sock, "--processes"); !strings.Contains(out, fmt.Sprintf("  %d  hits  ", target.Process.Pid)) {
		t.Fatalf("query --processes, want a row of pid %d, command hits:\n%s", target.Process.Pid, out)
	}
	if n, err := kernel.UprobeLinks(hits); n != 1 || err != nil {
		t.Fatalf("%d uprobe links on %s with the probe in (%v)", n, hits, err)
	}
	d.Process.Kill()
	d.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := kernel.UprobeLinks(hits)
		have, file := probedByte(t, target.Process.Pid, hits, "probed")
		if n == 0 && err == nil && have == file {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the daemon's SIGKILL: %d uprobe links on %s (%v), the process has %#02x at probed, the file %#02x\n%s", n, hits, err, have, file, dout.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	roundLine(t, lines) // it runs on
}

// A usdt probe through the daemon (the module goes as a PPDF): the
// semaphore of the static probe is set in a process started after the
// insert, and cleared by remove; query counts the hits.
func TestDaemonHostUSDT(t *testing.T) {
	needKernelBPF(t)
	testkit.NeedSDT(t)
	exe := testkit.CC(t, "usdtprog", "-O1", "../../kernel/testdata/usdtprog.c", "../../kernel/testdata/usdtguard.c")
	sock, _ := startDaemon(t)
	mustRun(t, "insert", "--socket", sock, "-e", fmt.Sprintf("name = %s; modtype = user; vars = 1; usdt = app:guarded; inc lv,0; push arg,1; log 1; exit 1", exe))
	rounds := func(n int) string {
		c := exec.Command(exe)
		c.Stdin = strings.NewReader(fmt.Sprintf("%d\n", n))
		out, err := c.Output()
		if err != nil {
			t.Fatalf("%s: %v %s", exe, err, out)
		}
		return string(out)
	}
	if out := rounds(5); !strings.Contains(out, "done 5 enabled 5\n") {
		t.Fatalf("with the probe in: %q, want the 5 rounds enabled", out)
	}
	var q struct {
		Probes []struct {
			State, How string
			Hits       uint64
		}
	}
	if err := json.Unmarshal([]byte(mustRun(t, "query", "--socket", sock, "--json")), &q); err != nil {
		t.Fatal(err)
	}
	if len(q.Probes) != 1 || q.Probes[0].State != "active" || q.Probes[0].How != "usdt" || q.Probes[0].Hits != 5 {
		t.Fatalf("query: %+v", q)
	}
	mustRun(t, "remove", "--socket", sock, "--all")
	if out := rounds(3); !strings.Contains(out, "done 3 enabled 0\n") {
		t.Fatalf("after remove: %q, want no round enabled", out)
	}
}

// run --target host -- COMMAND counts COMMAND's hits of a user probe and
// those of the processes it starts, not another process running the same
// program meanwhile.
func TestRunHostCommand(t *testing.T) {
	needKernelBPF(t)
	hits := buildHits(t)
	other, lines := startLooping(t, hits)
	out := mustRun(t, "run", "--target", "host", "--json", "-e",
		fmt.Sprintf("name = %s; modtype = user; vars = 1; offset = probed; inc lv,0; push r,rdi; log 1; exit 1", hits), "--", hits, "-n", "7", "-f")
	roundLine(t, lines) // the other process ran meanwhile, unprobed
	if !strings.Contains(out, "lv 0=14") {
		t.Fatalf("run --target host -- hits -n 7 -f: want lv 0=14 (7 calls in the command, 7 in its child):\n%s", out)
	}
	if strings.Contains(out, fmt.Sprintf(`"pid":%d,`, other.Process.Pid)) {
		t.Fatalf("a record of the other process %d:\n%s", other.Process.Pid, out)
	}
}

// insert --every-copy reaches the host target (the kernel package's
// TestHostEveryCopy proves the copies): a pack bound to no build is
// refused, saying nothing tells its copies; a pid: target is refused.
func TestInsertEveryCopyRefusals(t *testing.T) {
	needKernelBPF(t)
	hits := buildHits(t)
	sock, _ := startDaemon(t)
	src := fmt.Sprintf("name = %s; modtype = user; offset = probed; exit 0", hits)
	if _, errs, code := gprobes(t, "insert", "--socket", sock, "--every-copy", "-e", src); code == 0 || !strings.Contains(errs, "every copy of a build: the pack is bound to no build") {
		t.Errorf("insert --every-copy of an unbound DPDF: exit %d %s", code, errs)
	}
	target, _ := startLooping(t, hits)
	if _, errs, code := gprobes(t, "insert", "--socket", sock, "--every-copy", "--target", fmt.Sprintf("pid:%d", target.Process.Pid), "-e", src); code == 0 || !strings.Contains(errs, "--every-copy: only the host target") {
		t.Errorf("insert --every-copy on pid:: exit %d %s", code, errs)
	}
}
