//go:build linux

package ptrace_test

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/internal/testkit"
)

// Return probes on real processes (engine/retprobe.go): the fixture
// testdata/retprobe (a recursive function with two rets, a tail call by
// jmp, a jump to a cold part, longjmp, a sleeping function, libc's
// write) and a Go program.

func retFixture(t *testing.T) string {
	t.Helper()
	src := "../testdata/retprobe/"
	return testkit.CC(t, "retprobe", "-O1", "-g", "-pthread", src+"retprobe.c", src+"funcs.S")
}

// words splits a record's data into its words.
func words(t *testing.T, rec engine.Record, n int) []uint64 {
	t.Helper()
	if len(rec.Data) != 8*n {
		t.Fatalf("record of %d bytes, want %d words: %+v", len(rec.Data), n, rec)
	}
	w := make([]uint64, n)
	for i := range w {
		w[i] = binary.LittleEndian.Uint64(rec.Data[8*i:])
	}
	return w
}

func probeInfo(t *testing.T, r *run, minor uint16) engine.ProbeInfo {
	t.Helper()
	for _, p := range r.eng.Query() {
		if p.Minor == minor {
			return p
		}
	}
	t.Fatalf("no probe of minor %d", minor)
	return engine.ProbeInfo{}
}

func expectActive(t *testing.T, infos []engine.ProbeInfo) {
	t.Helper()
	for _, p := range infos {
		if p.State != engine.StateActive {
			t.Fatalf("probe %d (%s): %s: %s", p.Minor, p.Location, p.State, p.Reason)
		}
	}
}

// recProbes: the entry stores rdi (the depth) and rsp in the call's
// instance variables; the return logs them with rax, rip and rsp.
const recProbes = `name = PROGRAM
modtype = user
offset = rec
minor = 1
push r,rdi
pop iv,0
push r,rsp
pop iv,1
exit 0
retprobe = rec
minor = 2
MAXACTIVE
push iv,0
push r,rax
push r,rip
push r,rsp
push iv,1
log 5
exit 1
`

// Recursion: rec(9) called 50 times is 500 calls, each return seen once
// with its own depth, the return value d+7, rip the caller's next
// instruction (inside rec for the inner calls) and rsp 8 above the entry
// rsp; on both routes.
func TestRetprobeRecursion(t *testing.T) {
	bin := retFixture(t)
	const n, d = 50, 9
	for _, route := range []string{engine.RouteAuto, engine.RouteInt3} {
		t.Run("route="+route, func(t *testing.T) {
			r := startWith(t, startConfig{path: bin, route: route}, "rec", fmt.Sprint(n), fmt.Sprint(d))
			infos := r.insert(compileFor(t, bin, strings.ReplaceAll(recProbes, "MAXACTIVE", "")))
			expectActive(t, infos)
			t.Logf("HOW: entry %q, return %q", infos[0].How, infos[1].How)
			if !strings.Contains(infos[1].How, "ret: entry and 2 returns") {
				t.Errorf("retprobe HOW %q", infos[1].How)
			}
			if route == engine.RouteAuto && !strings.HasPrefix(infos[1].How, "int3 ") {
				t.Errorf("retprobe HOW %q on the auto route: want it to say int3", infos[1].How)
			}
			recAddr := infos[1].Address
			r.eng.Release()
			if lines := r.finish(); lines[len(lines)-1] != "done" {
				t.Fatalf("fixture: %q", lines)
			}
			recs := r.records(2)
			if len(recs) != n*(d+1) {
				t.Fatalf("%d return records, want %d", len(recs), n*(d+1))
			}
			perDepth := map[uint64]int{}
			for _, rec := range recs {
				w := words(t, rec, 5)
				depth, rax, rip, rsp, entryRSP := w[0], w[1], w[2], w[3], w[4]
				if rax != depth+7 {
					t.Fatalf("depth %d returned %d, want %d", depth, rax, depth+7)
				}
				if rsp != entryRSP+8 {
					t.Fatalf("depth %d: rsp %#x after the return, entry rsp %#x: want 8 above", depth, rsp, entryRSP)
				}
				if depth < d && rip != recAddr+0x19 {
					t.Fatalf("depth %d: rip %#x, want rec+0x19 (%#x), after its call of rec", depth, rip, recAddr+0x19)
				}
				if depth == d && rip-recAddr < 0x40 {
					t.Fatalf("depth %d: rip %#x inside rec: the outermost call returns to its caller", depth, rip)
				}
				if rec.Address != recAddr || rec.Location != "rec" {
					t.Fatalf("record %+v: want rec's address %#x", rec, recAddr)
				}
				perDepth[depth]++
			}
			for i := uint64(0); i <= d; i++ {
				if perDepth[i] != n {
					t.Errorf("depth %d: %d returns, want %d", i, perDepth[i], n)
				}
			}
			q := probeInfo(t, r, 2)
			if q.Hits != n*(d+1) || q.Missed != 0 || q.Dropped != 0 || q.Faults != 0 {
				t.Errorf("query: %+v", q)
			}
		})
	}
}

// Four threads recursing at once: each thread's returns are its own,
// exact in count and value.
func TestRetprobeThreads(t *testing.T) {
	bin := retFixture(t)
	const threads, n, d = 4, 200, 5
	r := startWith(t, startConfig{path: bin}, "threads", fmt.Sprint(threads), fmt.Sprint(n), fmt.Sprint(d))
	expectActive(t, r.insert(compileFor(t, bin, strings.ReplaceAll(recProbes, "MAXACTIVE", ""))))
	r.eng.Release()
	r.finish()
	recs := r.records(2)
	per := map[int]map[uint64]int{}
	for _, rec := range recs {
		w := words(t, rec, 5)
		if w[1] != w[0]+7 || w[3] != w[4]+8 {
			t.Fatalf("thread %d: depth %d returned %d, rsp %#x entry %#x", rec.Tid, w[0], w[1], w[3], w[4])
		}
		if per[rec.Tid] == nil {
			per[rec.Tid] = map[uint64]int{}
		}
		per[rec.Tid][w[0]]++
	}
	if len(per) != threads {
		t.Fatalf("returns from %d threads, want %d", len(per), threads)
	}
	for tid, m := range per {
		for i := uint64(0); i <= d; i++ {
			if m[i] != n {
				t.Errorf("thread %d depth %d: %d returns, want %d", tid, i, m[i], n)
			}
		}
	}
	if q := probeInfo(t, r, 2); q.Hits != threads*n*(d+1) || q.Missed != 0 || q.Dropped != 0 {
		t.Errorf("query: %+v", q)
	}
}

// maxactive = 4: of rec(9)'s ten nested calls the outer four are
// tracked, the inner six counted as missed, each time.
func TestRetprobeMaxactive(t *testing.T) {
	bin := retFixture(t)
	const n, d = 20, 9
	r := startWith(t, startConfig{path: bin}, "rec", fmt.Sprint(n), fmt.Sprint(d))
	expectActive(t, r.insert(compileFor(t, bin, strings.ReplaceAll(recProbes, "MAXACTIVE", "maxactive = 4"))))
	r.eng.Release()
	r.finish()
	recs := r.records(2)
	if len(recs) != 4*n {
		t.Fatalf("%d returns, want %d", len(recs), 4*n)
	}
	for _, rec := range recs {
		w := words(t, rec, 5)
		if w[0] < d-3 || w[1] != w[0]+7 {
			t.Fatalf("depth %d returned %d: only depths %d..%d are tracked", w[0], w[1], d-3, d)
		}
	}
	if q := probeInfo(t, r, 2); q.Hits != 4*n || q.Missed != 6*n || q.Dropped != 0 {
		t.Errorf("query: hits %d missed %d dropped %d, want %d, %d, 0", q.Hits, q.Missed, q.Dropped, 4*n, 6*n)
	}
}

// longjmp out of the deepest of D+1 nested calls, N times: no return is
// seen and every call is dropped, counted, as the next call at the same
// stack position begins; then M calls that return are exact.
func TestRetprobeLongjmp(t *testing.T) {
	bin := retFixture(t)
	const n, d, m = 30, 3, 10
	r := startWith(t, startConfig{path: bin}, "longjmp", fmt.Sprint(n), fmt.Sprint(d), fmt.Sprint(m))
	// maxactive given: the calls are tracked from their entry
	expectActive(t, r.insert(compileFor(t, bin, `name = PROGRAM
modtype = user
retprobe = jumper
minor = 2
maxactive = 64
push r,rax
log 1
exit 1
`)))
	r.eng.Release()
	if l := r.line(); l != "waiting" {
		t.Fatalf("fixture: %q", l)
	}
	q := probeInfo(t, r, 2)
	if q.Hits != m || q.Dropped != n*(d+1) || q.Missed != 0 {
		t.Errorf("query before exit: hits %d dropped %d missed %d, want %d, %d, 0", q.Hits, q.Dropped, q.Missed, m, n*(d+1))
	}
	for _, rec := range r.records(2) {
		if w := words(t, rec, 1); w[0] != 5 {
			t.Fatalf("jumper(-1) returned %d", w[0])
		}
	}
	fmt.Fprintln(r.stdin)
	r.finish()
}

// A tail call (tailf ends with jmp other): the return, from other's ret,
// is caught at tailf's caller with the value the caller gets; other's own
// return probe sees the same returns at its ret.
func TestRetprobeTailCall(t *testing.T) {
	bin := retFixture(t)
	const n = 100
	r := startWith(t, startConfig{path: bin}, "tail", fmt.Sprint(n))
	infos := r.insert(compileFor(t, bin, `name = PROGRAM
modtype = user
offset = tailf
minor = 1
push r,rdi
pop iv,0
exit 0
retprobe = tailf
minor = 2
push iv,0
push r,rax
log 2
exit 1
retprobe = other
minor = 3
push r,rax
log 1
exit 1
`))
	expectActive(t, infos)
	if !strings.Contains(infos[1].How, "1 jump out") {
		t.Errorf("tailf's HOW %q", infos[1].How)
	}
	r.eng.Release()
	r.finish()
	recs := r.records(2)
	if len(recs) != n {
		t.Fatalf("%d returns of tailf, want %d", len(recs), n)
	}
	for _, rec := range recs {
		if w := words(t, rec, 2); w[1] != w[0]+101 {
			t.Fatalf("tailf(%d) returned %d, want %d", w[0], w[1], w[0]+101)
		}
	}
	if len(r.records(3)) != n {
		t.Errorf("%d returns of other, want %d", len(r.records(3)), n)
	}
	if q := probeInfo(t, r, 2); q.Hits != n || q.Dropped != 0 || q.Missed != 0 {
		t.Errorf("query: %+v", q)
	}
}

// A jump to a cold part that returns by itself (hotf.cold): half the
// calls return from there, caught at the caller.
func TestRetprobeColdPart(t *testing.T) {
	bin := retFixture(t)
	const n = 100
	r := startWith(t, startConfig{path: bin}, "cold", fmt.Sprint(n))
	expectActive(t, r.insert(compileFor(t, bin, `name = PROGRAM
modtype = user
offset = hotf
minor = 1
push r,rdi
pop iv,0
exit 0
retprobe = hotf
minor = 2
push iv,0
push r,rax
log 2
exit 1
`)))
	r.eng.Release()
	r.finish()
	recs := r.records(2)
	if len(recs) != n {
		t.Fatalf("%d returns, want %d", len(recs), n)
	}
	cold := 0
	for _, rec := range recs {
		w := words(t, rec, 2)
		x := int64(w[0])
		want := x + 2
		if x < 0 {
			want, cold = -1, cold+1
		}
		if int64(w[1]) != want {
			t.Fatalf("hotf(%d) returned %d, want %d", x, int64(w[1]), want)
		}
	}
	if cold != n/2 {
		t.Errorf("%d returns through the cold part, want %d", cold, n/2)
	}
}

// Latency with instance variables, the four instructions of
// docs/language.md's "Instance variables" (push ts; pop iv,0 at the
// entry, push ts; push iv,0; sub at the return):
// each call's duration as the probes measure it agrees with the
// program's own clock_gettime around the call. The probes' two
// timestamps are taken inside the program's interval, so a probe's
// duration is at most the program's (plus the difference of the two
// clocks over a few ms: parts per million); it falls short by the time
// from the program's first clock_gettime to the entry hit's timestamp
// and from the return hit's timestamp to the second clock_gettime: two
// traps' halves, tens of microseconds, up to a few ms on a loaded 2-CPU
// machine. 5 ms is the bound; sleeps of 1 to 5.5 ms tell the calls apart.
func TestRetprobeLatency(t *testing.T) {
	bin := retFixture(t)
	const n = 10
	r := startWith(t, startConfig{path: bin}, "sleep", fmt.Sprint(n))
	expectActive(t, r.insert(compileFor(t, bin, `name = PROGRAM
modtype = user
offset = sleeper
minor = 1
push ts
pop iv,0
exit 0
retprobe = sleeper
minor = 2
push ts
push iv,0
sub
log 1
exit 1
`)))
	r.eng.Release()
	lines := r.finish()
	var prog []int64
	for _, l := range lines {
		var i, ns int64
		if _, err := fmt.Sscanf(l, "call %d %d", &i, &ns); err == nil {
			prog = append(prog, ns)
		}
	}
	recs := r.records(2)
	if len(recs) != n || len(prog) != n {
		t.Fatalf("%d records and %d calls printed, want %d", len(recs), len(prog), n)
	}
	for i, rec := range recs {
		probe := int64(words(t, rec, 1)[0])
		diff := prog[i] - probe
		t.Logf("call %d: program %v, probes %v, difference %v", i, time.Duration(prog[i]), time.Duration(probe), time.Duration(diff))
		if diff < -50*int64(time.Microsecond) || diff > 5*int64(time.Millisecond) {
			t.Errorf("call %d: the program measured %v, the probes %v", i, time.Duration(prog[i]), time.Duration(probe))
		}
	}
}

// libc's write, by the library's name: the calls on /dev/null's fd are
// exact, each returning 1.
func TestRetprobeLibc(t *testing.T) {
	bin := retFixture(t)
	const n = 200
	r := startWith(t, startConfig{path: bin}, "write", fmt.Sprint(n))
	infos := r.insert(compileFor(t, bin, `name = libc.so.6
modtype = user
offset = write
minor = 1
push r,rdi
pop iv,0
exit 0
retprobe = write
minor = 2
push iv,0
push r,rax
log 2
exit 1
`))
	if infos[1].State != engine.StatePending {
		t.Fatalf("retprobe before libc is mapped: %+v", infos[1])
	}
	r.eng.Release()
	r.finish()
	q := probeInfo(t, r, 2)
	t.Logf("HOW %q", q.How)
	fds := map[uint64]int{}
	for _, rec := range r.records(2) {
		w := words(t, rec, 2)
		if w[1] != 1 && w[0] != 1 {
			t.Errorf("write(%d) returned %d", w[0], int64(w[1]))
		}
		fds[w[0]]++
	}
	// fd 3 is /dev/null; fd 1 the "done" line
	if fds[3] != n {
		t.Errorf("writes by fd: %v, want %d on fd 3", fds, n)
	}
	if q.Dropped != 0 || q.Missed != 0 {
		t.Errorf("query: %+v", q)
	}
}

// A Go program with a return probe on one of its functions runs to its
// correct end, and the probe's counts and values are exact: goroutines
// on several threads, with and without the probed function growing its
// goroutine's stack (so the stack moves under calls in flight).
func TestRetprobeGo(t *testing.T) {
	bin := goFixture(t)
	for _, mode := range []string{"flat", "grow"} {
		t.Run(mode, func(t *testing.T) {
			const goroutines, n = 8, 300
			r := startWith(t, startConfig{path: bin}, mode, fmt.Sprint(goroutines), fmt.Sprint(n))
			infos := r.insert(compileFor(t, bin, `name = PROGRAM
modtype = user
offset = main.work
minor = 1
push r,rax
pop iv,0
exit 0
retprobe = main.work
minor = 2
push iv,0
push r,rax
log 2
exit 1
`))
			expectActive(t, infos)
			t.Logf("HOW %q", infos[1].How)
			r.eng.Release()
			lines := r.finish()
			var want, sum uint64
			fmt.Sscanf(lines[len(lines)-1], "done calls %d sum %d", &want, &sum)
			if want == 0 {
				t.Fatalf("fixture: %q", lines)
			}
			recs := r.records(2)
			var got uint64
			for _, rec := range recs {
				w := words(t, rec, 2)
				if w[1] != expectWork(w[0]) {
					t.Fatalf("work(%d) returned %d, want %d", w[0], w[1], expectWork(w[0]))
				}
				got += w[1]
			}
			if uint64(len(recs)) != want || got != sum {
				t.Errorf("%d returns with sum %d, the program made %d calls with sum %d", len(recs), got, want, sum)
			}
			q := probeInfo(t, r, 2)
			t.Logf("query: %+v", q)
			if q.Dropped != 0 || q.Missed != 0 {
				t.Errorf("query: dropped %d, missed %d", q.Dropped, q.Missed)
			}
		})
	}
}

// expectWork is what gowork's work(x) returns.
func expectWork(x uint64) uint64 { return x*3 + 1 }

// A thread that ends inside a probed function (pthread_exit): its call
// never returns, and is dropped, counted, when the thread exits.
func TestRetprobeThreadExit(t *testing.T) {
	bin := retFixture(t)
	const threads = 4
	r := startWith(t, startConfig{path: bin}, "texit", fmt.Sprint(threads))
	expectActive(t, r.insert(compileFor(t, bin, "name = PROGRAM\nmodtype = user\nretprobe = exiter\nminor = 2\nmaxactive = 8\npush r,rax\nlog 1\nexit 1\n")))
	r.eng.Release()
	r.finish()
	if q := probeInfo(t, r, 2); q.Hits != 0 || q.Dropped != threads || q.Missed != 0 {
		t.Errorf("query: hits %d dropped %d missed %d, want 0, %d, 0", q.Hits, q.Dropped, q.Missed, threads)
	}
}

// Removal with the breakpoints of a return probe in (its entry, its
// returns, and the return address in the caller where the tail call's
// return was caught): every byte goes back, and the program runs its
// second half unprobed to its correct end.
func TestRetprobeRemove(t *testing.T) {
	bin := retFixture(t)
	const n = 50
	r := startWith(t, startConfig{path: bin}, "tailwait", fmt.Sprint(n))
	m := compileFor(t, bin, "name = PROGRAM\nmodtype = user\nretprobe = tailf\nminor = 2\npush r,rax\nlog 1\nexit 1\n")
	expectActive(t, r.insert(m))
	r.eng.Release()
	if l := r.line(); l != "half" {
		t.Fatalf("fixture: %q", l)
	}
	if got, err := r.eng.Remove(m.Name, nil); err != nil || got != 1 {
		t.Fatalf("remove: %d %v", got, err)
	}
	fmt.Fprintln(r.stdin)
	r.finish()
	if recs := r.records(2); len(recs) != n {
		t.Errorf("%d records, want %d (the first half's)", len(recs), n)
	}
}

// fork: the child inherits the breakpoints; the returns of each process
// are its own and exact.
func TestRetprobeFork(t *testing.T) {
	bin := retFixture(t)
	const n, d = 20, 4
	r := startWith(t, startConfig{path: bin}, "fork", fmt.Sprint(n), fmt.Sprint(d))
	expectActive(t, r.insert(compileFor(t, bin, strings.ReplaceAll(recProbes, "MAXACTIVE", ""))))
	r.eng.Release()
	r.finish()
	per := map[int]int{}
	for _, rec := range r.records(2) {
		w := words(t, rec, 5)
		if w[1] != w[0]+7 {
			t.Fatalf("pid %d: depth %d returned %d", rec.Pid, w[0], w[1])
		}
		per[rec.Pid]++
	}
	if len(per) != 2 {
		t.Fatalf("returns by pid: %v, want two processes", per)
	}
	for pid, c := range per {
		if c != n*(d+1) {
			t.Errorf("pid %d: %d returns, want %d", pid, c, n*(d+1))
		}
	}
}

// A return probe inserted (by another module) where an offset probe runs
// in a jump pad at the function's entry: the pad makes way for an int3
// (its probe joins it), and both count every call.
func TestRetprobeJoinsJump(t *testing.T) {
	bin := retFixture(t)
	const n, d = 30, 3
	r := startWith(t, startConfig{path: bin, route: engine.RouteAuto}, "rec", fmt.Sprint(n), fmt.Sprint(d))
	a := compileFor(t, bin, "name = PROGRAM\nmodtype = user\nvars = 1\noffset = rec\nminor = 1\ninc lv,0\nexit 0\n")
	infos := r.insert(a)
	if infos[0].How != "jump" {
		t.Fatalf("the offset probe at rec's entry is on the %q route, want jump (its pad is what the return probe must join)", infos[0].How)
	}
	// another module on the same file (by its base name)
	// its calls tracked from the entry (maxactive given): an int3 there
	r.insert(compileFor(t, bin, "name = retprobe\nmodtype = user\nretprobe = rec\nminor = 2\nmaxactive = 16\npush r,rax\nlog 1\nexit 1\n"))
	q := r.eng.Query()
	t.Logf("HOW: %q, %q", q[0].How, q[1].How)
	if strings.HasPrefix(q[0].How, "jump") {
		t.Errorf("the offset probe stayed in its pad: %q", q[0].How)
	}
	r.eng.Release()
	r.finish()
	if len(r.records(2)) != n*(d+1) {
		t.Errorf("%d returns, want %d", len(r.records(2)), n*(d+1))
	}
	lv, _, _ := r.eng.Vars(bin, false)
	if lv[0] != n*(d+1) {
		t.Errorf("lv 0 = %d entries, want %d", lv[0], n*(d+1))
	}
}

// A return probe that needs nothing from the entry (no instance
// variables, no maxactive of its own) on a function without jumps out:
// no entry breakpoint, one stop a call, every return seen (recursion
// included), nothing tracked, missed or dropped.
func TestRetprobeNoEntry(t *testing.T) {
	bin := retFixture(t)
	const n, d = 30, 9
	r := startWith(t, startConfig{path: bin}, "rec", fmt.Sprint(n), fmt.Sprint(d))
	infos := r.insert(compileFor(t, bin, "name = PROGRAM\nmodtype = user\nretprobe = rec\nminor = 2\npush r,rax\npush r,rsp\nlog 2\nexit 1\n"))
	expectActive(t, infos)
	if !strings.Contains(infos[0].How, "2 returns") || !strings.Contains(infos[0].How, "no entry stop") {
		t.Errorf("HOW %q", infos[0].How)
	}
	r.eng.Release()
	r.finish()
	vals := map[uint64]int{}
	for _, rec := range r.records(2) {
		vals[words(t, rec, 2)[0]]++
	}
	for v := uint64(7); v <= d+7; v++ {
		if vals[v] != n {
			t.Errorf("return value %d seen %d times, want %d", v, vals[v], n)
		}
	}
	if q := probeInfo(t, r, 2); q.Hits != n*(d+1) || q.Missed != 0 || q.Dropped != 0 {
		t.Errorf("query: %+v", q)
	}
}
