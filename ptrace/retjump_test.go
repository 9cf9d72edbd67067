//go:build linux

package ptrace_test

import (
	"debug/elf"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/ptrace"
)

// Return probes on jump pads (engine/retjump.go): a return probe that
// needs no call tracked runs in pads at its function's rets, with the
// registers the int3 route's emulated ret gives it.

// retViewEntry logs rec's depth (rdi) and rsp at its
// entry (a jump pad of its own); retViewRet logs rax, rip and rsp at
// rec's returns (no instance variable: no call tracked).
const retViewEntry = "name = PROGRAM\nmodtype = user\noffset = rec\nminor = 1\npush r,rdi\npush r,rsp\nlog 2\nexit 1\n"
const retViewRet = "name = PROGRAM\nmodtype = user\nretprobe = rec\nminor = 2\npush r,rax\npush r,rip\npush r,rsp\nlog 3\nexit 1\n"

// retView is one return as the probe saw it, relative to the run: the
// return value, rip from rec's address, rsp from the entry's of the same
// depth.
type retView struct {
	rax, ripOff, rspOff uint64
}

// retViews runs rec N D on a route and returns what the return probe
// saw, with its HOW and hit count.
func retViews(t *testing.T, bin, route string, n, d int) (map[retView]int, string, uint64) {
	r := startWith(t, startConfig{path: bin, route: route}, "rec", fmt.Sprint(n), fmt.Sprint(d))
	expectActive(t, r.insert(compileFor(t, bin, retViewEntry)))
	// another module on the same file (by its base name)
	infos := r.insert(compileFor(t, bin, strings.Replace(retViewRet, "PROGRAM", "retprobe", 1)))
	expectActive(t, infos)
	recAddr := infos[0].Address
	r.eng.Release()
	if lines := r.finish(); lines[len(lines)-1] != "done" {
		t.Fatalf("fixture: %q", lines)
	}
	entryRSP := map[uint64]uint64{} // depth -> rsp at entry (the same every time: one thread)
	for _, rec := range r.records(1) {
		w := words(t, rec, 2)
		if old, ok := entryRSP[w[0]]; ok && old != w[1] {
			t.Fatalf("depth %d entered at rsp %#x and %#x", w[0], old, w[1])
		}
		entryRSP[w[0]] = w[1]
	}
	views := map[retView]int{}
	for _, rec := range r.records(2) {
		if rec.Address != recAddr || rec.Location != "rec" || rec.Probe != "retprobe" || rec.Kind != "log" || rec.Exit != 1 {
			t.Fatalf("record %+v: want rec's address %#x and location, a retprobe's log record", rec, recAddr)
		}
		w := words(t, rec, 3)
		e, ok := entryRSP[w[0]-7]
		if !ok {
			t.Fatalf("return value %d: no entry of depth %d", w[0], w[0]-7)
		}
		views[retView{w[0], w[1] - recAddr, w[2] - e}]++
	}
	q := probeInfo(t, r, 2)
	if q.Missed != 0 || q.Dropped != 0 || q.Faults != 0 {
		t.Errorf("query: %+v", q)
	}
	return views, infos[0].How, q.Hits
}

// Recursion on pads: rec(9) 50 times, both rets on pads (HOW), each
// return seen once with the same registers as on the int3 route: rax
// the return value, rip the caller's next instruction, rsp 8 above the
// entry's.
func TestRetPadRecursion(t *testing.T) {
	bin := retFixture(t)
	const n, d = 50, 9
	pads, how, hits := retViews(t, bin, engine.RouteAuto, n, d)
	t.Logf("HOW %q", how)
	if !strings.HasPrefix(how, "jump ret: 2 returns on jump pads") {
		t.Errorf("HOW %q: want both rets on jump pads", how)
	}
	if hits != n*(d+1) {
		t.Errorf("%d hits, want %d", hits, n*(d+1))
	}
	int3, how3, hits3 := retViews(t, bin, engine.RouteInt3, n, d)
	if !strings.HasPrefix(how3, "ret: 2 returns, no entry stop") {
		t.Errorf("HOW on --route int3: %q", how3)
	}
	if hits3 != hits {
		t.Errorf("int3 route: %d hits, pads %d", hits3, hits)
	}
	total := 0
	for v, c := range pads {
		total += c
		if v.rspOff != 8 {
			t.Errorf("a return seen with rsp %d from the entry's, want 8: %+v", int64(v.rspOff), v)
		}
		if int3[v] != c {
			t.Errorf("%+v seen %d times on pads, %d on the int3 route", v, c, int3[v])
		}
	}
	if total != n*(d+1) || len(pads) != len(int3) {
		t.Errorf("%d records on pads (%d kinds), %d kinds on the int3 route", total, len(pads), len(int3))
	}
}

// Four threads recursing through rets on pads: every return counted
// and seen with its own value.
func TestRetPadThreads(t *testing.T) {
	bin := retFixture(t)
	const threads, n, d = 4, 500, 5
	r := startWith(t, startConfig{path: bin}, "threads", fmt.Sprint(threads), fmt.Sprint(n), fmt.Sprint(d))
	infos := r.insert(compileFor(t, bin, retViewRet))
	expectActive(t, infos)
	if !strings.HasPrefix(infos[0].How, "jump ret: 2 returns on jump pads") {
		t.Errorf("HOW %q", infos[0].How)
	}
	r.eng.Release()
	r.finish()
	per := map[int]map[uint64]int{}
	for _, rec := range r.records(2) {
		w := words(t, rec, 3)
		if per[rec.Tid] == nil {
			per[rec.Tid] = map[uint64]int{}
		}
		per[rec.Tid][w[0]]++
	}
	if len(per) != threads {
		t.Fatalf("returns from %d threads, want %d", len(per), threads)
	}
	for tid, m := range per {
		for v := uint64(7); v <= d+7; v++ {
			if m[v] != n {
				t.Errorf("thread %d: return value %d seen %d times, want %d", tid, v, m[v], n)
			}
		}
	}
	if q := probeInfo(t, r, 2); q.Hits != threads*n*(d+1) || q.Missed != 0 || q.Lost != 0 {
		t.Errorf("query: %+v", q)
	}
}

// liveAndFile returns a function's live bytes (and the 16 after it) and
// the file's.
func liveAndFile(t *testing.T, bin string, pid int, fn string) (live, file []byte) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, _ := f.Symbols()
	maps, err := ptrace.Maps(pid)
	if err != nil {
		t.Fatal(err)
	}
	var base uint64
	for _, m := range maps {
		if m.Path == bin && m.Offset == 0 {
			base = m.Start
			break
		}
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	text := f.Section(".text")
	for _, s := range syms {
		if s.Name != fn {
			continue
		}
		n := int(s.Size) + 16
		file = make([]byte, n)
		text.ReadAt(file, int64(s.Value-text.Addr))
		live = make([]byte, n)
		if _, err := mem.ReadAt(live, int64(base+s.Value)); err != nil {
			t.Fatal(err)
		}
		return live, file
	}
	t.Fatalf("no symbol %s in %s", fn, bin)
	return nil, nil
}

// Removal mid-run: the jumps at rec's rets go, every byte of rec is the
// file's again, and the second half runs unprobed to its correct end.
func TestRetPadRemove(t *testing.T) {
	bin := retFixture(t)
	const n, d = 40, 4
	r := startWith(t, startConfig{path: bin}, "recwait", fmt.Sprint(n), fmt.Sprint(d))
	m := compileFor(t, bin, retViewRet)
	infos := r.insert(m)
	expectActive(t, infos)
	if !strings.HasPrefix(infos[0].How, "jump ret:") {
		t.Fatalf("HOW %q: want the rets on pads", infos[0].How)
	}
	live, file := liveAndFile(t, bin, r.eng.Pid(), "rec")
	if string(live) == string(file) {
		t.Fatalf("rec's code is the file's with its rets on pads: % x", live)
	}
	r.eng.Release()
	if l := r.line(); l != "half" {
		t.Fatalf("fixture: %q", l)
	}
	if got, err := r.eng.Remove(m.Name, nil); err != nil || got != 1 {
		t.Fatalf("remove: %d %v", got, err)
	}
	live, file = liveAndFile(t, bin, r.eng.Pid(), "rec")
	if string(live) != string(file) {
		t.Errorf("after removal rec is\n% x\nthe file has\n% x", live, file)
	}
	fmt.Fprintln(r.stdin)
	if lines := r.finish(); lines[len(lines)-1] != "done" {
		t.Fatalf("fixture: %q", lines)
	}
	if recs := r.records(2); len(recs) != n*(d+1) {
		t.Errorf("%d records, want %d (the first half's)", len(recs), n*(d+1))
	}
}

// A ret that cannot take a pad keeps its int3 and HOW names it; the
// function's other ret is on a pad; every return is counted once.
// twoway's second ret is the target of a branch and has no fill after it.
func TestRetPadNamedSite(t *testing.T) {
	bin := retFixture(t)
	const n = 700
	r := startWith(t, startConfig{path: bin}, "twoway", fmt.Sprint(n))
	infos := r.insert(compileFor(t, bin, "name = PROGRAM\nmodtype = user\nretprobe = twoway\nminor = 2\npush r,rax\nlog 1\nexit 1\n"))
	expectActive(t, infos)
	how := infos[0].How
	t.Logf("HOW %q", how)
	second := fmt.Sprintf("the ret at %#x (twoway+0x1b): a branch at %#x lands inside the covered bytes (at %#x)", infos[0].Address+0x1b, infos[0].Address+0x14, infos[0].Address+0x1b)
	if !strings.HasPrefix(how, "jump ret: 1 of 2 returns on jump pads") || !strings.Contains(how, second) {
		t.Errorf("HOW %q: want the first ret on a pad and the second named: %q", how, second)
	}
	r.eng.Release()
	r.finish()
	vals := map[uint64]int{}
	for _, rec := range r.records(2) {
		vals[words(t, rec, 1)[0]]++
	}
	want := map[uint64]int{1: n / 7, 3: n / 7, 2: n - 2*(n/7)}
	for v, c := range want {
		if vals[v] != c {
			t.Errorf("return value %d seen %d times, want %d (all: %v)", v, vals[v], c, vals)
		}
	}
	if q := probeInfo(t, r, 2); q.Hits != n {
		t.Errorf("query: %+v", q)
	}
}

// A one-instruction function (ret, then int3 fill to the next symbol):
// its return probe runs in a pad over the ret and the fill, and the
// functions after it are unharmed.
func TestRetPadTinyFunction(t *testing.T) {
	bin := retFixture(t)
	const n = 1000
	r := startWith(t, startConfig{path: bin}, "tiny", fmt.Sprint(n))
	infos := r.insert(compileFor(t, bin, "name = PROGRAM\nmodtype = user\nretprobe = tiny\nminor = 2\npush r,rip\nlog 1\nexit 1\n"))
	expectActive(t, infos)
	if !strings.HasPrefix(infos[0].How, "jump ret: 1 return on jump pads") {
		t.Errorf("HOW %q", infos[0].How)
	}
	r.eng.Release()
	if lines := r.finish(); lines[len(lines)-1] != "done" {
		t.Fatalf("fixture: %q", lines)
	}
	rips := map[uint64]int{}
	for _, rec := range r.records(2) {
		rips[words(t, rec, 1)[0]]++
	}
	if len(rips) != 1 {
		t.Errorf("return addresses %v: want one call site", rips)
	}
	for rip, c := range rips {
		if c != n || rip >= infos[0].Address && rip < infos[0].Address+0x60 {
			t.Errorf("return address %#x seen %d times, want %d, in main", rip, c, n)
		}
	}
}

// stormRetProbes counts the returns of f_call (which logs its return
// value) and f_leaf in variables of their own.
const stormRetProbes = `name = PROGRAM
modtype = user
vars = 2
retprobe = f_call
minor = 1
inc lv,0
push r,rax
log 1
exit 1
retprobe = f_leaf
minor = 2
inc lv,1
exit 0
`

// Signals that stop a thread anywhere in a return probe's pad (the
// instructions before the ret, the probe, the ret) let it go on exactly:
// 4 threads each under a 20 kHz timer and queued real-time signals,
// f_call's ret covered with the add before it, f_leaf's with its
// alignment fill; every call counted once, every signal delivered once.
func TestRetPadSignals(t *testing.T) {
	prog := stormFixture(t)
	rounds := 10
	if testing.Short() {
		rounds = 2
	}
	var alarms int64
	for round := 0; round < rounds; round++ {
		r := startWith(t, startConfig{path: prog}, "-t", "4", "-n", "10000", "-r", "20000", "-q", "5000")
		infos := r.insert(compileFor(t, prog, stormRetProbes))
		for _, p := range infos {
			if p.State != engine.StateActive || !strings.HasPrefix(p.How, "jump ret: 1 return on jump pads") {
				t.Fatalf("probe %s: %s, HOW %q: %s", p.Location, p.State, p.How, p.Reason)
			}
		}
		r.eng.Release()
		lines := r.finish()
		s, ok := parseStorm(lines)
		if !ok || s.bad != 0 || s.calls != 4*10000 || s.rtGot != s.rtSent || s.foreign != 0 {
			t.Fatalf("round %d: the program's own check: %q", round, lines)
		}
		lv, _, err := r.eng.Vars(prog, false)
		if err != nil {
			t.Fatal(err)
		}
		if lv[0] != uint64(s.calls) || lv[1] != uint64(s.calls) {
			t.Fatalf("round %d: returns counted %d and %d, want %d (%s)", round, lv[0], lv[1], s.calls, s.line)
		}
		if recs := r.records(1); len(recs) != int(s.calls) {
			per := map[int]int{}
			for _, rec := range recs {
				per[rec.Tid]++
			}
			t.Fatalf("round %d: %d records of f_call's returns, want %d (per thread %v; query %+v; %s)", round, len(recs), s.calls, per, probeInfo(t, r, 1), s.line)
		}
		alarms += s.alarms
	}
	t.Logf("%d rounds, %d alarms taken", rounds, alarms)
	if alarms == 0 {
		t.Fatal("no alarm fired: the test proves nothing")
	}
}

// An offset probe on a one-instruction function (ret, then int3 fill to
// the next symbol): a jump pad over the ret and the fill (before: int3,
// "the function ends 1 byte after the probe"), rip the function's
// address at every hit, exact count; removal puts back the ret and the
// fill.
func TestPadTinyFunction(t *testing.T) {
	bin := retFixture(t)
	const n = 2000
	r := startWith(t, startConfig{path: bin}, "tiny", fmt.Sprint(n), "wait")
	m := compileFor(t, bin, "name = PROGRAM\nmodtype = user\noffset = tiny\nminor = 1\npush r,rip\nlog 1\nexit 1\n")
	infos := r.insert(m)
	expectActive(t, infos)
	if infos[0].How != "jump" {
		t.Fatalf("HOW %q: want jump", infos[0].How)
	}
	live, file := liveAndFile(t, bin, r.eng.Pid(), "tiny")
	if string(live) == string(file) || live[0] != 0xe9 {
		t.Fatalf("tiny is % x with its probe on a jump", live)
	}
	r.eng.Release()
	if l := r.line(); l != "half" {
		t.Fatalf("fixture: %q", l)
	}
	if got, err := r.eng.Remove(m.Name, nil); err != nil || got != 1 {
		t.Fatalf("remove: %d %v", got, err)
	}
	if live, file := liveAndFile(t, bin, r.eng.Pid(), "tiny"); string(live) != string(file) {
		t.Errorf("after removal tiny is\n% x\nthe file has\n% x", live, file)
	}
	fmt.Fprintln(r.stdin)
	if lines := r.finish(); lines[len(lines)-1] != "done" {
		t.Fatalf("fixture: %q", lines)
	}
	recs := r.records(1)
	for _, rec := range recs {
		if rip := words(t, rec, 1)[0]; rip != infos[0].Address {
			t.Fatalf("rip %#x at the probe, want tiny's %#x", rip, infos[0].Address)
		}
	}
	if len(recs) != n {
		t.Errorf("%d records, want %d (the first half's)", len(recs), n)
	}
}

// fork: the child runs the return pads it inherited (the region is
// shared, each record carries its pid); each process's returns are its
// own and exact.
func TestRetPadFork(t *testing.T) {
	bin := retFixture(t)
	const n, d = 30, 4
	r := startWith(t, startConfig{path: bin}, "fork", fmt.Sprint(n), fmt.Sprint(d))
	infos := r.insert(compileFor(t, bin, retViewRet))
	expectActive(t, infos)
	if !strings.HasPrefix(infos[0].How, "jump ret: 2 returns on jump pads") {
		t.Errorf("HOW %q", infos[0].How)
	}
	r.eng.Release()
	r.finish()
	per := map[int]map[uint64]int{}
	for _, rec := range r.records(2) {
		if per[rec.Pid] == nil {
			per[rec.Pid] = map[uint64]int{}
		}
		per[rec.Pid][words(t, rec, 3)[0]]++
	}
	if len(per) != 2 {
		t.Fatalf("returns by pid: %v, want two processes", per)
	}
	for pid, m := range per {
		for v := uint64(7); v <= d+7; v++ {
			if m[v] != n {
				t.Errorf("pid %d: return value %d seen %d times, want %d", pid, v, m[v], n)
			}
		}
	}
}
