//go:build linux

package ptrace_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/internal/testkit"
)

// The jump route never harms its target (docs/engine.md, "Never harm the
// target"): testdata/padsafe/storm.c, whose threads call functions
// whose covered bytes hold a call (f_call, h_call) or a red-zone store
// (f_leaf), under signal storms, and check their own results.

func stormFixture(t *testing.T) string {
	t.Helper()
	return testkit.CC(t, "storm", "-O2", "-g", "-fcf-protection=none", "-pthread", "-Wl,-z,now",
		"../testdata/padsafe/storm.c", "../testdata/padsafe/storm.S")
}

// stormProbes counts each probed function in its own variable; f_call's
// and h_call's probes log (a record to commit after the covered call),
// the others only count.
const stormProbes = `name = PROGRAM
modtype = user
vars = 3
offset = f_call
minor = 1
inc lv,0
push r,rdi
log 1
exit 1
offset = h_call
minor = 2
inc lv,1
push r,rdi
log 1
exit 1
offset = f_leaf
minor = 3
inc lv,2
exit 0
`

// stormResult is storm's last line.
type stormResult struct {
	calls, bad, alarms, rtGot, rtSent, tscOwn, tscFaults, foreign, deep, alt, altBad int64
	line                                                                             string
}

func parseStorm(lines []string) (stormResult, bool) {
	for _, l := range lines {
		var s stormResult
		n, _ := fmt.Sscanf(l, "calls %d bad %d alarms %d rt %d/%d tsc %d/%d foreign %d deep %d alt %d altbad %d",
			&s.calls, &s.bad, &s.alarms, &s.rtGot, &s.rtSent, &s.tscOwn, &s.tscFaults, &s.foreign, &s.deep, &s.alt, &s.altBad)
		if n == 11 {
			s.line = l
			return s, true
		}
	}
	return stormResult{}, false
}

// symbolBytes reads the first n bytes of a function of an ELF file.
func symbolBytes(t *testing.T, path, name string, n int) []byte {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name != name {
			continue
		}
		sec := f.Sections[s.Section]
		b := make([]byte, n)
		if _, err := sec.ReadAt(b, int64(s.Value-sec.Addr)); err != nil {
			t.Fatal(err)
		}
		return b
	}
	t.Fatalf("%s: no symbol %s", path, name)
	return nil
}

// checkStormProbes fails unless every probe went in on the jump route.
func checkStormProbes(t *testing.T, infos []engine.ProbeInfo) {
	t.Helper()
	for _, p := range infos {
		if p.State != engine.StateActive || p.How != "jump" {
			t.Fatalf("probe %s (minor %d): %s, how %q: %s", p.Location, p.Minor, p.State, p.How, p.Reason)
		}
	}
}

// A signal that stops a thread anywhere in a pad, the relocated call of
// its last covered instruction included (push of the return address, then
// the jump), lets the thread go on exactly: every call runs once, each
// probe counts every call. 20 rounds, 4 threads, each with a timer
// firing at 20 kHz at it (SIGEV_THREAD_ID). Before: the call ran twice,
// or returned to half an address, in most rounds.
func TestPadCallSignals(t *testing.T) {
	prog := stormFixture(t)
	// the covered bytes hold a call in each: f_call begins with one,
	// h_call is gcc's code for return g_count(x) + 1 (a call, or sub
	// $8,%rsp then a call)
	if b := symbolBytes(t, prog, "h_call", 5); b[0] != 0xe8 && !(bytes.Equal(b[:4], []byte{0x48, 0x83, 0xec, 0x08}) && b[4] == 0xe8) {
		t.Fatalf("h_call begins % x, not a call: the test would not cover one", b)
	}
	rounds := 20
	if testing.Short() {
		rounds = 3
	}
	var alarms int64
	for round := 0; round < rounds; round++ {
		r := startWith(t, startConfig{path: prog}, "-t", "4", "-n", "10000", "-r", "20000")
		checkStormProbes(t, r.insert(compileFor(t, prog, stormProbes)))
		r.eng.Release()
		lines := r.finish()
		s, ok := parseStorm(lines)
		if !ok || s.bad != 0 || s.calls != 4*10000 {
			t.Fatalf("round %d: the program's own check: %q", round, lines)
		}
		lv, _, err := r.eng.Vars(prog, false)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range lv[:3] {
			if v != uint64(s.calls) {
				t.Fatalf("round %d: lv %d = %d, want %d (%s)", round, i, v, s.calls, s.line)
			}
		}
		alarms += s.alarms
	}
	t.Logf("%d rounds, %d alarms taken", rounds, alarms)
	if alarms == 0 {
		t.Fatal("no alarm fired: the test proves nothing")
	}
}

// In a pid namespace the records and push pid/push tid carry the ids
// gprobes reports everywhere else (the root namespace's), not the
// namespace's own (pid 1). 20 rounds, 4 threads, each under a 20 kHz
// timer. Before: every record said pid 0.
func TestPadPidNamespace(t *testing.T) {
	prog := stormFixture(t)
	unshare := testkit.Tool(t, "unshare")
	if out, err := exec.Command(unshare, "--pid", "--fork", "true").CombinedOutput(); err != nil {
		testkit.SkipOrFail(t, "unshare --pid: %v: %s", err, out)
	}
	for round := 0; round < rounds(20); round++ {
		padPidNamespace(t, prog, unshare)
	}
}

func padPidNamespace(t *testing.T, prog, unshare string) {
	dir := t.TempDir()
	started, stop := dir+"/started", dir+"/stop"
	r := startWith(t, startConfig{path: unshare}, "--pid", "--fork", prog, "-t", "4", "-n", "1000000000", "-r", "20000", "-s", started, "-e", stop)
	infos := r.insert(compileFor(t, prog, `name = PROGRAM
modtype = user
offset = f_call
push pid
push tid
log 2
exit 1
`))
	r.eng.Release()
	testkit.WaitTrue(t, time.Minute, "the fixture's threads to start", func() bool { return exists(started) })
	if q := r.eng.Query(); len(q) != 1 || q[0].How != "jump" {
		t.Fatalf("probe: %+v (inserted %+v)", q, infos)
	}
	var recs []engine.Record
	for end := time.Now().Add(30 * time.Second); len(recs) < 100; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d records in 30 s", len(recs))
		}
		recs = r.records(0)
	}
	// while it runs: each record's pid is a process in a child namespace
	// (NSpid: root id, then its own), its tid one of that process's tasks
	nspid := func(id string) []string {
		st, err := os.ReadFile("/proc/" + id + "/status")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(st), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && k == "NSpid" {
				return strings.Fields(v)
			}
		}
		t.Fatalf("no NSpid in /proc/%s/status", id)
		return nil
	}
	pids := map[int]bool{}
	for _, rec := range recs[:100] {
		pid, tid := rec.Pid, rec.Tid
		w0, w1 := binary.LittleEndian.Uint64(rec.Data), binary.LittleEndian.Uint64(rec.Data[8:])
		if int(w0) != pid || int(w1) != tid {
			t.Fatalf("push pid %d, push tid %d; the record's pid %d tid %d", w0, w1, pid, tid)
		}
		if ns := nspid(strconv.Itoa(pid)); len(ns) != 2 || ns[0] != strconv.Itoa(pid) || ns[1] != "1" {
			t.Fatalf("record pid %d: NSpid %v, want [%d 1]", pid, ns, pid)
		}
		if ns := nspid(fmt.Sprintf("%d/task/%d", pid, tid)); len(ns) != 2 || ns[0] != strconv.Itoa(tid) {
			t.Fatalf("record tid %d: NSpid %v", tid, ns)
		}
		pids[pid] = true
	}
	os.WriteFile(stop, nil, 0o644)
	lines := r.finish()
	if s, ok := parseStorm(lines); !ok || s.bad != 0 || s.alarms == 0 {
		t.Fatalf("the program's own check (and alarms taken): %q", lines)
	}
}

// A pad's state is not on the thread's stack: a thread with a 16 KiB
// stack calls a probed function with about 1 KiB left, and from a
// handler on a 4 KiB alternate stack; the bytes below the alternate stack
// stay as they were, and nothing is written below the probed function's
// rsp further than its red zone and a few words. 20 rounds (one thread:
// a timer's signal frames would not fit its stack, probed or not).
// Before: SIGSEGV (a pad took 2.7 KiB below the rsp).
func TestPadStack(t *testing.T) {
	prog := stormFixture(t)
	for round := 0; round < rounds(20); round++ {
		padStack(t, prog)
	}
}

func padStack(t *testing.T, prog string) {
	r := startWith(t, startConfig{path: prog}, "-t", "1", "-n", "20000", "-S")
	checkStormProbes(t, r.insert(compileFor(t, prog, stormProbes)))
	r.eng.Release()
	lines := r.finish()
	s, ok := parseStorm(lines)
	if !ok || s.bad != 0 || s.altBad != 0 {
		t.Fatalf("the program's own check: %q", lines)
	}
	// f_leaf writes 16 bytes below its rsp itself
	const most = 128 + 4*8
	if s.deep > most {
		t.Errorf("something wrote %d bytes below f_leaf's rsp, more than its red zone and 4 words (%d)", s.deep, most)
	}
	lv, _, _ := r.eng.Vars(prog, false)
	// the 16 KiB thread: 1 + 20000 calls, and 100 from each of 1000 handlers
	if want := uint64(s.calls + 1 + 20000 + 1000*100); lv[2] != want {
		t.Errorf("f_leaf counted %d, want %d", lv[2], want)
	}
}

// A process that traps rdtsc (PR_SET_TSC, PR_TSC_SIGSEGV, as record and
// replay tools set) and emulates its own in a SIGSEGV handler sees only
// its own faults: the first pad rdtsc to fault (the pad's own, for a
// record's time; or push ts's, in the compiled program) is turned into a
// clock_gettime system call by gprobes, and no pad of the process runs
// rdtsc again; the records and push ts still carry the time. 20 rounds
// of each, 4 threads, each under a 20 kHz timer. Before: the pad's rdtsc
// reached the program's handler as a fault it did not make.
func TestPadTrappedTSC(t *testing.T) {
	prog := stormFixture(t)
	for round := 0; round < rounds(20); round++ {
		for _, probe := range []string{"push r,rdi", "push ts"} {
			padTrappedTSC(t, prog, probe)
		}
	}
}

func padTrappedTSC(t *testing.T, prog, probe string) {
	before := time.Now()
	r := startWith(t, startConfig{path: prog}, "-t", "4", "-n", "5000", "-r", "20000", "-T")
	checkStormProbes(t, r.insert(compileFor(t, prog, "name = PROGRAM\nmodtype = user\nvars = 1\noffset = f_call\ninc lv,0\n"+probe+"\nlog 1\nexit 1\n")))
	r.eng.Release()
	lines := r.finish()
	after := time.Now()
	s, ok := parseStorm(lines)
	if !ok || s.bad != 0 || s.foreign != 0 || s.tscOwn == 0 || s.tscOwn != s.tscFaults || s.alarms == 0 {
		t.Fatalf("%s: the program's own check: %q", probe, lines)
	}
	recs := r.records(0)
	q := r.eng.Query()[0]
	if uint64(len(recs))+q.Lost != uint64(s.calls) {
		t.Fatalf("%s: %d records + %d lost, want %d", probe, len(recs), q.Lost, s.calls)
	}
	for _, rec := range recs {
		if rec.Time.Before(before) || rec.Time.After(after) {
			t.Fatalf("%s: record time %v: not within the run (%v to %v)", probe, rec.Time, before, after)
		}
		if probe != "push ts" {
			continue
		}
		if ts := time.Unix(0, int64(binary.LittleEndian.Uint64(rec.Data))); !ts.Equal(rec.Time) {
			t.Fatalf("push ts %v, record time %v: the hit's time read twice", ts, rec.Time)
		}
	}
}
