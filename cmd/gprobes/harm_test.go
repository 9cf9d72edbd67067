package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/testkit"
)

// TestNeverHarm is docs/engine.md's "Never harm the target" tried as a
// user would (issue 9): a 4-thread program whose first probed instruction
// is a lock add on a global (stepped out of line), with exec, detach under
// load, a rebuilt binary and a daemon killed with SIGKILL, each at least 20
// rounds (with -short, each way once: harmRounds). Every round checks the
// program's own result (it exits 1 when a count is off, dies when an int3
// is left behind or planted mid-instruction) and the hits.
func TestNeverHarm(t *testing.T) {
	need(t, "gcc")
	fx := buildHarm(t)
	t.Setenv("GPROBES_PROC_JOURNAL", t.TempDir())
	t.Run("exec", func(t *testing.T) { harmExec(t, fx) })
	t.Run("detach", func(t *testing.T) { harmDetach(t, fx) })
	t.Run("rebuild", func(t *testing.T) { harmRebuild(t, fx) })
	t.Run("sigkill", func(t *testing.T) { harmSigkill(t, fx) })
	t.Run("dlclose", func(t *testing.T) { harmDlclose(t) })
}

const harmThreads, harmN = 4, 2000

// harmRounds is n rounds, or with -short (the fast loop) one round for
// each of the ways a loop cycles through: every check runs, fewer times.
func harmRounds(n, ways int) int {
	if testing.Short() {
		return ways
	}
	return n
}

type harmFixture struct {
	harm, launcher string
}

// harmProbe counts f_lock (lock add, stepped) in lv 0 and f_push
// (emulated) in lv 1.
func harmProbe(t *testing.T, dir, prog string) string {
	t.Helper()
	p := filepath.Join(dir, "harm.dpdf")
	src := fmt.Sprintf("name = %s\nmodtype = user\nvars = 2\noffset = f_lock\nminor = 1\ninc lv,0\nexit 0\noffset = f_push\nminor = 2\ninc lv,1\nexit 0\n", prog)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func buildHarm(t *testing.T) harmFixture {
	t.Helper()
	src := "../../testdata/harm/"
	return harmFixture{
		harm:     testkit.CC(t, "harm", "-O1", "-g", "-pthread", src+"harm.c", src+"funcs.S"),
		launcher: testkit.CC(t, "launcher", "-O1", src+"launcher.c"),
	}
}

// gccHarm builds the fixture at out, every function moved by pad bytes.
func gccHarm(out string, pad int) error {
	src := "../../testdata/harm/"
	tmp := out + ".new"
	args := []string{"-O1", "-g", "-pthread", "-o", tmp, src + "harm.c", src + "funcs.S"}
	if pad > 0 {
		args = append(args, fmt.Sprintf("-DPAD=%d", pad))
	}
	if b, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%v\n%s", err, b)
	}
	return os.Rename(tmp, out) // a new file at the same path, as make does
}

// lvs parses the variables line run prints at the end.
func lvs(out, module string) (lock, push int, ok bool) {
	for _, l := range strings.Split(out, "\n") {
		if !strings.Contains(l, module+": lv ") {
			continue
		}
		_, rest, _ := strings.Cut(l, ": lv ")
		for _, f := range strings.Fields(rest) {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.Atoi(v)
			switch k {
			case "0":
				lock = n
			case "1":
				push = n
			}
		}
		return lock, push, true
	}
	return 0, 0, false
}

// exec (issue 9.1): the probes' module is the program a traced process
// is about to exec, by every way of starting it: run -- launcher, and a
// daemon attached to the launcher before it execs.
func harmExec(t *testing.T, fx harmFixture) {
	probe := harmProbe(t, t.TempDir(), fx.harm)
	want := harmThreads * harmN
	args := []string{"-t", strconv.Itoa(harmThreads), "-n", strconv.Itoa(harmN)}
	modes := []string{"exec", "fork", "vfork", "spawn"}
	for round := 0; round < harmRounds(20, len(modes)); round++ {
		mode := modes[round%4]
		out, errs, code := gprobes(t, append([]string{"run", "-q", probe, "--", fx.launcher, mode, fx.harm}, args...)...)
		lock, push, ok := lvs(out, fx.harm)
		if code != 0 || !ok || lock != want || push != want {
			t.Fatalf("run -- launcher %s, round %d: exit %d, lv %d %d (want %d each)\n%s%s", mode, round, code, lock, push, want, out, errs)
		}
	}
	sock, _ := harmDaemon(t, t.TempDir())
	for round := 0; round < harmRounds(20, len(modes)); round++ {
		mode := modes[round%4]
		gate := filepath.Join(t.TempDir(), "gate")
		cmd := exec.Command(fx.launcher, append([]string{mode, fx.harm}, args...)...)
		cmd.Env = append(os.Environ(), "GATE="+gate)
		pid, wait := startPrinting(t, cmd)
		mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", pid), probe)
		os.WriteFile(gate, nil, 0o644)
		if code, out := wait(); code != 0 {
			t.Fatalf("daemon on launcher %s, round %d: exit %d\n%s", mode, round, code, out)
		}
		q := queryHits(t, sock, fx.harm)
		if q[1] != uint64(want) || q[2] != uint64(want) {
			t.Fatalf("daemon on launcher %s, round %d: hits %v, want %d each", mode, round, q, want)
		}
		mustRun(t, "remove", "--socket", sock, "--all")
	}
}

// detach (issue 9.2): probes taken out while 4 threads run the stepped
// lock add: remove, SIGTERM to the daemon, Ctrl-C of run --target pid:N.
func harmDetach(t *testing.T, fx harmFixture) {
	probe := harmProbe(t, t.TempDir(), fx.harm)
	for round := 0; round < harmRounds(21, 3); round++ {
		dir := t.TempDir()
		gate, started := filepath.Join(dir, "gate"), filepath.Join(dir, "started")
		// long enough under probes that the detach comes mid-run
		cmd := exec.Command(fx.harm, "-t", strconv.Itoa(harmThreads), "-n", "20000", "-g", gate, "-s", started)
		pid, wait := startPrinting(t, cmd)
		target := fmt.Sprintf("pid:%d", pid)
		how := []string{"remove", "sigterm", "ctrl-c"}[round%3]
		switch how {
		case "remove", "sigterm":
			sock, d := harmDaemon(t, dir)
			mustRun(t, "insert", "--socket", sock, "--target", target, probe)
			openAndWait(t, gate, started)
			if how == "remove" {
				mustRun(t, "remove", "--socket", sock, "--all")
			} else {
				d.Process.Signal(syscall.SIGTERM)
				d.Wait()
			}
		case "ctrl-c":
			exe, _ := os.Executable()
			r := exec.Command(exe, "run", "-q", "--target", target, probe)
			r.Env = append(os.Environ(), "GPROBES_TEST_MAIN=1")
			var rout lockedBuffer
			r.Stdout, r.Stderr = &rout, &rout
			if err := r.Start(); err != nil {
				t.Fatal(err)
			}
			// in once run reports its probe (query would need a daemon)
			waitFor(t, func() bool { return probesIn(pid) }, "run's int3s in the fixture")
			openAndWait(t, gate, started)
			r.Process.Signal(syscall.SIGINT)
			if err := r.Wait(); err != nil {
				t.Fatalf("round %d: run after Ctrl-C: %v\n%s", round, err, rout.String())
			}
		}
		if code, out := wait(); code != 0 {
			t.Fatalf("detach by %s, round %d: the program's own check failed: exit %d\n%s", how, round, code, out)
		}
	}
}

// rebuild (issue 9.3): one daemon, the program rebuilt at the same path
// before every round with its functions moved.
func harmRebuild(t *testing.T, fx harmFixture) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "harm")
	probe := harmProbe(t, dir, prog)
	sock, _ := harmDaemon(t, dir)
	want := uint64(harmThreads * harmN)
	for round := 0; round < harmRounds(20, 4); round++ {
		if err := gccHarm(prog, []int{0, 13, 1, 29}[round%4]); err != nil {
			t.Fatal(err)
		}
		gate := filepath.Join(t.TempDir(), "gate")
		cmd := exec.Command(prog, "-t", strconv.Itoa(harmThreads), "-n", strconv.Itoa(harmN), "-g", gate)
		pid, wait := startPrinting(t, cmd)
		mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", pid), probe)
		os.WriteFile(gate, nil, 0o644)
		if code, out := wait(); code != 0 {
			t.Fatalf("rebuild round %d: exit %d\n%s", round, code, out)
		}
		if q := queryHits(t, sock, prog); q[1] != want || q[2] != want {
			t.Fatalf("rebuild round %d: hits %v, want %d each", round, q, want)
		}
		mustRun(t, "remove", "--socket", sock, "--all")
	}
}

// sigkill (issue 9.4): the daemon killed with SIGKILL while its probes
// are in a process and not yet hit; put back by the guard, by gprobes
// recover (the guard killed too), or by the next daemon as it starts.
func harmSigkill(t *testing.T, fx harmFixture) {
	probe := harmProbe(t, t.TempDir(), fx.harm)
	for round := 0; round < harmRounds(21, 3); round++ {
		dir := t.TempDir()
		gate := filepath.Join(dir, "gate")
		cmd := exec.Command(fx.harm, "-t", strconv.Itoa(harmThreads), "-n", strconv.Itoa(harmN), "-g", gate)
		pid, wait := startPrinting(t, cmd)
		sock, d := harmDaemon(t, dir)
		mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", pid), probe)
		if !probesIn(pid) {
			t.Fatal("no int3 in the fixture after insert")
		}
		how := []string{"guard", "recover", "next daemon"}[round%3]
		guard := guardOf(t, d.Process.Pid)
		if how != "guard" {
			syscall.Kill(guard, syscall.SIGKILL)
		}
		d.Process.Kill()
		d.Wait()
		switch how {
		case "guard":
			waitFor(t, func() bool { return !probesIn(pid) }, "the guard to put the bytes back")
		case "recover":
			time.Sleep(50 * time.Millisecond)
			if !probesIn(pid) {
				t.Fatal("the bytes went back with no guard and no recover: the test proves nothing")
			}
			mustRun(t, "recover")
		case "next daemon":
			harmDaemon(t, t.TempDir())
		}
		if probesIn(pid) {
			t.Fatalf("round %d (%s): int3 bytes still in the fixture", round, how)
		}
		os.WriteFile(gate, nil, 0o644)
		if code, out := wait(); code != 0 {
			t.Fatalf("sigkill round %d (%s): exit %d\n%s", round, how, code, out)
		}
	}
}

// harmDaemon starts a daemon in dir and returns its socket and process.
func harmDaemon(t *testing.T, dir string) (string, *exec.Cmd) {
	t.Helper()
	sock := filepath.Join(dir, "d.sock")
	d, _ := daemonProcess(t, sock, filepath.Join(dir, "state"))
	return sock, d
}

// startPrinting starts a fixture that prints "pid N" first; wait returns
// its exit status (128+N for a signal) and output.
func startPrinting(t *testing.T, cmd *exec.Cmd) (int, func() (int, string)) {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb lockedBuffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "pid ") {
		t.Fatalf("%s printed no pid", cmd.Path)
	}
	var rest strings.Builder
	done := make(chan struct{})
	go func() {
		for sc.Scan() {
			rest.WriteString(sc.Text() + "\n")
		}
		close(done)
	}()
	return cmd.Process.Pid, func() (int, string) {
		<-done
		err := cmd.Wait()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			ws := ee.Sys().(syscall.WaitStatus)
			code = ws.ExitStatus()
			if ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		} else if err != nil {
			t.Fatal(err)
		}
		return code, rest.String() + errb.String()
	}
}

// openAndWait opens the fixture's gate and waits until every thread has
// made its first call, plus a little: the detach comes mid-run.
func openAndWait(t *testing.T, gate, started string) {
	t.Helper()
	os.WriteFile(gate, nil, 0o644)
	waitFor(t, func() bool { _, err := os.Stat(started); return err == nil }, "the fixture's threads to start")
	time.Sleep(30 * time.Millisecond)
}

// probesIn reports whether f_lock's first byte in process pid is an int3.
func probesIn(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return false
	}
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	var base uint64
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 6 && f[5] == exe && f[2] == "00000000" {
			lo, _, _ := strings.Cut(f[0], "-")
			base, _ = strconv.ParseUint(lo, 16, 64)
			break
		}
	}
	out, err := exec.Command("nm", exe).Output()
	if err != nil || base == 0 {
		return false
	}
	var off uint64
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[2] == "f_lock" {
			off, _ = strconv.ParseUint(f[0], 16, 64)
		}
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return false
	}
	defer mem.Close()
	var c [1]byte
	_, err = mem.ReadAt(c[:], int64(base+off))
	// f_lock starts with a lock prefix (f0): an int3 (cc) or a jump to a
	// pad (e9) there is gprobes'
	return err == nil && (c[0] == 0xcc || c[0] == 0xe9)
}

// guardOf finds the guard a daemon started.
func guardOf(t *testing.T, owner int) int {
	t.Helper()
	want := fmt.Sprintf("recover\x00--guard\x00%d\x00", owner)
	var pid int
	waitFor(t, func() bool {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			n, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", n)); strings.Contains(string(b), want) {
				pid = n
				return true
			}
		}
		return false
	}, "the daemon's guard")
	return pid
}

// queryHits returns the hits of a module's probes by minor.
func queryHits(t *testing.T, sock, module string) map[uint16]uint64 {
	t.Helper()
	var q struct {
		Probes []struct {
			Minor uint16
			Hits  uint64
		}
	}
	out := mustRun(t, "query", "--socket", sock, module, "--json")
	if err := json.Unmarshal([]byte(out), &q); err != nil {
		t.Fatalf("query: %v\n%s", err, out)
	}
	m := map[uint16]uint64{}
	for _, p := range q.Probes {
		m[p.Minor] = p.Hits
	}
	return m
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("waited 30 s for %s", what)
}

// dlclose (docs/engine.md, "Never harm the target": rebuilding the probed
// file): a library dlclose'd, rebuilt with its function moved and
// dlopen'ed again, 20 times (4 with -short), under one daemon: its probes
// follow it, and remove with the library unloaded writes nothing into the
// program.
func harmDlclose(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "plug.so")
	reload := filepath.Join(dir, "reload")
	if b, err := exec.Command("gcc", "-O1", "-o", reload, "../../testdata/harm/reload.c", "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	build := func(pad int) {
		args := []string{"-O1", "-shared", "-fPIC", "-o", lib + ".new", "../../testdata/harm/plug.c"}
		if pad > 0 {
			args = append(args, fmt.Sprintf("-DPAD=%d", pad))
		}
		if b, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, b)
		}
		if err := os.Rename(lib+".new", lib); err != nil {
			t.Fatal(err)
		}
	}
	probe := filepath.Join(dir, "plug.dpdf")
	os.WriteFile(probe, []byte("name = "+lib+"\nmodtype = user\nvars = 1\noffset = plug\ninc lv,0\nexit 0\n"), 0o644)
	rounds, n := harmRounds(20, 4), 500
	build(0)
	sock, _ := harmDaemon(t, dir)
	pid, wait := startPrinting(t, exec.Command(reload, lib, strconv.Itoa(rounds), strconv.Itoa(n), dir))
	mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", pid), probe)
	lv := func() int {
		out := mustRun(t, "getvars", "--socket", sock, lib, "--json")
		var v struct{ Modules []struct{ LV []string } }
		if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Modules) != 1 || len(v.Modules[0].LV) != 1 {
			t.Fatalf("getvars: %v %s", err, out)
		}
		k, _ := strconv.Atoi(v.Modules[0].LV[0])
		return k
	}
	for r := 0; r < rounds; r++ {
		if r > 0 {
			build([]int{0, 5, 1, 9}[r%4])
		}
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("go.%d", r)), nil, 0o644)
		want := (r + 1) * n
		waitFor(t, func() bool { return lv() >= want }, fmt.Sprintf("%d hits of plug", want))
		if got := lv(); got != want {
			t.Fatalf("round %d: %d hits of plug, want %d", r, got, want)
		}
	}
	// the library is unloaded (or about to be): remove writes nothing
	time.Sleep(50 * time.Millisecond)
	mustRun(t, "remove", "--socket", sock, "--all")
	os.WriteFile(filepath.Join(dir, "end"), nil, 0o644)
	if code, out := wait(); code != 0 {
		t.Fatalf("reload: exit %d\n%s", code, out)
	}
}
