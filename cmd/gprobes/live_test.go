package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gprobes/gprobes/daemon"
	"github.com/gprobes/gprobes/internal/testkit"
)

// buildHits builds testdata/proc's fixture once per test binary.
func buildHits(t *testing.T) string {
	t.Helper()
	src := "../../testdata/proc/"
	return testkit.CC(t, "hits", "-O1", "-g", "-pthread", src+"hits.c", src+"funcs.S", "-ldl")
}

// startLooping starts the fixture looping and returns it with a reader of
// its output lines.
func startLooping(t *testing.T, hits string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(hits, "-n", "200", "-l", "-p", "20")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	sc.Scan() // pid
	return cmd, sc
}

// roundLine returns the fixture's next round line without its pid.
func roundLine(t *testing.T, sc *bufio.Scanner) string {
	t.Helper()
	done := make(chan bool, 1)
	go func() { done <- sc.Scan() }()
	select {
	case ok := <-done:
		if !ok {
			t.Fatalf("the fixture's output ended: %v", sc.Err())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the fixture printed nothing for 30 s")
	}
	f := strings.Fields(sc.Text())
	if len(f) < 3 {
		t.Fatalf("odd line %q", sc.Text())
	}
	return strings.Join(f[2:], " ")
}

// The daemon end to end: insert into a running process, query, getvars,
// log, remove, insert again, then SIGTERM: every probe out, the process
// runs on with its original code, correctly.
func TestDaemon(t *testing.T) {
	hits := buildHits(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "d.sock")
	state := filepath.Join(dir, "state")
	exe, _ := os.Executable()
	d := exec.Command(exe, "daemon", "--socket", sock, "--state", state)
	d.Env = append(os.Environ(), "GPROBES_TEST_MAIN=1")
	var dout strings.Builder
	d.Stdout, d.Stderr = &dout, &dout
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Process.Kill(); d.Wait() })
	testkit.WaitTrue(t, time.Minute, "the daemon's socket", func() bool { _, err := os.Stat(sock); return err == nil })
	if st, err := os.Stat(sock); err != nil {
		t.Fatal(err)
	} else if st.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", st.Mode().Perm())
	}
	target, lines := startLooping(t, hits)
	// the reference: the same rounds unprobed
	ref, refLines := startLooping(t, hits)
	_ = ref
	pid := target.Process.Pid

	probe := filepath.Join(dir, "p.dpdf")
	os.WriteFile(probe, []byte(fmt.Sprintf(`name = %s
modtype = user
vars = 2
offset = f_push
minor = 1
inc lv,0
push r,rdi
log 1
exit 1
offset = f_step
minor = 2
inc lv,1
exit 0
`, hits)), 0o644)
	mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", pid), probe)
	// a second insert of the same module says which flag to use
	if _, errs, code := gprobes(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", pid), probe); code == 0 || !strings.Contains(errs, "--merge") || !strings.Contains(errs, "--replace") {
		t.Errorf("second insert: %d %s", code, errs)
	}
	for i := 0; i < 3; i++ {
		if got, want := roundLine(t, lines), roundLine(t, refLines); got != want {
			t.Fatalf("round %d under probes: %s, want %s", i, got, want)
		}
	}
	out := mustRun(t, "query", "--socket", sock, hits, "--json")
	var q struct {
		Probes []struct {
			State, How, Location string
			Hits                 uint64
		}
	}
	if err := json.Unmarshal([]byte(out), &q); err != nil || len(q.Probes) != 2 {
		t.Fatalf("query: %v %s", err, out)
	}
	for _, p := range q.Probes {
		if p.State != "active" || p.Hits == 0 {
			t.Errorf("query: %+v", p)
		}
	}
	// wait for a few rounds' worth of hits (f_push: 400 a round)
	var v struct{ Modules []struct{ LV []string } }
	for deadline := time.Now().Add(20 * time.Second); ; {
		out = mustRun(t, "getvars", "--socket", sock, "--all", "--json")
		json.Unmarshal([]byte(out), &v)
		if len(v.Modules) != 1 || len(v.Modules[0].LV) != 2 {
			t.Fatalf("getvars: %s", out)
		}
		var n int
		fmt.Sscan(v.Modules[0].LV[0], &n)
		if n >= 1200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d hits after 20 s", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// the pads count a hit at once; its record reaches the log when the
	// daemon drains the pads' rings (within about a millisecond): wait
	// for the 1,200 records the counts promise
	n := 0
	testkit.Wait(t, time.Minute, "1,200 log records", func() (bool, string) {
		out = mustRun(t, "log", "--socket", sock, "--json")
		n = 0
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(l), &rec); err != nil {
				t.Fatalf("log line %q: %v", l, err)
			}
			for _, k := range []string{"time", "module", "major", "minor", "location", "address", "pid", "tid", "cpu", "exit", "data", "truncated"} {
				if _, ok := rec[k]; !ok {
					t.Fatalf("log record without %s: %s", k, l)
				}
			}
			n++
		}
		return n >= 1200, fmt.Sprintf("%d records", n)
	})
	logFile := logFileJSON(t, filepath.Join(state, daemon.LogFileName))
	if strings.Count(string(logFile), "\n") < n {
		t.Errorf("the log file has fewer records than gprobes log printed")
	}
	// remove one probe by minor, then all
	mustRun(t, "remove", "--socket", sock, hits, "--minor", "2")
	out = mustRun(t, "query", "--socket", sock, "--all", "--json")
	json.Unmarshal([]byte(out), &q)
	if len(q.Probes) != 1 || q.Probes[0].Location != "f_push" {
		t.Errorf("after remove --minor 2: %s", out)
	}
	mustRun(t, "remove", "--socket", sock, "--all")
	for i := 0; i < 2; i++ {
		if got, want := roundLine(t, lines), roundLine(t, refLines); got != want {
			t.Fatalf("round %d after remove: %s, want %s", i, got, want)
		}
	}
	// in again, then the daemon is told to stop
	mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", pid), probe)
	roundLine(t, lines)
	roundLine(t, refLines)
	d.Process.Signal(syscall.SIGTERM)
	waited := make(chan error, 1)
	go func() { waited <- d.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("daemon exit: %v\n%s", err, dout.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the daemon did not exit on SIGTERM\n%s", dout.String())
	}
	if _, err := os.Stat(sock); err == nil {
		t.Error("the socket is left behind")
	}
	for i := 0; i < 3; i++ {
		if got, want := roundLine(t, lines), roundLine(t, refLines); got != want {
			t.Fatalf("round %d after the daemon stopped: %s, want %s", i, got, want)
		}
	}
	// not traced any more
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if !strings.Contains(string(status), "TracerPid:\t0") {
		t.Errorf("still traced:\n%s", status)
	}
	// a client without a daemon says so
	if _, errs, code := gprobes(t, "query", "--socket", sock, "--all"); code == 0 || !strings.Contains(errs, "gprobes daemon") {
		t.Errorf("no daemon: %d %s", code, errs)
	}
}

// gprobes run: records as they commit, the variables and the probes at the
// end, and the command's exit status.
func TestRunCommand(t *testing.T) {
	hits := buildHits(t)
	dir := t.TempDir()
	probe := filepath.Join(dir, "p.dpdf")
	os.WriteFile(probe, []byte(fmt.Sprintf("name = %s\nmodtype = user\nvars = 1\noffset = probed\ninc lv,0\npush d,16\npush r,rsi\nlog str\nexit 1\n", filepath.Base(hits))), 0o644)
	out := mustRun(t, "run", probe, "--", hits, "-n", "4")
	for _, want := range []string{`"alpha"`, `"beta"`, `"gamma"`, "lv 0=4", "active", "gone"} {
		if !strings.Contains(out, want) && !(want == "active" && strings.Contains(out, "gone")) {
			t.Errorf("run output lacks %q:\n%s", want, out)
		}
	}
	// the exit status is the command's
	_, _, code := gprobes(t, "run", probe, "--", "sh", "-c", "exit 7")
	if code != 7 {
		t.Errorf("exit status %d, want 7", code)
	}
}

// daemonProcess runs "gprobes daemon" (this test binary as gprobes) on
// sock with its state in state and more flags, collects its output, stops
// it with SIGTERM when the test ends, and returns once it answers on its
// socket. Every daemon-starting helper of this package uses it.
func daemonProcess(t *testing.T, sock, state string, flags ...string) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	exe, _ := os.Executable()
	d := exec.Command(exe, append([]string{"daemon", "--socket", sock, "--state", state}, flags...)...)
	d.Env = append(os.Environ(), "GPROBES_TEST_MAIN=1")
	out := &lockedBuffer{}
	d.Stdout, d.Stderr = out, out
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Process.Signal(syscall.SIGTERM); d.Wait() })
	for end := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return d, out
		}
		if time.Now().After(end) {
			t.Fatalf("the daemon does not answer on %s:\n%s", sock, out)
		}
	}
}

// startDaemon runs "gprobes daemon" on a socket of its own.
func startDaemon(t *testing.T) (sock, state string) {
	t.Helper()
	dir := t.TempDir()
	sock, state = filepath.Join(dir, "d.sock"), filepath.Join(dir, "state")
	daemonProcess(t, sock, state)
	return sock, state
}

// Two targets in one daemon, gprobes log --follow, getvars --reset.
func TestDaemonTwoTargets(t *testing.T) {
	hits := buildHits(t)
	sock, _ := startDaemon(t)
	// a second copy of the program, so the two modules have their own names
	hits2 := filepath.Join(t.TempDir(), "hits2")
	b, _ := os.ReadFile(hits)
	os.WriteFile(hits2, b, 0o755)
	a, linesA := startLooping(t, hits)
	bproc, linesB := startLooping(t, hits2)
	dir := t.TempDir()
	for i, name := range []string{"hits", "hits2"} {
		os.WriteFile(filepath.Join(dir, name+".dpdf"), []byte(fmt.Sprintf("name = %s\nmodtype = user\nvars = 1\noffset = probed\nminor = %d\ninc lv,0\npush r,rdi\nlog 1\nexit 1\n", name, i+1)), 0o644)
	}
	// follow the log from now on
	exe, _ := os.Executable()
	follow := exec.Command(exe, "log", "--follow", "--json", "--socket", sock)
	follow.Env = append(os.Environ(), "GPROBES_TEST_MAIN=1")
	fout, _ := follow.StdoutPipe()
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { follow.Process.Kill(); follow.Wait() }()
	mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", a.Process.Pid), filepath.Join(dir, "hits.dpdf"))
	mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", bproc.Process.Pid), filepath.Join(dir, "hits2.dpdf"))
	roundLine(t, linesA)
	roundLine(t, linesB)
	seen := map[int]int{}
	sc := bufio.NewScanner(fout)
	deadline := time.Now().Add(30 * time.Second)
	for (seen[a.Process.Pid] < 100 || seen[bproc.Process.Pid] < 100) && time.Now().Before(deadline) && sc.Scan() {
		var rec struct {
			Pid    int
			Module string
			Target string
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("%v: %s", err, sc.Text())
		}
		if rec.Target != fmt.Sprintf("pid:%d", rec.Pid) {
			t.Fatalf("record of pid %d says target %s", rec.Pid, rec.Target)
		}
		seen[rec.Pid]++
	}
	if seen[a.Process.Pid] < 100 || seen[bproc.Process.Pid] < 100 {
		t.Fatalf("followed records per pid: %v", seen)
	}
	// reset: once the second program is gone its count stands still; read
	// it with --reset, then it is zero
	bproc.Process.Kill()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if strings.Contains(mustRun(t, "query", "--socket", sock, "hits2"), "gone") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed target is not gone")
		}
	}
	var v struct {
		Modules []struct {
			Module string
			LV     []string
		}
	}
	json.Unmarshal([]byte(mustRun(t, "getvars", "--socket", sock, "hits2", "--json")), &v)
	count := v.Modules[0].LV[0]
	out := mustRun(t, "getvars", "--socket", sock, "hits2", "--reset", "--json")
	json.Unmarshal([]byte(out), &v)
	if len(v.Modules) != 1 || v.Modules[0].Module != "hits2" || v.Modules[0].LV[0] != count || count == "0" {
		t.Fatalf("getvars --reset returned %s, the count was %s", out, count)
	}
	json.Unmarshal([]byte(mustRun(t, "getvars", "--socket", sock, "hits2", "--json")), &v)
	if v.Modules[0].LV[0] != "0" {
		t.Errorf("after --reset: %v", v.Modules[0].LV)
	}
	// the killed target's probes are gone; the other one still works
	out = mustRun(t, "query", "--socket", sock, "--all", "--json")
	var q struct {
		Probes []struct{ Module, State string }
	}
	json.Unmarshal([]byte(out), &q)
	states := map[string]string{}
	for _, p := range q.Probes {
		states[p.Module] = p.State
	}
	if states["hits2"] != "gone" || states["hits"] != "active" {
		t.Errorf("states after one target was killed: %v", states)
	}
}
