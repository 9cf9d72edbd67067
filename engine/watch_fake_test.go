package engine_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/engine/fake"
	"github.com/gprobes/gprobes/rpn"
)

// startWatch is an engine on the fake with debug registers.
func startWatch(t *testing.T, tg *fake.Target) *fakeRun {
	t.Helper()
	r := &fakeRun{tg: tg}
	eng, err := engine.Start(func() (engine.Target, error) { return fake.WatchTarget{Target: tg}, nil }, engine.Options{
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

// A w watch runs after every write of its bytes, once each, with the
// value written and rip the next instruction; reads of them and writes
// next to them fire nothing. Close turns the register off.
func TestFakeWatchWrites(t *testing.T) {
	const n = 6
	tg := callProcess(t)
	th := tg.AddThread(1, cStore, n)
	th.Regs[rpn.RegRBX], th.Regs[rpn.RegRAX] = data+0x108, 0x1234
	other := tg.AddThread(2, cStore, n)
	other.Regs[rpn.RegRBX] = data + 0x110 // the next cell: not watched
	reader := tg.AddThread(3, cLoad, 1)
	reader.Regs[rpn.RegRAX] = data + 0x108 // reads the cell: a w watch ignores it
	r := startWatch(t, tg)
	r.insert(t, "watch = cell1,8,w\nminor = 1\npush d,cell1\npush mrf,8\npush r,rip\npush r,rbx\nlog 3\nexit 1\n")
	if q := queryOf(t, r, 1); q.How != "watch DR0" {
		t.Errorf("HOW %q, want watch DR0", q.How)
	}
	if w := tg.Watched(0); w == nil || w.Addr != data+0x108 || w.Len != 8 || w.Mode != rpn.WatchWrite {
		t.Fatalf("DR0 watches %v, want 8 bytes at %#x, writes", w, data+0x108)
	}
	// close after n-2 writes: the register goes, and the thread runs on
	// natively (a register left set would kill it with SIGTRAP)
	kicked := onKick(tg)
	closed := make(chan error, 1)
	r.onCommit = func(*engine.Record) {
		if len(r.records()) == n-3 {
			go func() { _, err := r.eng.Close(); closed <- err }()
			<-kicked
		}
	}
	if err := r.eng.Release(); err != nil {
		t.Fatal(err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if w := tg.Watched(0); w != nil {
		t.Errorf("DR0 still watches %v after close", w)
	}
	for tid := 1; tid <= 3; tid++ {
		if o := tg.Outcome(tid); o != "exited" {
			t.Errorf("thread %d ended %q", tid, o)
		}
	}
	recs := r.records()
	if len(recs) != n-2 {
		t.Fatalf("%d records, want %d: one per write of the cell before the close", len(recs), n-2)
	}
	for i, rec := range recs {
		if w := words(rec); w[0] != 0x1234 || w[1] != cStore+3 || w[2] != data+0x108 || rec.Probe != "watch" || rec.Tid != 1 {
			t.Errorf("record %d: %s thread %d %#x, want the value written, rip after the store, thread 1", i, rec.Probe, rec.Tid, w)
		}
	}
}

// An rw watch fires on reads too.
func TestFakeWatchReads(t *testing.T) {
	tg := callProcess(t)
	th := tg.AddThread(1, cLoad, 1)
	th.Regs[rpn.RegRAX] = data + 0x100
	r := startWatch(t, tg)
	r.insert(t, "watch = cell0,8,rw\nminor = 1\npush r,rip\nlog 1\nexit 1\n")
	r.runToEnd(t)
	recs := r.records()
	if len(recs) != 1 || words(recs[0])[0] != cLoad+3 {
		t.Errorf("records %+v, want one, at rip %#x", recs, cLoad+3)
	}
}

// Four registers: a fifth watch is refused naming the four users; the
// register a removed watch gave back (turned off in the process) goes to
// the next watch inserted.
func TestFakeWatchRegisters(t *testing.T) {
	tg := callProcess(t)
	tg.AddThread(1, cMain, 1)
	r := startWatch(t, tg)
	for i := range 4 {
		f := fakeModule(t, fmt.Sprintf("watch = cell%d,8,w\nminor = %d\nexit 1\n", i, i+1))
		if _, err := r.eng.Insert(f, map[bool]engine.InsertMode{true: engine.InsertNew, false: engine.InsertMerge}[i == 0]); err != nil {
			t.Fatal(err)
		}
	}
	for slot := range 4 {
		if w := tg.Watched(slot); w == nil || w.Addr != data+0x100+8*uint64(slot) {
			t.Errorf("DR%d watches %v, want cell%d", slot, w, slot)
		}
	}
	infos, err := r.eng.Insert(fakeModule(t, "watch = cell4,8,w\nminor = 5\nexit 1\n"), engine.InsertMerge)
	if err != nil {
		t.Fatal(err)
	}
	want := "no debug register left for watch = cell4: a target has four, for watches and debug-register breakpoints together, and all are in use (DR0 watch = cell0 (prog minor 1); DR1 watch = cell1 (prog minor 2); DR2 watch = cell2 (prog minor 3); DR3 watch = cell3 (prog minor 4)); remove one"
	if len(infos) != 1 || infos[0].State != engine.StateRefused || infos[0].Reason != want {
		t.Fatalf("the fifth: %+v\nwant refused: %s", infos, want)
	}
	if n, err := r.eng.Remove("prog", []uint16{3}); n != 1 || err != nil {
		t.Fatalf("remove minor 3: %d %v", n, err)
	}
	if w := tg.Watched(2); w != nil {
		t.Errorf("DR2 still watches %v after its probe's removal", w)
	}
	infos, err = r.eng.Insert(fakeModule(t, "watch = cell4,8,w\nminor = 5\nexit 1\n"), engine.InsertMerge)
	if err != nil || len(infos) != 1 || infos[0].State != engine.StateActive || infos[0].How != "watch DR2" {
		t.Fatalf("the fifth again: %+v %v, want active in DR2", infos, err)
	}
	if w := tg.Watched(2); w == nil || w.Addr != data+0x120 {
		t.Errorf("DR2 watches %v, want cell4", w)
	}
	r.runToEnd(t)
}

// A watch whose address is not a multiple of its length is refused, and
// a target without debug registers refuses every watch; both say why.
func TestFakeWatchRefused(t *testing.T) {
	tg := callProcess(t)
	tg.AddThread(1, cMain, 1)
	r := startWatch(t, tg)
	infos, err := r.eng.Insert(fakeModule(t, "watch = cell0+4,8,w\nminor = 1\nexit 1\n"), engine.InsertNew)
	if err != nil || len(infos) != 1 || infos[0].State != engine.StateRefused || !strings.Contains(infos[0].Reason, "is not a multiple of its length 8") {
		t.Fatalf("unaligned: %+v %v", infos, err)
	}
	if w := tg.Watched(0); w != nil {
		t.Errorf("DR0 watches %v for a refused probe", w)
	}
	// the register it had is free again
	infos, err = r.eng.Insert(fakeModule(t, "watch = cell0,8,w\nminor = 2\nexit 1\n"), engine.InsertReplace)
	if err != nil || len(infos) != 1 || infos[0].How != "watch DR0" {
		t.Fatalf("aligned: %+v %v", infos, err)
	}
	r.runToEnd(t)

	tg2 := callProcess(t)
	tg2.AddThread(1, cMain, 1)
	r2 := startFake(t, tg2)
	infos, err = r2.eng.Insert(fakeModule(t, "watch = cell0,8,w\nminor = 1\nexit 1\n"), engine.InsertNew)
	if err != nil || len(infos) != 1 || infos[0].State != engine.StateRefused || infos[0].Reason != "watch probes need debug registers, which this target does not give" {
		t.Fatalf("no debug registers: %+v %v", infos, err)
	}
	r2.runToEnd(t)
}

// A write made by an instruction the engine runs for an offset probe
// (displaced from under its int3) is the program's: the watch runs for
// it, once, after the offset probe, though no debug register saw it.
func TestFakeWatchDisplacedWrite(t *testing.T) {
	const n = 4
	tg := callProcess(t)
	th := tg.AddThread(1, cStore, n)
	th.Regs[rpn.RegRBX], th.Regs[rpn.RegRAX] = data+0x100, 7
	r := startWatch(t, tg)
	r.insert(t, "offset = c_store\nminor = 1\npush r,rip\nlog 1\nexit 1\nwatch = cell0,8,w\nminor = 2\npush d,cell0\npush mrf,8\npush r,rip\nlog 2\nexit 1\n")
	r.runToEnd(t)
	var got []string
	for _, rec := range r.records() {
		got = append(got, fmt.Sprintf("%d:%#x", rec.Minor, words(rec)))
	}
	want := strings.Repeat(fmt.Sprintf("1:[%#x] 2:[0x7 %#x] ", cStore, cStore+3), n)
	if strings.Join(got, " ")+" " != want {
		t.Errorf("records %v\nwant %s", got, want)
	}
	if q := queryOf(t, r, 2); q.Hits != n {
		t.Errorf("query: the watch has %d hits, want %d", q.Hits, n)
	}
}

// A write made by an instruction the engine emulates for an offset probe
// (the push under its int3, never run by the thread) is the program's
// write all the same: the watch on the stack word it writes runs once
// per push, after the offset probe, with the value pushed.
func TestFakeWatchEmulatedWrite(t *testing.T) {
	const n = 3
	tg := callProcess(t)
	th := tg.AddThread(1, cLeaf, n)
	th.Regs[rpn.RegRBP] = 0xabc
	slot := th.Regs[rpn.RegRSP] - 8 // where c_leaf's push writes
	r := startWatch(t, tg)
	r.insert(t, fmt.Sprintf("offset = c_leaf\nminor = 1\npush r,rsp\nlog 1\nexit 1\nwatch = %#x,8,w\nminor = 2\npush d,%#x\npush mrf,8\npush r,rip\nlog 2\nexit 1\n", slot, slot))
	if q := queryOf(t, r, 1); !strings.Contains(q.How, "emulate") {
		t.Fatalf("the offset probe runs by %q, want the push emulated", q.How)
	}
	r.runToEnd(t)
	var got []string
	for _, rec := range r.records() {
		got = append(got, fmt.Sprintf("%d:%#x", rec.Minor, words(rec)))
	}
	want := strings.Repeat(fmt.Sprintf("1:[%#x] 2:[0xabc %#x] ", slot+8, cLeaf+1), n)
	if strings.Join(got, " ")+" " != want {
		t.Errorf("records %v\nwant %s", got, want)
	}
	if tg.Runs(cLeaf) != 0 {
		t.Errorf("the push ran %d times in the thread, want 0 (emulated)", tg.Runs(cLeaf))
	}
}
