//go:build linux

package ptrace_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/ptrace"
	"github.com/gprobes/gprobes/rpn"
)

// Watch probes on real processes: testdata/watch/watch.c writes and reads
// its globals an exact number of times from threads started before and
// after the probes go in.

func watchFixture(t *testing.T) string {
	t.Helper()
	return testkit.CC(t, "watch", "-O1", "-g", "-pthread", "../testdata/watch/watch.c")
}

// watchSpec is one watch probe: its address expression, length, mode,
// and the local variable its program counts hits in.
type watchSpec struct {
	expr  string
	len   uint8
	mode  rpn.WatchMode
	lv    int
	prog  string // program instead of "inc lv,N"
	minor int    // 0: its place in the module, from 1
}

// watchModule builds a module of watch probes on path.
func watchModule(t *testing.T, path string, ws ...watchSpec) *rpn.Module {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "name = PROGRAM\nmodtype = user\nvars = 8\n")
	for i, w := range ws {
		minor := w.minor
		if minor == 0 {
			minor = i + 1
		}
		mode := "w"
		if w.mode == rpn.WatchReadWrite {
			mode = "rw"
		}
		fmt.Fprintf(&b, "watch = %s,%d,%s\nminor = %d\n", w.expr, w.len, mode, minor)
		if w.prog != "" {
			b.WriteString(w.prog)
		} else {
			fmt.Fprintf(&b, "inc lv,%d\nexit 0\n", w.lv)
		}
	}
	return compileFor(t, path, b.String())
}

// watchRun starts the fixture held at exec (argv after the program).
func watchRun(t *testing.T, route string, args ...string) *run {
	t.Helper()
	return startWith(t, startConfig{path: watchFixture(t), route: route}, args...)
}

func (r *run) release() {
	r.t.Helper()
	if err := r.eng.Release(); err != nil {
		r.t.Fatal(err)
	}
}

func (r *run) lv(name string) []uint64 {
	r.t.Helper()
	lv, _, err := r.eng.Vars(name, false)
	if err != nil {
		r.t.Fatal(err)
	}
	return lv
}

func (r *run) queryProbes() map[uint16]engine.ProbeInfo {
	out := map[uint16]engine.ProbeInfo{}
	for _, p := range r.eng.Query() {
		out[p.Minor] = p
	}
	return out
}

// Exact counts: w counts the writes, rw the writes and the reads, from 2
// threads running when the probes go in and 2 started after; the record
// of a hit has rip on the instruction after the store.
func TestWatchCounts(t *testing.T) {
	const W, R = 3000, 2000
	r := watchRun(t, engine.RouteAuto, fmt.Sprint(W), fmt.Sprint(R), "2", "2")
	r.release()
	if l := r.line(); !strings.HasPrefix(l, "ready ") {
		t.Fatalf("fixture: %q", l)
	}
	fix := watchFixture(t)
	infos := r.insert(watchModule(t, fix,
		watchSpec{expr: "counter", len: 8, mode: rpn.WatchWrite, lv: 0},
		watchSpec{expr: "counter", len: 8, mode: rpn.WatchReadWrite, lv: 1},
		watchSpec{expr: "v+4", len: 4, mode: rpn.WatchWrite, prog: "inc lv,2\npush r,rip\npush mrf,1\nlog 1\nexit 1\n"},
	))
	for _, p := range infos {
		if p.State != engine.StateActive || !strings.HasPrefix(p.How, "watch DR") {
			t.Fatalf("probe %d %s: %s %s (%s)", p.Minor, p.Location, p.State, p.Reason, p.How)
		}
	}
	fmt.Fprintln(r.stdin, "go")
	lines := r.finish()
	if len(lines) != 1 || lines[0] != fmt.Sprintf("done threads 4 writes %d reads %d", 4*W, 4*R) {
		t.Fatalf("fixture output %q", lines)
	}
	lv := r.lv(fix)
	if lv[0] != 4*W || lv[1] != 4*(W+R) || lv[2] != 4*(W+1) {
		t.Errorf("hits: w %d (want %d), rw %d (want %d), v[1] %d (want %d)", lv[0], 4*W, lv[1], 4*(W+R), lv[2], 4*(W+1))
	}
	q := r.queryProbes()
	for minor, want := range map[uint16]uint64{1: 4 * W, 2: 4 * (W + R), 3: 4 * (W + 1)} {
		if q[minor].Hits != want {
			t.Errorf("query: minor %d has %d hits, want %d", minor, q[minor].Hits, want)
		}
	}
	// push r,rip: the instruction after the store, whose first byte the
	// record holds; never the store's own address
	recs := r.records(3)
	if len(recs) != 4*(W+1) {
		t.Fatalf("%d records of v[1]'s watch, want %d", len(recs), 4*(W+1))
	}
	if recs[0].Address == 0 || recs[0].Location != "v+4" {
		t.Errorf("record: %+v", recs[0])
	}
}

// The fifth watch is refused, naming the four in use, and the four work;
// an unaligned one is refused; removing one gives its register back.
func TestWatchFifthRefused(t *testing.T) {
	const W = 500
	r := watchRun(t, engine.RouteAuto, fmt.Sprint(W), "0", "1", "1")
	fix := watchFixture(t)
	infos, err := r.eng.Insert(watchModule(t, fix,
		watchSpec{expr: "v", len: 4, lv: 0},
		watchSpec{expr: "v+4", len: 4, lv: 1},
		watchSpec{expr: "counter+1", len: 4, lv: 7},
		watchSpec{expr: "v+8", len: 4, lv: 2},
		watchSpec{expr: "v+12", len: 4, lv: 3},
		watchSpec{expr: "v+16", len: 4, lv: 4},
	), engine.InsertNew)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range infos {
		t.Logf("minor %d %s: %s %s %s", p.Minor, p.Location, p.State, p.How, p.Reason)
	}
	if p := infos[2]; p.State != engine.StateRefused || !strings.Contains(p.Reason, "not a multiple of its length 4") {
		t.Errorf("unaligned watch: %s %q", p.State, p.Reason)
	}
	fifth := infos[5]
	if fifth.State != engine.StateRefused || !strings.Contains(fifth.Reason, "no debug register left") {
		t.Fatalf("fifth watch: %s %q", fifth.State, fifth.Reason)
	}
	// the unaligned one gave its register back (to v+12)
	for _, want := range []string{"DR0 watch = v (", "DR1 watch = v+4 (", "DR2 watch = v+12 (", "DR3 watch = v+8 ("} {
		if !strings.Contains(fifth.Reason, want) {
			t.Errorf("the fifth's refusal does not name %q: %s", want, fifth.Reason)
		}
	}
	r.release()
	r.line()
	fmt.Fprintln(r.stdin, "go")
	r.finish()
	lv := r.lv(fix)
	for k := 0; k < 4; k++ {
		if lv[k] != uint64(2*(W+k)) {
			t.Errorf("v[%d]: %d hits, want %d", k, lv[k], 2*(W+k))
		}
	}
	if lv[4] != 0 || lv[7] != 0 {
		t.Errorf("refused watches counted %d and %d", lv[4], lv[7])
	}
}

// Removing a watch gives its register back: the next one takes it; the
// process runs on with no watch left and no SIGTRAP.
func TestWatchRemoveReuse(t *testing.T) {
	const W = 400
	r := watchRun(t, engine.RouteAuto, fmt.Sprint(W), "0", "1", "1")
	fix := watchFixture(t)
	var specs []watchSpec
	for k := 0; k < 4; k++ {
		specs = append(specs, watchSpec{expr: fmt.Sprintf("v+%d", 4*k), len: 4, lv: k})
	}
	r.insert(watchModule(t, fix, specs...))
	if n, err := r.eng.Remove(fix, []uint16{2}); err != nil || n != 1 {
		t.Fatalf("remove minor 2: %d %v", n, err)
	}
	infos, err := r.eng.Insert(watchModule(t, fix, watchSpec{expr: "counter", len: 8, lv: 1, minor: 5}), engine.InsertMerge)
	if err != nil {
		t.Fatal(err)
	}
	if infos[0].State != engine.StateActive || infos[0].How != "watch DR1" {
		t.Fatalf("the watch after a removal: %s %q %s", infos[0].State, infos[0].How, infos[0].Reason)
	}
	r.release()
	r.line()
	fmt.Fprintln(r.stdin, "go")
	r.finish()
	// lv 1: the merged watch on counter, in v[1]'s register
	lv := r.lv(fix)
	if lv[0] != 2*W || lv[1] != 2*W || lv[2] != 2*(W+2) || lv[3] != 2*(W+3) {
		t.Errorf("hits %v, want [%d %d %d %d]", lv[:4], 2*W, 2*W, 2*(W+2), 2*(W+3))
	}
}

// A fork child gets the watch (the kernel gives its thread no debug
// register: the engine does); an exec'd image gets it again.
func TestWatchForkExec(t *testing.T) {
	const W = 300
	t.Run("fork", func(t *testing.T) {
		r := watchRun(t, engine.RouteAuto, fmt.Sprint(W), "0", "0", "1", "fork")
		fix := watchFixture(t)
		r.insert(watchModule(t, fix, watchSpec{expr: "counter", len: 8, prog: "inc lv,0\npush pid\nlog 1\nexit 1\n"}))
		r.release()
		r.line()
		fmt.Fprintln(r.stdin, "go")
		lines := r.finish()
		if len(lines) != 2 || !strings.HasPrefix(lines[1], fmt.Sprintf("child writes %d status 0", W)) {
			t.Fatalf("fixture: %q", lines)
		}
		if lv := r.lv(fix); lv[0] != 2*W {
			t.Errorf("%d hits, want %d (parent and child)", lv[0], 2*W)
		}
		pids := map[int]int{}
		for _, rec := range r.records(1) {
			pids[rec.Pid]++
		}
		if len(pids) != 2 {
			t.Errorf("records by pid: %v", pids)
		}
	})
	t.Run("exec", func(t *testing.T) {
		r := watchRun(t, engine.RouteAuto, fmt.Sprint(W), "0", "0", "1", "exec")
		fix := watchFixture(t)
		r.insert(watchModule(t, fix, watchSpec{expr: "counter", len: 8, lv: 0}))
		r.release()
		r.line()
		fmt.Fprintln(r.stdin, "go")
		r.line() // done
		r.line() // ready, in the new image
		fmt.Fprintln(r.stdin, "go")
		r.finish()
		if lv := r.lv(fix); lv[0] != 2*W {
			t.Errorf("%d hits, want %d (both images)", lv[0], 2*W)
		}
	})
}

// Detach turns the debug registers off: the process, attached and let go
// with its watch in, runs on and exits 0 (a register left on would kill
// it with SIGTRAP at the next write).
func TestWatchDetach(t *testing.T) {
	fix := watchFixture(t)
	cmd := exec.Command(fix, "200000", "0", "2", "2")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	buf := make([]byte, 64)
	n, _ := out.Read(buf)
	if !strings.HasPrefix(string(buf[:n]), "ready") {
		t.Fatalf("fixture: %q", buf[:n])
	}
	eng, err := engine.Start(ptrace.Attach(cmd.Process.Pid), engine.Options{Warn: func(m string) { t.Log("engine:", m) }})
	if err != nil {
		t.Fatal(err)
	}
	infos, err := eng.Insert(watchModule(t, fix, watchSpec{expr: "counter", len: 8, lv: 0}), engine.InsertNew)
	if err != nil || infos[0].State != engine.StateActive {
		t.Fatalf("%v %+v", err, infos)
	}
	eng.Release()
	fmt.Fprintln(in, "go")
	// the detach comes mid-run: once the watch has counted
	testkit.Wait(t, time.Minute, "hits of the watch", func() (bool, string) {
		lv, _, err := eng.Vars(fix, false)
		return err == nil && len(lv) > 0 && lv[0] > 0, fmt.Sprint(lv, err)
	})
	f, err := eng.Close()
	if err != nil {
		t.Fatal(err)
	}
	hits := f.Vars[0].LV[0]
	st := cmd.Wait()
	var ws syscall.WaitStatus
	if cmd.ProcessState != nil {
		ws = cmd.ProcessState.Sys().(syscall.WaitStatus)
	}
	if st != nil {
		t.Fatalf("the fixture after detach: %v (%v)", st, ws)
	}
	if hits == 0 || hits >= 4*200000 {
		t.Errorf("%d hits before the detach", hits)
	}
	t.Logf("%d hits before the detach", hits)
}

// The access a watch catches is the displaced instruction of an offset
// probe: emulated (bump's load) or stepped out of line (lockbump's lock
// add) on the int3 route, relocated into a jump pad on the default route.
// Each counts exactly once, and push r,rip is the original code's next
// instruction, never a slot's or a pad's. The offset probe's own read of
// b2 (push mrf, in the pad's code on the jump route) is no access of the
// program's: the rw watch counts the lock adds alone.
func TestWatchThroughProbes(t *testing.T) {
	for _, route := range []string{engine.RouteInt3, engine.RouteAuto} {
		t.Run(map[string]string{engine.RouteInt3: "int3", engine.RouteAuto: "jump"}[route], func(t *testing.T) {
			const W = 2000
			r := watchRun(t, route, fmt.Sprint(W), "0", "0", "1", "bump")
			fix := watchFixture(t)
			infos := r.insert(compileFor(t, fix, `name = PROGRAM
modtype = user
vars = 4
offset = bump
minor = 1
inc lv,0
push r,rip
log 1
exit 1
offset = lockbump
minor = 2
inc lv,1
push r,rip
push d,b2
push mrf,4
log 2
exit 1
watch = b1,4,rw
minor = 3
inc lv,2
push r,rip
log 1
exit 1
watch = b2,4,rw
minor = 4
inc lv,3
push r,rip
push d,b2
push mrf,4
log 2
exit 1
`))
			for _, p := range infos {
				t.Logf("minor %d %s: %s", p.Minor, p.Location, p.How)
			}
			if route == engine.RouteAuto && (infos[0].How != "jump" || infos[1].How != "jump") {
				t.Errorf("not in jump pads: %q %q", infos[0].How, infos[1].How)
			}
			if route == engine.RouteInt3 && (infos[0].How != "emulate" || infos[1].How != "step") {
				t.Errorf("int3 route: %q %q, want emulate and step", infos[0].How, infos[1].How)
			}
			r.release()
			lines := r.finish()
			if len(lines) != 1 || lines[0] != fmt.Sprintf("bumped %d", W) {
				t.Fatalf("fixture: %q", lines)
			}
			if lv := r.lv(fix); lv[0] != W || lv[1] != W || lv[2] != W || lv[3] != W {
				t.Errorf("hits %v, want %d each", lv[:4], W)
			}
			word := func(rec engine.Record, i int) uint64 {
				var v uint64
				for k := 7; k >= 0; k-- {
					v = v<<8 | uint64(rec.Data[8*i+k])
				}
				return v
			}
			bump, lock := r.records(1), r.records(2)
			w1, w2 := r.records(3), r.records(4)
			if len(bump) == 0 || len(lock) == 0 || len(w1) != W || len(w2) != W {
				t.Fatalf("records: %d %d %d %d", len(bump), len(lock), len(w1), len(w2))
			}
			// the next instruction: bump's load is 6 bytes, lockbump's lock add 8
			if got, want := word(w1[0], 0), word(bump[0], 0)+6; got != want {
				t.Errorf("b1's watch: rip %#x, want %#x (bump+6)", got, want)
			}
			if got, want := word(w2[0], 0), word(lock[0], 0)+8; got != want {
				t.Errorf("b2's watch: rip %#x, want %#x (lockbump+8)", got, want)
			}
			for i, rec := range lock {
				if v := word(rec, 1) & 0xffffffff; v != uint64(i) {
					t.Fatalf("lockbump's record %d read b2 = %d, want %d", i, v, i)
				}
			}
			for i, rec := range w2 {
				if v := word(rec, 1) & 0xffffffff; v != uint64(i+1) {
					t.Fatalf("b2's watch record %d read %d, want %d", i, v, i+1)
				}
			}
		})
	}
}

// Pass count and max hits apply to a watch as to any probe: the first 10
// accesses run nothing, the next 100 run the program, then the probe is
// disabled (still listed, its hits still counted as skipped).
func TestWatchPassCountMaxHits(t *testing.T) {
	const W = 500
	r := watchRun(t, engine.RouteAuto, fmt.Sprint(W), "0", "0", "1", "nowait")
	fix := watchFixture(t)
	r.insert(compileFor(t, fix, "name = PROGRAM\nmodtype = user\nvars = 1\nwatch = counter,8,w\npass count = 10\nmax hits = 100\ninc lv,0\nexit 0\n"))
	r.release()
	r.finish()
	if lv := r.lv(fix); lv[0] != 100 {
		t.Errorf("the program ran %d times, want 100", lv[0])
	}
	p := r.queryProbes()[0]
	if p.Hits != W || p.Skipped != W-100 || p.State != engine.StateGone {
		t.Errorf("query: hits %d skipped %d state %s (%s), want %d, %d", p.Hits, p.Skipped, p.State, p.Reason, W, W-100)
	}
}
