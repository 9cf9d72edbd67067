package engine_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/engine/fake"
	"github.com/gprobes/gprobes/rpn"
)

// The engine's semantics on the in-memory fake target (engine/fake): no
// root, no compiler, no ptrace; milliseconds.

const (
	fPush = 0x1000 // push %rbp; nop; ret
	fLoad = 0x1010 // mov (%rax),%rax; nop; ret
	data  = 0x200000
)

// fakeProcess is the fake's program: f_push and f_load.
func fakeProcess(t *testing.T) *fake.Target {
	t.Helper()
	code := make([]byte, 0x20)
	copy(code[0x00:], []byte{0x55, 0x90, 0xc3})
	copy(code[0x10:], []byte{0x48, 0x8b, 0x00, 0x90, 0xc3})
	tg, err := fake.New("prog", 0x1000, code, fmt.Sprintf("%016x T f_push\n%016x T f_load\n", fPush, fLoad))
	if err != nil {
		t.Fatal(err)
	}
	tg.Map(data, 4096, true)
	// a chain: each cell holds the address of the next, so every load
	// moves rax on by 8
	for a := uint64(data); a < data+4096-8; a += 8 {
		var b [8]byte
		for i := range b {
			b[i] = byte((a + 8) >> (8 * i))
		}
		tg.WriteMem(fake.Pid, a, b[:])
	}
	tg.Names = []string{"prog2"}
	return tg
}

// fakeRun is an engine on a fake process, with the records it committed.
type fakeRun struct {
	tg   *fake.Target
	eng  *engine.Engine
	mu   sync.Mutex
	recs []engine.Record
	// onCommit runs on the engine's loop at each commit
	onCommit func(*engine.Record)
	// warned, when set, takes the engine's warnings (else each fails
	// the test)
	warned *[]string
}

func startFake(t *testing.T, tg *fake.Target) *fakeRun {
	t.Helper()
	r := &fakeRun{tg: tg}
	eng, err := engine.Start(func() (engine.Target, error) { return tg, nil }, engine.Options{
		Sink: engine.SinkFunc(func(rec *engine.Record) {
			if r.onCommit != nil {
				r.onCommit(rec)
			}
			r.mu.Lock()
			r.recs = append(r.recs, *rec)
			r.mu.Unlock()
		}),
		Warn: func(msg string) { t.Errorf("engine warning: %s", msg) },
	})
	if err != nil {
		t.Fatal(err)
	}
	r.eng = eng
	t.Cleanup(func() { eng.Close() })
	return r
}

func fakeModule(t *testing.T, src string) *rpn.Module {
	t.Helper()
	f, err := dpdf.ParseSource("fake.dpdf", []byte("name = prog\nmodtype = user\n"+src), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	m, err := compiler.Compile(f, rpn.CompileOptions{})
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	return m
}

func (r *fakeRun) insert(t *testing.T, src string) []engine.ProbeInfo {
	t.Helper()
	probes, err := r.eng.Insert(fakeModule(t, src), engine.InsertNew)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probes {
		if p.State != engine.StateActive {
			t.Fatalf("probe %s: %s %s", p.Location, p.State, p.Reason)
		}
	}
	return probes
}

// runToEnd lets the process go and waits for its end.
func (r *fakeRun) runToEnd(t *testing.T) {
	t.Helper()
	if err := r.eng.Release(); err != nil {
		t.Fatal(err)
	}
	<-r.eng.Ended()
}

func (r *fakeRun) records() []engine.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]engine.Record{}, r.recs...)
}

// pushes is how many push %rbp a thread ran, from its stack pointer.
func pushes(th *fake.Thread, start uint64) int { return int(start-th.Regs[rpn.RegRSP]) / 8 }

// A record is committed after its probed instruction executed: at each
// commit the thread's rax already holds what the load read, and the
// record holds what the program saw before it.
func TestFakeCommitAfterInstruction(t *testing.T) {
	tg := fakeProcess(t)
	th := tg.AddThread(1, fLoad, 50)
	th.Regs[rpn.RegRAX] = data
	r := startFake(t, tg)
	n := 0
	r.onCommit = func(rec *engine.Record) {
		n++
		var regs engine.Regs
		tg.GetRegs(1, &regs)
		if want := uint64(data + 8*n); regs[rpn.RegRAX] != want {
			t.Errorf("commit %d: rax is %#x, want %#x: the record came before its instruction", n, regs[rpn.RegRAX], want)
		}
		if before := le64(rec.Data); before != uint64(data+8*(n-1)) {
			t.Errorf("commit %d: the program saw rax %#x, want %#x", n, before, data+8*(n-1))
		}
	}
	r.insert(t, "offset = f_load\npush r,rax\nlog 1\nexit 1\n")
	r.runToEnd(t)
	if n != 50 || tg.Outcome(1) != "exited" {
		t.Errorf("%d commits, program %s; want 50, exited", n, tg.Outcome(1))
	}
}

func le64(b []byte) uint64 {
	var v uint64
	for i := 0; i < 8 && i < len(b); i++ {
		v |= uint64(b[i]) << (8 * i)
	}
	return v
}

// A log whose probed instruction faults is discarded (the probe's hit
// and the fault still counted), unless logonfault = yes; the program
// gets its signal as it would have.
func TestFakeDiscardOnFault(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprint("logonfault=", keep), func(t *testing.T) {
			tg := fakeProcess(t)
			th := tg.AddThread(1, fLoad, 10)
			th.Regs[rpn.RegRAX] = 8 // not mapped: the load faults
			r := startFake(t, tg)
			src := "vars = 1\noffset = f_load\ninc lv,0\npush r,rax\nlog 1\nexit 1\n"
			if keep {
				src = "vars = 1\noffset = f_load\nlogonfault = yes\ninc lv,0\npush r,rax\nlog 1\nexit 1\n"
			}
			r.insert(t, src)
			r.runToEnd(t)
			if tg.Outcome(1) != "killed by SIGSEGV" {
				t.Errorf("the program ended %q, want killed by SIGSEGV, as without the probe", tg.Outcome(1))
			}
			want := 0
			if keep {
				want = 1
			}
			if got := len(r.records()); got != want {
				t.Errorf("%d records, want %d", got, want)
			}
			lv, _, _ := r.eng.Vars("prog", false)
			if lv[0] != 1 {
				t.Errorf("the program ran %d times, want once", lv[0])
			}
		})
	}
}

// pass count skips the first hits; max hits disables the probe after N
// runs of its program; the displaced instruction runs every time.
func TestFakePassCountAndMaxHits(t *testing.T) {
	tg := fakeProcess(t)
	th := tg.AddThread(1, fPush, 20)
	start := th.Regs[rpn.RegRSP]
	r := startFake(t, tg)
	r.insert(t, "vars = 1\noffset = f_push\npass count = 3\nmax hits = 5\ninc lv,0\npush lv,0\nlog 1\nexit 1\n")
	r.runToEnd(t)
	lv, _, _ := r.eng.Vars("prog", false)
	if lv[0] != 5 || len(r.records()) != 5 {
		t.Errorf("lv 0 = %d, %d records; want 5 and 5", lv[0], len(r.records()))
	}
	// hits counts every hit, skipped those that ran nothing: 3 passed,
	// 12 after the probe was disabled (gone now: the process ended)
	q := r.eng.Query()
	if q[0].Hits != 20 || q[0].Skipped != 15 {
		t.Errorf("query: hits %d skipped %d, want 20 and 15", q[0].Hits, q[0].Skipped)
	}
	if got := pushes(th, start); got != 20 || tg.Outcome(1) != "exited" {
		t.Errorf("push ran %d times (%s), want 20 and exited", got, tg.Outcome(1))
	}
}

// Probes at one address run in insertion order, across modules too.
func TestFakeInsertionOrder(t *testing.T) {
	tg := fakeProcess(t)
	tg.AddThread(1, fPush, 3)
	r := startFake(t, tg)
	r.insert(t, "offset = f_push\nminor = 2\nexit 1\noffset = f_push\nminor = 1\nexit 1\n")
	f, err := dpdf.ParseSource("prog2.dpdf", []byte("name = prog2\nmodtype = user\noffset = f_push\nminor = 3\nexit 1\n"), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatal(err)
	}
	m2, err := compiler.Compile(f, rpn.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.eng.Insert(m2, engine.InsertNew); err != nil {
		t.Fatal(err)
	}
	r.runToEnd(t)
	var got []uint16
	for _, rec := range r.records() {
		got = append(got, rec.Minor)
	}
	if fmt.Sprint(got) != "[2 1 3 2 1 3 2 1 3]" {
		t.Errorf("minors in commit order %v, want [2 1 3] three times", got)
	}
}

// A probe removed while a second thread is stopped on its int3, its stop
// not handled yet: that thread goes back to the original instruction,
// which runs once; the probe runs no more.
func TestFakeRemoveMidHit(t *testing.T) {
	tg := fakeProcess(t)
	t1 := tg.AddThread(1, fPush, 4)
	t2 := tg.AddThread(2, fPush, 4)
	s1, s2 := t1.Regs[rpn.RegRSP], t2.Regs[rpn.RegRSP]
	t2.StopAt = fPush // stopped on the int3 while thread 1's hit is handled
	r := startFake(t, tg)
	kicked := make(chan struct{}, 1)
	tg.OnKick = func() {
		select {
		case kicked <- struct{}{}:
		default:
		}
	}
	removed := make(chan error, 1)
	r.onCommit = func(*engine.Record) {
		if len(r.records()) == 0 {
			// the first hit: remove the probe now; the engine runs the
			// command before it lets the thread go
			go func() { _, err := r.eng.Remove("prog", nil); removed <- err }()
			<-kicked
		}
	}
	r.insert(t, "offset = f_push\nexit 1\n")
	r.runToEnd(t)
	if err := <-removed; err != nil {
		t.Fatal(err)
	}
	if n := len(r.records()); n != 1 {
		t.Errorf("%d records, want 1: the probe ran after its removal", n)
	}
	if p1, p2 := pushes(t1, s1), pushes(t2, s2); p1 != 4 || p2 != 4 {
		t.Errorf("push ran %d and %d times, want 4 each", p1, p2)
	}
	for _, tid := range []int{1, 2} {
		if o := tg.Outcome(tid); o != "exited" {
			t.Errorf("thread %d: %s", tid, o)
		}
	}
}

// Close in the middle: every int3 goes, the threads run on natively to
// their end, each instruction exactly once.
func TestFakeCloseRestoresCode(t *testing.T) {
	tg := fakeProcess(t)
	th := tg.AddThread(1, fPush, 10)
	start := th.Regs[rpn.RegRSP]
	r := startFake(t, tg)
	closed := make(chan error, 1)
	r.onCommit = func(*engine.Record) {
		if len(r.records()) == 2 {
			go func() { _, err := r.eng.Close(); closed <- err }()
		}
	}
	r.insert(t, "offset = f_push\nexit 1\n")
	if err := r.eng.Release(); err != nil {
		t.Fatal(err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if o := tg.Outcome(1); o != "exited" {
		t.Fatalf("after Close the program ended %q: an int3 was left behind", o)
	}
	if got := pushes(th, start); got != 10 {
		t.Errorf("push ran %d times, want 10", got)
	}
}

// kindsSrc is a module with a tracepoint probe and an offset probe,
// which counts its hits in lv 0. (Return probes go in on these targets:
// ptrace/retprobe_test.go; the fake's functions are not called, so it
// has none to return from.)
const kindsSrc = `vars = 1
tracepoint = sched:sched_switch
minor = 1
push field,prev_pid
log 1
exit 1
offset = f_push
minor = 2
inc lv,0
exit 0
`

func compileKinds(t *testing.T, modtype, src string) *rpn.Module {
	t.Helper()
	f, err := dpdf.ParseSource("kinds.dpdf", []byte("name = prog\nmodtype = "+modtype+"\n"+src), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := compiler.Compile(f, rpn.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// checkStates compares insert's (or query's) states and reasons, by minor.
func checkStates(t *testing.T, what string, probes []engine.ProbeInfo, want map[uint16][2]string) {
	t.Helper()
	if len(probes) != len(want) {
		t.Fatalf("%s: %d probes, want %d: %+v", what, len(probes), len(want), probes)
	}
	for _, p := range probes {
		if w := want[p.Minor]; string(p.State) != w[0] || p.Reason != w[1] {
			t.Errorf("%s: probe %d (%s): %s %q, want %s %q", what, p.Minor, p.Location, p.State, p.Reason, w[0], w[1])
		}
	}
}

// A tracepoint probe cannot run on the engine's targets: it is refused
// at insert with its reason, and the module's offset probe goes in and
// counts every hit, on a guest kernel as on a process.
func TestFakeKindsRefused(t *testing.T) {
	const tpWhy = "tracepoint probes run on --target kernel only"
	t.Run("kernel", func(t *testing.T) {
		tg := fakeProcess(t)
		tg.Kernel = true
		tg.AddThread(1, fPush, 5)
		r := startFake(t, tg)
		probes, err := r.eng.Insert(compileKinds(t, "kernel", kindsSrc), engine.InsertNew)
		if err != nil {
			t.Fatal(err)
		}
		want := map[uint16][2]string{1: {"refused", tpWhy}, 2: {"active", ""}}
		checkStates(t, "insert", probes, want)
		r.runToEnd(t)
		lv, _, _ := r.eng.Vars("prog", false)
		if lv[0] != 5 {
			t.Errorf("the offset probe ran %d times, want 5", lv[0])
		}
		if n := len(r.records()); n != 0 {
			t.Errorf("%d records: a refused probe ran", n)
		}
	})
	t.Run("process", func(t *testing.T) {
		tg := fakeProcess(t)
		tg.AddThread(1, fPush, 3)
		r := startFake(t, tg)
		// tracepoints are the kernel's
		user := strings.Replace(kindsSrc, "tracepoint = sched:sched_switch\nminor = 1\npush field,prev_pid\nlog 1\nexit 1\n", "", 1)
		probes, err := r.eng.Insert(compileKinds(t, "user", user), engine.InsertNew)
		if err != nil {
			t.Fatal(err)
		}
		want := map[uint16][2]string{2: {"active", ""}}
		checkStates(t, "insert", probes, want)
		checkStates(t, "query", r.eng.Query(), want)
		r.runToEnd(t)
		if lv, _, _ := r.eng.Vars("prog", false); lv[0] != 3 {
			t.Errorf("the offset probe ran %d times, want 3", lv[0])
		}
	})
	t.Run("usdt on a process", func(t *testing.T) {
		// the fake target reads no static probes (Loaded.USDT nil): the
		// probe is refused saying so, the module's others go in
		tg := fakeProcess(t)
		tg.AddThread(1, fPush, 2)
		r := startFake(t, tg)
		user := strings.Replace(kindsSrc, "tracepoint = sched:sched_switch\nminor = 1\npush field,prev_pid\n", "usdt = app:tick\nminor = 1\npush arg,1\n", 1)
		probes, err := r.eng.Insert(compileKinds(t, "user", user), engine.InsertNew)
		if err != nil {
			t.Fatal(err)
		}
		want := map[uint16][2]string{1: {"refused", "usdt = app:tick: this target cannot read prog's static probes"}, 2: {"active", ""}}
		checkStates(t, "insert", probes, want)
		r.runToEnd(t)
		if lv, _, _ := r.eng.Vars("prog", false); lv[0] != 2 {
			t.Errorf("the offset probe ran %d times, want 2", lv[0])
		}
	})
	t.Run("kernel module on a process", func(t *testing.T) {
		// the module is refused whole; the tracepoint probe says why it
		// would be anyway, the others why the module is
		tg := fakeProcess(t)
		tg.AddThread(1, fPush, 1)
		r := startFake(t, tg)
		probes, err := r.eng.Insert(compileKinds(t, "kernel", kindsSrc), engine.InsertNew)
		if err != nil {
			t.Fatal(err)
		}
		checkStates(t, "insert", probes, map[uint16][2]string{1: {"refused", tpWhy}, 2: {"refused", "the fake target is a process"}})
	})
}

// The engine answers through its probe.Book as every Prober does: a merge
// whose file has two probes of one minor replaces the module's probes of
// that minor with both (before, the second's replacing took the first
// out) and restores the code of those it replaced; a remove of every
// minor takes the module with its last probe (before, the module stayed,
// empty, and kept the process attached); the errors are the book's.
func TestFakeBook(t *testing.T) {
	tg := fakeProcess(t)
	th := tg.AddThread(1, fPush, 3)
	start := th.Regs[rpn.RegRSP]
	r := startFake(t, tg)
	r.insert(t, "vars = 1\noffset = f_push\nminor = 1\ninc lv,0\nexit 1\noffset = f_load\nminor = 2\nexit 1\n")
	merged, err := r.eng.Insert(fakeModule(t, "vars = 2\noffset = f_push\nminor = 2\ninc lv,1\nexit 2\noffset = f_push\nminor = 2\ninc lv,1\nexit 2\n"), engine.InsertMerge)
	if err != nil || len(merged) != 2 || merged[0].State != engine.StateActive || merged[1].State != engine.StateActive {
		t.Fatalf("merge: %+v %v", merged, err)
	}
	var got []string
	for _, p := range r.eng.Query() {
		got = append(got, fmt.Sprintf("%d@%s", p.Minor, p.Location))
	}
	if fmt.Sprint(got) != "[1@f_push 2@f_push 2@f_push]" {
		t.Errorf("after the merge: %v, want minor 1 and the merge's two probes of minor 2", got)
	}
	// the probe the merge replaced is out, its code restored
	var b [3]byte
	tg.ReadMem(fake.Pid, fLoad, b[:])
	if b != [3]byte{0x48, 0x8b, 0x00} {
		t.Errorf("code at f_load % x after the merge, want the original", b)
	}
	if _, err := r.eng.Insert(fakeModule(t, "offset = f_push\nexit 1\n"), engine.InsertNew); err == nil ||
		err.Error() != "insert prog: module already inserted: use --merge to add these probes to it, or --replace to replace it" {
		t.Errorf("insert again: %v", err)
	}
	r.runToEnd(t)
	if lv, _, err := r.eng.Vars("prog", false); err != nil || fmt.Sprint(lv) != "[3 6]" {
		t.Errorf("lv %v %v, want [3 6]: 3 hits, two probes of minor 2", lv, err)
	}
	if pushes(th, start) != 3 {
		t.Errorf("%d pushes, want 3", pushes(th, start))
	}
	if n, err := r.eng.Remove("prog", []uint16{1, 2}); n != 3 || err != nil {
		t.Errorf("remove minors 1 and 2: %d %v", n, err)
	}
	if m := r.eng.Modules(); len(m) != 0 {
		t.Errorf("modules after its last probe went: %v", m)
	}
	if _, _, err := r.eng.Vars("prog", false); err == nil || err.Error() != `no module "prog"` {
		t.Errorf("vars of the module gone: %v", err)
	}
	if _, err := r.eng.Switch("nope", nil, true); err == nil || err.Error() != `no module "nope"` {
		t.Errorf("switch of no module: %v", err)
	}
}
