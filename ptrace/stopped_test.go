//go:build linux

package ptrace_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/ptrace"
)

// stoppedFixture is testdata/harm running on its own (4 threads calling
// f_lock, which adds 1 to the global total, and f_push), built without
// PIE so that total's address is its symbol's.
type stoppedFixture struct {
	t          *testing.T
	cmd        *exec.Cmd
	pid        int
	out        *bytes.Buffer
	stop       string
	totalAt    uint64
	prog       string
	terminated bool
}

// stoppedProgram builds the fixture and finds its count's address.
func stoppedProgram(t *testing.T) (prog string, totalAt uint64) {
	t.Helper()
	prog = testkit.CC(t, "harm-nopie", "-O1", "-no-pie", "-pthread", "../testdata/harm/harm.c", "../testdata/harm/funcs.S")
	f, err := elf.Open(prog)
	if err != nil {
		t.Fatal(err)
	}
	syms, _ := f.Symbols()
	f.Close()
	for _, s := range syms {
		if s.Name == "total" {
			totalAt = s.Value
		}
	}
	if totalAt == 0 {
		t.Fatalf("%s has no symbol total", prog)
	}
	return prog, totalAt
}

func startStoppedFixture(t *testing.T) *stoppedFixture {
	t.Helper()
	prog, totalAt := stoppedProgram(t)
	h := &stoppedFixture{t: t, prog: prog, out: &bytes.Buffer{}, totalAt: totalAt}
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	h.stop = filepath.Join(dir, "stop")
	h.cmd = exec.Command(prog, "-t", "4", "-n", "1000000000000", "-s", started, "-e", h.stop)
	h.cmd.Stdout, h.cmd.Stderr = h.out, h.out
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h.pid = h.cmd.Process.Pid
	t.Cleanup(func() {
		if !h.terminated {
			h.cmd.Process.Kill()
			h.cmd.Wait()
		}
	})
	testkit.WaitTrue(t, time.Minute, "the fixture's threads calling", func() bool { return exists(started) })
	return h
}

// total reads the fixture's count of f_lock calls.
func (h *stoppedFixture) total() uint64 {
	h.t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", h.pid))
	if err != nil && h.cmd == nil {
		h.t.Fatalf("the fixture's memory: %v", err)
	}
	if err != nil {
		// gone: say how it ended and what it printed
		ended := make(chan error, 1)
		go func() { ended <- h.cmd.Wait() }()
		select {
		case werr := <-ended:
			h.terminated = true
			h.t.Fatalf("the fixture is gone (%v): %v, %v; its output: %q", err, werr, h.cmd.ProcessState, h.out.String())
		case <-time.After(10 * time.Second):
			h.t.Fatalf("the fixture's memory: %v (and it has not ended); its output so far: %q", err, h.out.String())
		}
	}
	defer f.Close()
	var b [8]byte
	if _, err := f.ReadAt(b[:], int64(h.totalAt)); err != nil {
		h.t.Fatal(err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

// states returns the state letter of each thread (/proc/PID/task/*/stat).
func (h *stoppedFixture) states() string {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", h.pid))
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", h.pid, e.Name()))
		if err != nil {
			continue
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
			out = append(out, s[i+2:i+3])
		}
	}
	return strings.Join(out, "")
}

// allStopped waits until every thread is in a job-control stop (T).
func (h *stoppedFixture) allStopped(what string) {
	h.t.Helper()
	testkit.Wait(h.t, time.Minute, what, func() (bool, string) {
		s := h.states()
		return len(s) == 5 && strings.Count(s, "T") == 5, "thread states " + s
	})
}

// finish lets the fixture stop calling and checks its own verdict.
func (h *stoppedFixture) finish() {
	h.t.Helper()
	os.WriteFile(h.stop, nil, 0o644)
	err := h.cmd.Wait()
	h.terminated = true
	out := h.out.String()
	var total, want int
	if i := strings.LastIndex(out, "total"); i >= 0 {
		fmt.Sscanf(out[i:], "total %d want %d", &total, &want)
	}
	if err != nil || total != want || want == 0 {
		h.t.Fatalf("the fixture: %v: %q", err, out)
	}
}

const stoppedProbes = "name = PROGRAM\nmodtype = user\nvars = 2\noffset = f_lock\nminor = 1\ninc lv,0\nexit 0\noffset = f_push\nminor = 2\ninc lv,1\nexit 0\n"

// A stopped process stays stopped (SIGSTOP from a shell, a debugger's
// stop): attached, probed on the jump route (system calls injected for
// its shared memory and pads), let go, it has not run a single
// instruction of its own — its global count of calls is what it was,
// the probes counted nothing — and after the detach it is still
// stopped; SIGCONT lets it run to its end, exact totals, exit 0. 20
// rounds, 4 threads. Before: the attach resumed it (102 hits were
// once counted while it was "stopped"), and it stopped again at the
// detach.
func TestStoppedStaysStopped(t *testing.T) {
	for round := 0; round < rounds(20); round++ {
		h := startStoppedFixture(t)
		syscall.Kill(h.pid, syscall.SIGSTOP)
		h.allStopped("the fixture stopped by SIGSTOP")
		before := h.total()
		eng, err := engine.Start(ptrace.Attach(h.pid), engine.Options{Warn: func(m string) { t.Log("engine:", m) }})
		if err != nil {
			t.Fatalf("round %d: attach: %v", round, err)
		}
		infos, err := eng.Insert(compileFor(t, h.prog, stoppedProbes), engine.InsertNew)
		if err != nil {
			eng.Close()
			t.Fatalf("round %d: insert: %v", round, err)
		}
		for _, p := range infos {
			if p.State != engine.StateActive || p.How != "jump" {
				eng.Close()
				t.Fatalf("round %d: %s: %s, how %q (%s)", round, p.Location, p.State, p.How, p.Reason)
			}
		}
		eng.Release()
		// a query goes through the engine's loop: it needs a kick that
		// reaches a stopped process
		q := eng.Query()
		fin, err := eng.Close()
		if err != nil {
			t.Fatalf("round %d: detach: %v", round, err)
		}
		h.allStopped("the fixture still stopped after the detach")
		after := h.total()
		var hits uint64
		for _, p := range fin.Probes {
			hits += p.Hits
		}
		if after != before || hits != 0 {
			t.Fatalf("round %d: the stopped process ran: its count went from %d to %d, the probes counted %d (query while attached: %+v)", round, before, after, hits, q)
		}
		syscall.Kill(h.pid, syscall.SIGCONT)
		testkit.Wait(t, time.Minute, "the fixture running again after SIGCONT", func() (bool, string) {
			return h.total() > after, fmt.Sprint(h.total())
		})
		h.finish()
	}
}

// A process stopped while attached stays stopped, with the probes in:
// SIGSTOP stops it (its count and the probes' hits stay put, through the
// insert of another probe), SIGCONT lets it run on and the probes count
// again; removed and let go, it exits 0 with exact totals. 20 rounds, 4
// threads. Before: the engine resumed the group-stop at once, and the
// process never stopped.
func TestStoppedWhileAttached(t *testing.T) {
	for round := 0; round < rounds(20); round++ {
		h := startStoppedFixture(t)
		eng, err := engine.Start(ptrace.Attach(h.pid), engine.Options{Warn: func(m string) { t.Log("engine:", m) }})
		if err != nil {
			t.Fatalf("round %d: attach: %v", round, err)
		}
		infos, err := eng.Insert(compileFor(t, h.prog, stoppedProbes), engine.InsertNew)
		if err != nil || infos[0].How != "jump" {
			eng.Close()
			t.Fatalf("round %d: insert: %v %+v", round, err, infos)
		}
		eng.Release()
		h.stopInsertContinue(eng, round, nil)
		if _, err := eng.Close(); err != nil {
			t.Fatalf("round %d: detach: %v", round, err)
		}
		h.finish()
	}
}

// A program gprobes starts itself (`run -- CMD`, `exec:`) keeps its
// job-control stops as an attached one does: probes in, SIGSTOP stops it
// (its count and the probes' hits stay put, through the insert of
// another probe), SIGCONT lets it run on, and it ends with exact totals,
// exit 0. 20 rounds, 4 threads. Before: it was traced with
// PTRACE_TRACEME, whose group-stops look like signals, and the engine
// resumed it at once (the count went on moving after SIGSTOP).
func TestStoppedStarted(t *testing.T) {
	prog, totalAt := stoppedProgram(t)
	for round := 0; round < rounds(20); round++ {
		dir := t.TempDir()
		started, stop := filepath.Join(dir, "started"), filepath.Join(dir, "stop")
		outf, err := os.Create(filepath.Join(dir, "out"))
		if err != nil {
			t.Fatal(err)
		}
		exit := make(chan int, 1)
		var pid atomic.Int64
		argv := []string{prog, "-t", "4", "-n", "1000000000000", "-s", started, "-e", stop}
		eng, err := engine.Start(ptrace.Exec(prog, argv, os.Environ(), "", nil, outf, outf), engine.Options{
			OnExit: func(space int, how string, code int) {
				if int64(space) == pid.Load() {
					exit <- code
				}
			},
			Warn: func(m string) { t.Log("engine:", m) },
		})
		outf.Close()
		if err != nil {
			t.Fatalf("round %d: start: %v", round, err)
		}
		pid.Store(int64(eng.Pid()))
		h := &stoppedFixture{t: t, prog: prog, pid: eng.Pid(), totalAt: totalAt}
		if infos, err := eng.Insert(compileFor(t, prog, stoppedProbes), engine.InsertNew); err != nil || infos[0].State != engine.StateActive {
			eng.Close()
			t.Fatalf("round %d: insert: %v %+v", round, err, infos)
		}
		eng.Release()
		h.stopInsertContinue(eng, round, func() bool { return exists(started) })
		// it ends while traced: gprobes' child dies with the thread that
		// started it
		os.WriteFile(stop, nil, 0o644)
		var code int
		select {
		case code = <-exit:
		case <-time.After(2 * time.Minute):
			eng.Close()
			t.Fatalf("round %d: the fixture did not end within 2 minutes of its stop file", round)
		}
		eng.Close()
		out, _ := os.ReadFile(filepath.Join(dir, "out"))
		var total, want int
		if i := strings.LastIndex(string(out), "total"); i >= 0 {
			fmt.Sscanf(string(out[i:]), "total %d want %d", &total, &want)
		}
		if code != 0 || total != want || want == 0 {
			t.Fatalf("round %d: the fixture: exit %d: %q", round, code, out)
		}
	}
}

// stopInsertContinue is the middle of a round with the probes in and the
// fixture running (once ready says its threads call, if given): hits
// come; SIGSTOP stops every thread and the count stays put (sampled over
// 20 ms, not a timing bound); a probe more goes in while it is stopped
// and neither the count nor the hits move; SIGCONT makes both move again.
func (h *stoppedFixture) stopInsertContinue(eng *engine.Engine, round int, ready func() bool) {
	t := h.t
	t.Helper()
	if ready != nil {
		testkit.WaitTrue(t, time.Minute, "the fixture's threads calling", ready)
	}
	hits := func() uint64 {
		var n uint64
		for _, p := range eng.Query() {
			n += p.Hits
		}
		return n
	}
	testkit.Wait(t, time.Minute, "hits", func() (bool, string) { return hits() > 0, "" })
	syscall.Kill(h.pid, syscall.SIGSTOP)
	var last uint64
	testkit.Wait(t, time.Minute, "the fixture stopped by SIGSTOP", func() (bool, string) {
		a := h.total()
		time.Sleep(20 * time.Millisecond)
		b := h.total()
		last = b
		st := h.states()
		return a == b && len(st) == 5 && strings.Trim(st, "tT") == "", fmt.Sprintf("count %d then %d, thread states %s", a, b, st)
	})
	hitsStopped := hits()
	// more probes go in while it is stopped: it does not run
	more := strings.Replace(stoppedProbes, "minor = 1\n", "minor = 3\n", 1)
	more = strings.Replace(more, "offset = f_push\nminor = 2\ninc lv,1\nexit 0\n", "", 1)
	if infos, err := eng.Insert(compileFor(t, h.prog, more), engine.InsertMerge); err != nil || len(infos) == 0 || infos[0].State != engine.StateActive {
		eng.Close()
		t.Fatalf("round %d: insert while stopped: %v %+v", round, err, infos)
	}
	if now, hn := h.total(), hits(); now != last || hn != hitsStopped {
		eng.Close()
		t.Fatalf("round %d: the stopped process ran: count %d -> %d, hits %d -> %d", round, last, now, hitsStopped, hn)
	}
	syscall.Kill(h.pid, syscall.SIGCONT)
	testkit.Wait(t, time.Minute, "hits again after SIGCONT", func() (bool, string) {
		n := hits()
		return n > hitsStopped && h.total() > last, fmt.Sprint(n)
	})
}

// rounds is n, or 2 with -short (the race detector's run).
func rounds(n int) int {
	if testing.Short() {
		return 2
	}
	return n
}
