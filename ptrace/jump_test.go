//go:build linux

package ptrace_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/internal/shm"
	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/ptrace"
	"github.com/gprobes/gprobes/rpn"
)

// Jump pads (docs/engine.md) against real processes: testdata/bench/kinds.c,
// whose functions start with the common first instructions, checks its
// own results; the probes count and log two registers.

func kindsFixture(t *testing.T) string {
	t.Helper()
	return testkit.CC(t, "kinds", "-O2", "-pthread", "../testdata/bench/kinds.c", "../testdata/bench/kinds.S")
}

// compileFor builds a module from DPDF text, naming path where it says
// placeholder (PROGRAM unless given).
func compileFor(t *testing.T, path, src string, placeholder ...string) *rpn.Module {
	t.Helper()
	ph := "PROGRAM"
	if len(placeholder) > 0 {
		ph = placeholder[0]
	}
	src = strings.ReplaceAll(src, ph, path)
	f, err := dpdf.ParseSource("test.dpdf", []byte(src), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	m, err := compiler.Compile(f, rpn.CompileOptions{})
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	return m
}

const kindProbe = `name = PROGRAM
modtype = user
vars = 1
offset = k_KIND
inc lv,0
push r,rdi
push r,rsi
log 2
exit 1
`

// Every common first instruction on the jump route, 4 threads: exact
// counts in lv, in query and in the records (with what the ring dropped),
// the logged registers right, the program's own results intact.
func TestJumpKinds(t *testing.T) {
	kinds := kindsFixture(t)
	const calls, threads = 20000, 4
	for _, kind := range []string{"rip", "lock", "push", "endbr", "call"} {
		t.Run(kind, func(t *testing.T) {
			r := startWith(t, startConfig{path: kinds}, fmt.Sprint(calls), fmt.Sprint(threads), kind)
			infos := r.insert(compileFor(t, kinds, strings.ReplaceAll(kindProbe, "KIND", kind)))
			if p := infos[0]; p.State != engine.StateActive || p.How != "jump" {
				t.Fatalf("probe %s: %s, how %q: %s", p.Location, p.State, p.How, p.Reason)
			}
			r.eng.Release()
			lines := r.finish()
			if !strings.Contains(strings.Join(lines, "\n"), "bad 0") {
				t.Errorf("the program's own check failed: %q", lines)
			}
			lv, _, err := r.eng.Vars(kinds, false)
			if err != nil {
				t.Fatal(err)
			}
			if lv[0] != calls*threads {
				t.Errorf("lv 0 = %d, want %d", lv[0], calls*threads)
			}
			q := r.eng.Query()[0]
			if q.Hits != calls*threads {
				t.Errorf("query: %d hits, want %d", q.Hits, calls*threads)
			}
			recs := r.records(0)
			if uint64(len(recs))+q.Lost != calls*threads {
				t.Errorf("%d records + %d lost, want %d", len(recs), q.Lost, calls*threads)
			}
			seen := map[uint64]int{}
			tids := map[int]bool{}
			for _, rec := range recs {
				if len(rec.Data) != 16 {
					t.Fatalf("record of %d bytes: %+v", len(rec.Data), rec)
				}
				a, b := binary.LittleEndian.Uint64(rec.Data), binary.LittleEndian.Uint64(rec.Data[8:])
				if b != 7 || a >= calls {
					t.Fatalf("logged rdi %d rsi %d: not what the program passed", a, b)
				}
				seen[a]++
				tids[rec.Tid] = true
				if rec.Pid != r.eng.Pid() || rec.Kind != "log" || rec.Time.IsZero() {
					t.Fatalf("record %+v", rec)
				}
			}
			if q.Lost == 0 {
				for i := uint64(0); i < calls; i++ {
					if seen[i] != threads {
						t.Fatalf("rdi %d logged %d times, want %d", i, seen[i], threads)
					}
				}
			}
			if q.Lost == 0 && len(tids) != threads {
				t.Errorf("records from %d threads, want %d", len(tids), threads)
			}
			t.Logf("%d records, %d lost", len(recs), q.Lost)
		})
	}
}

// Faults on the jump route: a probe's read through a bad pointer is an
// invalid-address record and the process never sees it; a good read
// logs; the first covered instruction faulting (f_load on a NULL string)
// reaches the program's own SIGSEGV handler at the original address,
// which recovers, and the hit's record is dropped as on the int3 route.
func TestJumpFaults(t *testing.T) {
	needFixture(t)
	r := startWith(t, startConfig{path: fixture.hits}, "-n", "100", "-x", "4")
	infos := r.insert(compile(t, `name = FIXTURE
modtype = user
offset = f_load
minor = 1
push r,rdi
log 1
exit 1
offset = f_push
minor = 2
push r,rdi
push mrf,8
log 1
exit 1
offset = f_push
minor = 3
push r,rsp
push mrf,8
log 1
exit 1
`))
	for _, p := range infos {
		if p.How != "jump" {
			t.Fatalf("probe %s minor %d: how %q (%s)", p.Location, p.Minor, p.How, p.Reason)
		}
	}
	r.eng.Release()
	lines := r.finish()
	out := strings.Join(lines, "\n")
	if !strings.Contains(out, "faults 4 recovered 4") {
		t.Fatalf("the program did not recover from its own faults: %v", lines)
	}
	if got, want := checksums(lines), checksums(unprobed(t, "-n", "100")); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("probed output %v, unprobed %v", got, want)
	}
	// work() calls f_load twice a round (once through f_icall) and
	// f_push twice (once through f_call)
	if n := len(r.records(1)); n != 200 {
		t.Errorf("%d records at f_load, want 200 (the 4 faulting calls' records dropped)", n)
	}
	bad := r.records(2)
	if len(bad) != 200 {
		t.Fatalf("%d records of the bad read, want 200", len(bad))
	}
	for _, rec := range bad {
		if rec.Kind != "exception" || rec.Exception != "invalid-address" || rec.Line == "" {
			t.Fatalf("bad read: %+v, want an invalid-address exception with its line", rec)
		}
	}
	good := r.records(3)
	if len(good) != 200 {
		t.Fatalf("%d records of the good read, want 200", len(good))
	}
	for _, rec := range good {
		if rec.Kind != "log" || len(rec.Data) != 8 || binary.LittleEndian.Uint64(rec.Data) == 0 {
			t.Fatalf("good read: %+v", rec)
		}
	}
	for _, q := range r.eng.Query() {
		want := uint64(200)
		if q.Minor == 1 {
			want = 204
		}
		if q.Hits != want {
			t.Errorf("query: minor %d has %d hits, want %d", q.Minor, q.Hits, want)
		}
		if q.Minor == 2 && q.Faults != 200 {
			t.Errorf("query: minor 2 has %d faults, want 200", q.Faults)
		}
	}
}

// Signals on the jump route: a 100 us timer fires while threads run
// through pads; a signal that comes inside a pad waits until the thread
// leaves it, then arrives with its own siginfo; every count is exact and
// the program computes what it computes unprobed.
func TestJumpSignals(t *testing.T) {
	needFixture(t)
	hc := &holdCounter{}
	r := startWith(t, startConfig{path: fixture.hits, wrap: func(tg engine.Target) engine.Target {
		hc.Target = tg.(*ptrace.Target)
		return hc
	}}, "-n", "20000", "-a", "100")
	infos := r.insert(compile(t, `name = FIXTURE
modtype = user
vars = 4
offset = f_push
inc lv,0
push r,rdi
log 1
exit 1
offset = f_rip
inc lv,1
exit 0
offset = f_call
inc lv,2
exit 0
offset = f_step
inc lv,3
exit 0
`))
	for _, p := range infos {
		if p.How != "jump" {
			t.Fatalf("probe %s: how %q (%s)", p.Location, p.How, p.Reason)
		}
	}
	r.eng.Release()
	lines := r.finish()
	lv, _, _ := r.eng.Vars(fixture.hits, false)
	// f_push is called by f_call too
	for i, want := range []uint64{40000, 20000, 20000, 20000} {
		if lv[i] != want {
			t.Errorf("lv %d = %d, want %d", i, lv[i], want)
		}
	}
	if got, want := checksums(lines), checksums(unprobed(t, "-n", "20000")); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("output %v, unprobed %v", got, want)
	}
	var alarms, tkill int
	for _, l := range lines {
		fmt.Sscanf(l, "alarms %d tkill %d", &alarms, &tkill)
	}
	t.Logf("%d alarms, %d held inside a pad", alarms, hc.held.Load())
	if alarms == 0 {
		t.Fatal("no alarm fired: the test proves nothing")
	}
	if tkill != 0 {
		t.Errorf("%d of %d alarms reached the handler with the resent signal's siginfo", tkill, alarms)
	}
	if q := r.eng.Query()[0]; uint64(len(r.records(0)))+q.Lost != 40000 {
		t.Errorf("%d records + %d lost, want 40000", len(r.records(0)), q.Lost)
	}
}

// fork on the jump route: the child runs the pads it inherited, both
// processes' records come through the ring they share, each with its
// own pid; counts and results are exact in both.
func TestJumpFork(t *testing.T) {
	needFixture(t)
	r := startWith(t, startConfig{path: fixture.hits}, "-n", "300", "-f")
	infos := r.insert(compile(t, `name = FIXTURE
modtype = user
vars = 1
offset = f_rip
inc lv,0
push r,rdi
log 1
exit 1
`))
	if infos[0].How != "jump" {
		t.Fatalf("how %q: %s", infos[0].How, infos[0].Reason)
	}
	r.eng.Release()
	lines := r.finish()
	if got, want := checksums(lines), checksums(unprobed(t, "-n", "300", "-f")); strings.Join(sorted(got), "|") != strings.Join(sorted(want), "|") {
		t.Errorf("output %v, unprobed %v", got, want)
	}
	lv, _, _ := r.eng.Vars(fixture.hits, false)
	if lv[0] != 600 {
		t.Errorf("lv 0 = %d, want 600 (parent and child)", lv[0])
	}
	byPid := map[int]int{}
	for _, rec := range r.records(0) {
		byPid[rec.Pid]++
	}
	var childPid int
	for _, l := range lines {
		var pid int
		if n, _ := fmt.Sscanf(l, "child %d", &pid); n == 1 {
			childPid = pid
		}
	}
	if byPid[r.eng.Pid()] != 300 || byPid[childPid] != 300 || len(byPid) != 2 {
		t.Errorf("records by pid %v, want 300 from %d (parent) and 300 from %d (child)", byPid, r.eng.Pid(), childPid)
	}
}

// The global variables are one memory for every target of a daemon: two
// processes under two engines, their pads and their int3 probes (logonfault
// keeps f_boost's on the int3 route) incrementing the same gv, count
// exactly together.
func TestJumpSharedGV(t *testing.T) {
	needFixture(t)
	gv, err := shm.Create("test-gv", rpn.MaxGVars*8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gv.Close() }) // after the engines' (cleanups run last first)
	var mu sync.Mutex
	const src = `name = FIXTURE
modtype = user
gvars = 1
offset = f_rip
inc gv,0
exit 0
offset = f_boost
logonfault = yes
inc gv,0
exit 0
`
	a := startWith(t, startConfig{path: fixture.hits, gv: gv, gvMu: &mu}, "-n", "5000")
	b := startWith(t, startConfig{path: fixture.hits, gv: gv, gvMu: &mu}, "-n", "7000")
	ia, ib := a.insert(compile(t, src)), b.insert(compile(t, src))
	if ia[0].How != "jump" || ib[0].How != "jump" || ia[1].How == "jump" {
		t.Fatalf("routes: %q %q %q (want jump, jump, and int3 for f_boost, logonfault)", ia[0].How, ib[0].How, ia[1].How)
	}
	a.eng.Release()
	b.eng.Release()
	a.finish()
	b.finish()
	_, g, _ := a.eng.Vars(fixture.hits, false)
	if want := uint64(2 * (5000 + 7000)); g[0] != want {
		t.Errorf("gv 0 = %d, want %d: f_rip and f_boost of both processes", g[0], want)
	}
}

// System values in a pad are the int3 route's: pid, tid, procid (the
// thread's index, as the record's cpu), ts (the hit's time, as the
// record's), fs_base; 4 threads.
func TestJumpSystemValues(t *testing.T) {
	needFixture(t)
	before := time.Now()
	r := startWith(t, startConfig{path: fixture.hits}, "-n", "50", "-t", "4")
	infos := r.insert(compile(t, `name = FIXTURE
modtype = user
offset = f_rip
push pid
push tid
push procid
push ts
push r,fs_base
log 5
exit 1
`))
	if infos[0].How != "jump" {
		t.Fatalf("how %q: %s", infos[0].How, infos[0].Reason)
	}
	r.eng.Release()
	r.finish()
	after := time.Now()
	recs := r.records(0)
	if len(recs) != 200 {
		t.Fatalf("%d records, want 200", len(recs))
	}
	tids := map[int]bool{}
	for _, rec := range recs {
		w := func(i int) uint64 { return binary.LittleEndian.Uint64(rec.Data[8*i:]) }
		if int(w(0)) != r.eng.Pid() || int(w(1)) != rec.Tid || int(w(2)) != rec.CPU || w(4) == 0 {
			t.Fatalf("pid %d tid %d procid %d fs_base %#x; record pid %d tid %d cpu %d", w(0), w(1), w(2), w(4), rec.Pid, rec.Tid, rec.CPU)
		}
		ts := time.Unix(0, int64(w(3)))
		if ts.Before(before) || ts.After(after) || ts.Sub(rec.Time).Abs() > time.Microsecond {
			t.Fatalf("push ts %v, record time %v, run from %v to %v", ts, rec.Time, before, after)
		}
		tids[rec.Tid] = true
	}
	if len(tids) != 4 {
		t.Errorf("records from %d threads, want 4", len(tids))
	}
}

// A probe inside the bytes another probe's jump covers moves that one to
// an int3 (an int3 in the middle of a jump would break it): both count
// exactly, and the program computes what it computes unprobed.
func TestJumpInsideJump(t *testing.T) {
	needFixture(t)
	r := startWith(t, startConfig{path: fixture.hits}, "-n", "1000")
	infos := r.insert(compile(t, `name = FIXTURE
modtype = user
vars = 2
offset = f_push
minor = 1
inc lv,0
exit 0
offset = f_push+1
minor = 2
inc lv,1
exit 0
`))
	q := r.eng.Query()
	if infos[1].State != engine.StateActive || !strings.HasPrefix(q[0].How, "int3") {
		t.Fatalf("f_push: %q, f_push+1: %s %q (%s): want the first moved to an int3", q[0].How, infos[1].State, infos[1].How, infos[1].Reason)
	}
	r.eng.Release()
	lines := r.finish()
	if got, want := checksums(lines), checksums(unprobed(t, "-n", "1000")); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("output %v, unprobed %v", got, want)
	}
	lv, _, _ := r.eng.Vars(fixture.hits, false)
	// f_push is called by f_call too: 2 calls a round
	if lv[0] != 2000 || lv[1] != 2000 {
		t.Errorf("lv %v, want 2000 each", lv)
	}
	t.Logf("f_push: %s; f_push+1: %s", q[0].How, q[1].How)
}

// vfork on the jump route: the child shares the parent's memory, pads and
// thread control block; its hits count and its records carry its own pid
// (the pads ask the kernel for thread ids while it lives).
func TestJumpVfork(t *testing.T) {
	prog := testkit.CC(t, "vfork", "-O2", "../testdata/jump/vfork.c")
	r := startWith(t, startConfig{path: prog}, "1000")
	infos := r.insert(compileFor(t, prog, "name = PROGRAM\nmodtype = user\nvars = 1\noffset = probed\ninc lv,0\npush r,rdi\nlog 1\nexit 1\n"))
	if infos[0].How != "jump" {
		t.Fatalf("how %q: %s", infos[0].How, infos[0].Reason)
	}
	r.eng.Release()
	lines := r.finish()
	var parent, child, bad, status int
	for _, l := range lines {
		fmt.Sscanf(l, "parent %d child %d bad %d status %d", &parent, &child, &bad, &status)
	}
	if parent == 0 || child == 0 || bad != 0 || status != 0 {
		t.Fatalf("the program: %q", lines)
	}
	lv, _, _ := r.eng.Vars(prog, false)
	if lv[0] != 3000 {
		t.Errorf("lv 0 = %d, want 3000", lv[0])
	}
	byPid := map[int]int{}
	for _, rec := range r.records(0) {
		byPid[rec.Pid]++
	}
	if byPid[parent] != 2000 || byPid[child] != 1000 {
		t.Errorf("records by pid %v, want 2000 of %d (parent), 1000 of %d (vfork child)", byPid, parent, child)
	}
}

// Insert and remove 20 times while 4 threads run through the pads
// (testdata/harm: a lock add and a push, counted by the program itself):
// every removal puts the original code back while threads may be inside a
// pad (pads are never freed), the program's totals stay exact, and the
// probes count while in.
func TestJumpRemoveUnderLoad(t *testing.T) {
	harm := testkit.CC(t, "harm", "-O1", "-pthread", "../testdata/harm/harm.c", "../testdata/harm/funcs.S")
	dir := t.TempDir()
	started, stop := dir+"/started", dir+"/stop"
	r := startWith(t, startConfig{path: harm}, "-t", "4", "-n", "1000000000", "-s", started, "-e", stop)
	r.eng.Release()
	testkit.WaitTrue(t, time.Minute, "the fixture's threads to start", func() bool { return exists(started) })
	src := "name = PROGRAM\nmodtype = user\nvars = 2\noffset = f_lock\nminor = 1\ninc lv,0\nexit 0\noffset = f_push\nminor = 2\ninc lv,1\npush r,rdi\nlog 1\nexit 1\n"
	for round := 0; round < 20; round++ {
		infos, err := r.eng.Insert(compileFor(t, harm, src), engine.InsertNew)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for _, p := range infos {
			if p.How != "jump" {
				t.Fatalf("round %d: %s: how %q (%s)", round, p.Location, p.How, p.Reason)
			}
		}
		// the probes count while in: both, while the threads run
		testkit.Wait(t, time.Minute, fmt.Sprintf("round %d: hits of both probes while in", round), func() (bool, string) {
			q := r.eng.Query()
			return q[0].Hits > 0 && q[1].Hits > 0, fmt.Sprintf("%+v", q)
		})
		if n, err := r.eng.Remove(harm, nil); err != nil || n != 2 {
			t.Fatalf("round %d: remove: %d %v", round, n, err)
		}
	}
	os.WriteFile(stop, nil, 0o644)
	lines := r.finish()
	if !strings.Contains(strings.Join(lines, "\n"), "total") {
		t.Fatalf("the program's output: %q", lines)
	}
	t.Logf("%s", lines[len(lines)-1])
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
