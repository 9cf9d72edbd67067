package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/testkit"
)

// TestNeverHarm is docs/engine.md's "Never harm the target" tried as a
// user would, on both routes (int3 and jump pads): a 4-thread program whose first probed
// instruction is a lock add on a global (a jump pad's covered
// instruction, or stepped out of line on the int3 route), with exec,
// detach under load, a rebuilt binary and a daemon killed with SIGKILL
// (probes not yet hit, and threads running through the pads), each at
// least 20 rounds (with -short, each way once: harmRounds). Every round
// checks the program's own result (it exits 1 when a count is off, dies
// when an int3 is left behind or planted mid-instruction) and the hits or
// the route. The rounds log their times (go test -v).
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

// harmProbe counts f_lock (lock add: stepped on the int3 route) in lv 0
// and f_push (emulated there) in lv 1; both go on jumps by default.
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

// exec: the probes' module is the program a traced process
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

// detach: probes taken out while 4 threads run through them:
// remove, SIGTERM to the daemon, Ctrl-C of run --target pid:N. On the jump
// route a thread goes through a pad in tens of nanoseconds, so a fixture
// with a fixed count would be over before the detach: this one runs until
// the test creates its stop file, and each round checks its 4 threads are
// still calling both before and after the detach (the detach really came
// mid-run), and that the code is the file's again.
func harmDetach(t *testing.T, fx harmFixture) {
	probe := harmProbe(t, t.TempDir(), fx.harm)
	times := roundTimes{}
	for round := 0; round < harmRounds(21, 3); round++ {
		start := time.Now()
		dir := t.TempDir()
		h := startHarmRunning(t, fx.harm, dir)
		target := fmt.Sprintf("pid:%d", h.pid)
		how := []string{"remove", "sigterm", "ctrl-c"}[round%3]
		what := fmt.Sprintf("detach by %s, round %d", how, round)
		switch how {
		case "remove", "sigterm":
			sock, d := harmDaemon(t, dir)
			mustRun(t, "insert", "--socket", sock, "--target", target, probe)
			openAndWait(t, h.gate, h.started)
			checkJumps(t, sock, fx.harm, what)
			h.mustBeRunning(t, what+", before it")
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
			// run says when its probes are in: both jumps are then, in
			// the fixture's memory
			waitFor(t, func() bool { return strings.Contains(rout.String(), "gprobes: ready on "+target+" (probes: 2 active)") }, "run's ready line")
			if !allProbesIn(h.pid) {
				t.Fatalf("%s: run said it was ready before both probes were in the fixture:\n%s", what, rout.String())
			}
			openAndWait(t, h.gate, h.started)
			h.mustBeRunning(t, what+", before it")
			r.Process.Signal(syscall.SIGINT)
			if err := r.Wait(); err != nil {
				t.Fatalf("%s: run after Ctrl-C: %v\n%s", what, err, rout.String())
			}
			sum := summaryProbes(rout.String(), fx.harm)
			for _, loc := range []string{"f_lock", "f_push"} {
				if p := sum[loc]; p.how != "jump" || p.hits == 0 {
					t.Fatalf("%s: %s went in by %q with %d hits, want jump and hits\n%s", what, loc, p.how, p.hits, rout.String())
				}
			}
		}
		h.mustBeRunning(t, what+", after it")
		if err := codeIntact(h.pid); err != nil {
			h.stopAndWait()
			t.Fatalf("%s: %v", what, err)
		}
		h.finish(t, what)
		times.add(how, time.Since(start))
	}
	times.log(t)
}

// rebuild: one daemon, the program rebuilt at the same path
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

// sigkill: the daemon killed with SIGKILL with its probes in
// a process; put back by the guard, by gprobes recover (the guard killed
// too), or by the next daemon as it starts. First with the probes not yet
// hit, then on the jump route with the 4 threads running through the pads: the
// jumps go back while the threads run (recovery stops every thread
// first), the pads meanwhile run with nobody draining them, and the
// program must finish with its own totals exact and exit 0.
func harmSigkill(t *testing.T, fx harmFixture) {
	probe := harmProbe(t, t.TempDir(), fx.harm)
	ways := []string{"guard", "recover", "next daemon"}
	times := roundTimes{}
	for round := 0; round < harmRounds(21, 3); round++ {
		start := time.Now()
		dir := t.TempDir()
		gate := filepath.Join(dir, "gate")
		cmd := exec.Command(fx.harm, "-t", strconv.Itoa(harmThreads), "-n", strconv.Itoa(harmN), "-g", gate)
		pid, wait := startPrinting(t, cmd)
		sock, d := harmDaemon(t, dir)
		mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", pid), probe)
		if !probesIn(pid) {
			t.Fatal("no probe in the fixture after insert")
		}
		how := ways[round%3]
		killDaemon(t, d, how, pid)
		if probesIn(pid) {
			t.Fatalf("round %d (%s): probe bytes still in the fixture", round, how)
		}
		if err := codeIntact(pid); err != nil {
			t.Fatalf("round %d (%s): %v", round, how, err)
		}
		os.WriteFile(gate, nil, 0o644)
		if code, out := wait(); code != 0 {
			t.Fatalf("sigkill round %d (%s): exit %d\n%s", round, how, code, out)
		}
		times.add("not hit, "+how, time.Since(start))
	}
	for round := 0; round < harmRounds(21, 3); round++ {
		start := time.Now()
		dir := t.TempDir()
		h := startHarmRunning(t, fx.harm, dir)
		sock, d := harmDaemon(t, dir)
		mustRun(t, "insert", "--socket", sock, "--target", fmt.Sprintf("pid:%d", h.pid), probe)
		how := ways[round%3]
		what := fmt.Sprintf("sigkill under load round %d (%s)", round, how)
		openAndWait(t, h.gate, h.started)
		checkJumps(t, sock, fx.harm, what)
		h.mustBeRunning(t, what+", before the kill")
		killDaemon(t, d, how, h.pid)
		h.mustBeRunning(t, what+", after the jumps went back")
		if probesIn(h.pid) {
			h.stopAndWait()
			t.Fatalf("%s: a jump is still in the fixture", what)
		}
		if err := codeIntact(h.pid); err != nil {
			h.stopAndWait()
			t.Fatalf("%s: %v", what, err)
		}
		h.finish(t, what)
		times.add("running, "+how, time.Since(start))
	}
	times.log(t)
}

// killDaemon kills daemon d with SIGKILL (and its guard first unless how
// is "guard") and waits until its probes in process pid went back the way
// how says.
func killDaemon(t *testing.T, d *exec.Cmd, how string, pid int) {
	t.Helper()
	guard := guardOf(t, d.Process.Pid)
	if how != "guard" {
		killDead(t, guard)
	}
	d.Process.Kill()
	d.Wait()
	switch how {
	case "guard":
		waitFor(t, func() bool { return !probesIn(pid) }, "the guard to put the bytes back")
	case "recover":
		// the daemon and its guard are dead: nothing puts the bytes back
		if !probesIn(pid) {
			t.Fatal("the bytes went back with no guard and no recover: the test proves nothing")
		}
		mustRun(t, "recover")
	case "next daemon":
		// it recovers once it listens: the socket answers before
		dir := t.TempDir()
		_, out := daemonProcess(t, filepath.Join(dir, "d.sock"), filepath.Join(dir, "state"))
		for end := time.Now().Add(10 * time.Second); probesIn(pid); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("the next daemon left the probes in for 10 s:\n%s", out)
			}
		}
	}
}

// harmRunning is the fixture of the rounds that act while its threads run
// through the probes: it waits for gate, creates started once its 4
// threads made their first calls, and calls until stop exists.
type harmRunning struct {
	pid                 int
	wait                func() (int, string)
	gate, started, stop string
}

func startHarmRunning(t *testing.T, prog, dir string, wrap ...string) *harmRunning {
	t.Helper()
	h := &harmRunning{gate: filepath.Join(dir, "gate"), started: filepath.Join(dir, "started"), stop: filepath.Join(dir, "stop")}
	args := append(append([]string(nil), wrap...), prog, "-t", strconv.Itoa(harmThreads), "-n", "1000000000000", "-g", h.gate, "-s", h.started, "-e", h.stop)
	h.pid, h.wait = startPrinting(t, exec.Command(args[0], args[1:]...))
	return h
}

// running is how many of the fixture's threads other than main are alive.
func (h *harmRunning) running() int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", h.pid))
	if err != nil {
		return 0
	}
	if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", h.pid)); strings.Contains(string(st), ") Z ") {
		return 0
	}
	return len(ents) - 1
}

// mustBeRunning fails unless the 4 threads are still calling (stop not
// created yet, so only a death ends them).
func (h *harmRunning) mustBeRunning(t *testing.T, what string) {
	t.Helper()
	if n := h.running(); n != harmThreads {
		code, out := h.stopAndWait()
		t.Fatalf("%s: %d of the fixture's %d threads running; it exited %d\n%s", what, n, harmThreads, code, out)
	}
}

// stopAndWait stops the fixture (its gate opened too, were it still
// closed) and returns its exit status and output.
func (h *harmRunning) stopAndWait() (int, string) {
	os.WriteFile(h.stop, nil, 0o644)
	os.WriteFile(h.gate, nil, 0o644)
	return h.wait()
}

// finish lets the threads run a moment on the original code, stops them
// and checks the program's own verdict: exit 0, every count exact.
func (h *harmRunning) finish(t *testing.T, what string) string {
	t.Helper()
	// not a wait: calls on the original code, however many, before the
	// stop; the verdict holds for any number
	time.Sleep(10 * time.Millisecond)
	code, out := h.stopAndWait()
	total, want, ok := harmTotal(out)
	if code != 0 || !ok || total != want || want == 0 {
		t.Fatalf("%s: the program's own check: exit %d\n%s", what, code, out)
	}
	return out
}

// harmTotal parses the fixture's last line, "total T want W ...".
func harmTotal(out string) (total, want int64, ok bool) {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 4 && f[0] == "total" && f[2] == "want" {
			total, err1 := strconv.ParseInt(f[1], 10, 64)
			want, err2 := strconv.ParseInt(f[3], 10, 64)
			return total, want, err1 == nil && err2 == nil
		}
	}
	return 0, 0, false
}

// checkJumps fails unless query says both probes went in on the jump
// route and are being hit.
func checkJumps(t *testing.T, sock, module, what string) {
	t.Helper()
	q := queryProbes(t, sock, module)
	for _, minor := range []uint16{1, 2} {
		if p := q[minor]; p.How != "jump" || p.Hits == 0 {
			t.Fatalf("%s: probe %d went in by %q with %d hits, want jump and hits (%+v)", what, minor, p.How, p.Hits, q)
		}
	}
}

// summaryProbes reads the HOW and HITS columns of run's probe table, by
// location.
func summaryProbes(out, module string) map[string]struct {
	how  string
	hits uint64
} {
	m := map[string]struct {
		how  string
		hits uint64
	}{}
	head := -1
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 7 && f[0] == "TARGET" {
			head = 0
			continue
		}
		if head < 0 || len(f) < 8 || f[1] != module {
			continue
		}
		// HOW other than jump is "int3 CLASS: why": its first word is
		// enough to fail on, the hits are then not read
		p := m[f[3]]
		p.how = f[6]
		p.hits, _ = strconv.ParseUint(f[7], 10, 64)
		m[f[3]] = p
	}
	return m
}

type roundTimes map[string][]time.Duration

func (r roundTimes) add(way string, d time.Duration) { r[way] = append(r[way], d) }

func (r roundTimes) log(t *testing.T) {
	ways := make([]string, 0, len(r))
	for w := range r {
		ways = append(ways, w)
	}
	sort.Strings(ways)
	for _, w := range ways {
		var sum, max time.Duration
		for _, d := range r[w] {
			sum += d
			if d > max {
				max = d
			}
		}
		t.Logf("%s: %d rounds, mean %v, max %v", w, len(r[w]), (sum / time.Duration(len(r[w]))).Round(time.Millisecond), max.Round(time.Millisecond))
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
	// not a wait: more calls, however many, so that the detach comes
	// mid-run (mustBeRunning checks the threads still call, after it)
	time.Sleep(30 * time.Millisecond)
}

// harmCode reads the bytes of f_lock and f_push in process pid and in
// the file it runs (through /proc/PID/exe: the same inode).
func harmCode(pid int) (mem, file map[string][]byte, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, nil, err
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
	if base == 0 {
		return nil, nil, fmt.Errorf("%s is not mapped in %d", exe, pid)
	}
	ef, err := elf.Open(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return nil, nil, err
	}
	defer ef.Close()
	syms, err := ef.Symbols()
	if err != nil {
		return nil, nil, err
	}
	text := ef.Section(".text")
	code, err := text.Data()
	if err != nil {
		return nil, nil, err
	}
	m, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return nil, nil, err
	}
	defer m.Close()
	mem, file = map[string][]byte{}, map[string][]byte{}
	for _, s := range syms {
		if (s.Name != "f_lock" && s.Name != "f_push") || s.Value < text.Addr || s.Value+s.Size > text.Addr+text.Size {
			continue
		}
		file[s.Name] = code[s.Value-text.Addr : s.Value-text.Addr+s.Size]
		mem[s.Name] = make([]byte, s.Size)
		if _, err := m.ReadAt(mem[s.Name], int64(base+s.Value)); err != nil {
			return nil, nil, err
		}
	}
	if len(mem) != 2 {
		return nil, nil, fmt.Errorf("f_lock or f_push not found in %s", exe)
	}
	return mem, file, nil
}

// probesOf reports how many of f_lock and f_push in process pid start
// with gprobes' bytes: an int3 (cc) or a jump to a pad (e9) where the
// program has a lock prefix (f0) and a push (55).
func probesOf(pid int) int {
	mem, _, err := harmCode(pid)
	if err != nil {
		return 0
	}
	n := 0
	for _, b := range mem {
		if b[0] == 0xcc || b[0] == 0xe9 {
			n++
		}
	}
	return n
}

// probesIn reports whether a probe is in f_lock or f_push.
func probesIn(pid int) bool { return probesOf(pid) > 0 }

// allProbesIn reports whether both are.
func allProbesIn(pid int) bool { return probesOf(pid) == 2 }

// codeIntact checks f_lock and f_push are in process pid as in its file,
// every byte (a jump's covered bytes included).
func codeIntact(pid int) error {
	mem, file, err := harmCode(pid)
	if err != nil {
		return err
	}
	for name, b := range mem {
		if !bytes.Equal(b, file[name]) {
			return fmt.Errorf("%s in the process is % x, in its file % x", name, b, file[name])
		}
	}
	return nil
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
	m := map[uint16]uint64{}
	for minor, p := range queryProbes(t, sock, module) {
		m[minor] = p.Hits
	}
	return m
}

// harmQueried is a probe as query --json gives it.
type harmQueried struct {
	Minor uint16
	Hits  uint64
	How   string // jump, or "int3 CLASS: why"
}

// queryProbes returns a module's probes by minor.
func queryProbes(t *testing.T, sock, module string) map[uint16]harmQueried {
	t.Helper()
	var q struct{ Probes []harmQueried }
	out := mustRun(t, "query", "--socket", sock, module, "--json")
	if err := json.Unmarshal([]byte(out), &q); err != nil {
		t.Fatalf("query: %v\n%s", err, out)
	}
	m := map[uint16]harmQueried{}
	for _, p := range q.Probes {
		m[p.Minor] = p
	}
	return m
}

// killDead kills process pid with SIGKILL and waits until it is dead
// (gone, or a zombie: it can do nothing more).
func killDead(t *testing.T, pid int) {
	t.Helper()
	syscall.Kill(pid, syscall.SIGKILL)
	testkit.Wait(t, time.Minute, fmt.Sprintf("process %d to die of SIGKILL", pid), func() (bool, string) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return err != nil || strings.Contains(string(b), ") Z "), string(b)
	})
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
	// the library is unloaded: remove writes nothing
	testkit.Wait(t, time.Minute, "reload to dlclose the library", func() (bool, string) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
		return err == nil && !strings.Contains(string(b), lib), string(b)
	})
	mustRun(t, "remove", "--socket", sock, "--all")
	os.WriteFile(filepath.Join(dir, "end"), nil, 0o644)
	if code, out := wait(); code != 0 {
		t.Fatalf("reload: exit %d\n%s", code, out)
	}
}
