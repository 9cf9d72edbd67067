package engine_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/engine/entries"
	"github.com/gprobes/gprobes/engine/fake"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/symbols"
)

// The jump route's books on the fake (fake.JumpTarget): where pads and
// jumps are planted, that every one is taken out, and why a probe stays
// on an int3. The fake does not run a pad's code, so its threads never
// enter one here; the hits of pads are proven on real processes
// (ptrace's and cmd/gprobes' pad tests).

// jumpProcess is the call program with its entries known: each
// function's start, nothing inside them.
func jumpProcess(t *testing.T) *fake.Target {
	t.Helper()
	tg := callProcess(t)
	tg.Entries = func() (*entries.Set, error) {
		var list []entries.Entry
		for _, a := range []uint64{cMain, cLeaf, cTail, cCaller, cStore, cLoad, cWide} {
			list = append(list, entries.Entry{To: a, Kind: entries.KindSymbol})
		}
		return entries.New(list), nil
	}
	return tg
}

func startJump(t *testing.T, tg *fake.Target, opts engine.Options) *fakeRun {
	t.Helper()
	r := &fakeRun{tg: tg}
	opts.Sink = engine.SinkFunc(func(rec *engine.Record) {
		if r.onCommit != nil {
			r.onCommit(rec)
		}
		r.mu.Lock()
		r.recs = append(r.recs, *rec)
		r.mu.Unlock()
	})
	opts.Warn = func(msg string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.warned == nil {
			t.Errorf("engine warning: %s", msg)
			return
		}
		*r.warned = append(*r.warned, msg)
	}
	eng, err := engine.Start(func() (engine.Target, error) { return fake.JumpTarget{Target: tg}, nil }, opts)
	if err != nil {
		t.Fatal(err)
	}
	r.eng = eng
	t.Cleanup(func() { eng.Close() })
	return r
}

var wideCode = []byte{0x55, 0x90, 0x90, 0x90, 0x90, 0x5d, 0xc3}

// jumpTo is where the jump at addr leads, or 0 when there is none.
func jumpTo(t *testing.T, tg *fake.Target, addr uint64) uint64 {
	t.Helper()
	b := code(t, tg, addr, 5)
	if b[0] != 0xe9 {
		return 0
	}
	return addr + 5 + uint64(int64(int32(binary.LittleEndian.Uint32(b[1:]))))
}

// A probe where a jump fits goes on a jump to a pad: the jump covers
// whole instructions, journaled with the bytes under it; the pad is
// written in an area the engine mapped. A second probe at the address
// gets a new pad with both, the jump moved to it; removing one leaves a
// pad with the other; removing the last puts the original bytes back and
// takes the jump out of the journal. The threads, elsewhere, run on.
func TestFakeJumpPlaceAndRemove(t *testing.T) {
	tg := jumpProcess(t)
	tg.AddThread(1, cMain, 3)
	r := startJump(t, tg, engine.Options{})
	r.insert(t, "offset = c_wide\nminor = 1\npush r,rsp\nlog 1\nexit 1\n")
	if q := queryOf(t, r, 1); q.How != "jump" {
		t.Fatalf("HOW %q, want jump", q.How)
	}
	pad1 := jumpTo(t, tg, cWide)
	if pad1 == 0 || !tg.Mapped(pad1) {
		t.Fatalf("c_wide is % x: want a jump to a mapped pad", code(t, tg, cWide, 7))
	}
	if p := tg.Patches(); len(p) != 1 || p[0] != cWide {
		t.Errorf("journaled patches %#x, want c_wide's", p)
	}
	if b := code(t, tg, cWide+5, 2); !bytes.Equal(b, wideCode[5:]) {
		t.Errorf("past the jump: % x, want the original pop and ret", b)
	}
	// a second probe there: one pad with both
	infos, err := r.eng.Insert(fakeModule(t, "offset = c_wide\nminor = 2\npush r,rax\nlog 1\nexit 1\n"), engine.InsertMerge)
	if err != nil || len(infos) != 1 || infos[0].How != "jump" {
		t.Fatalf("merge: %+v %v", infos, err)
	}
	pad2 := jumpTo(t, tg, cWide)
	if pad2 == 0 || pad2 == pad1 {
		t.Errorf("the jump leads to %#x, want a new pad (the first at %#x)", pad2, pad1)
	}
	if n, err := r.eng.Remove("prog", []uint16{1}); n != 1 || err != nil {
		t.Fatalf("remove minor 1: %d %v", n, err)
	}
	pad3 := jumpTo(t, tg, cWide)
	if pad3 == 0 || pad3 == pad2 {
		t.Errorf("after the remove the jump leads to %#x, want a new pad for minor 2 alone (before: %#x)", pad3, pad2)
	}
	if q := queryOf(t, r, 2); q.State != engine.StateActive || q.How != "jump" {
		t.Errorf("minor 2 after minor 1 went: %s %q", q.State, q.How)
	}
	if n, err := r.eng.Remove("prog", []uint16{2}); n != 1 || err != nil {
		t.Fatalf("remove minor 2: %d %v", n, err)
	}
	if b := code(t, tg, cWide, 7); !bytes.Equal(b, wideCode) {
		t.Errorf("c_wide is % x after the last remove, want its original % x", b, wideCode)
	}
	if p := tg.Patches(); len(p) != 0 {
		t.Errorf("journaled patches %#x after the remove, want none", p)
	}
	r.runToEnd(t)
	if o := tg.Outcome(1); o != "exited" {
		t.Errorf("the thread ended %q", o)
	}
}

// Close with a jump in: the original bytes come back before the process
// is let go; the process runs to its end through them.
func TestFakeJumpClose(t *testing.T) {
	tg := jumpProcess(t)
	tg.AddThread(1, cWide, 3)
	r := startJump(t, tg, engine.Options{})
	r.insert(t, "offset = c_wide\nminor = 1\nexit 1\n")
	if jumpTo(t, tg, cWide) == 0 {
		t.Fatal("no jump at c_wide")
	}
	if _, err := r.eng.Close(); err != nil {
		t.Fatal(err)
	}
	if b := code(t, tg, cWide, 7); !bytes.Equal(b, wideCode) {
		t.Errorf("c_wide is % x after close, want % x", b, wideCode)
	}
	if p := tg.Patches(); len(p) != 0 {
		t.Errorf("journaled patches %#x after close, want none", p)
	}
	if o := tg.Outcome(1); o != "exited" {
		t.Errorf("the thread ended %q, want exited: it ran the original code", o)
	}
	if tg.Runs(cWide+1) != 3 {
		t.Errorf("c_wide's first nop ran %d times, want 3", tg.Runs(cWide+1))
	}
}

// Why a probe stays on an int3, in query's HOW, for each reason the
// books give (first is a probe inserted before, on an int3 too). Each
// probe still runs, on its int3, every hit counted.
func TestFakeJumpRefusals(t *testing.T) {
	sized := func(wide uint64, more ...symbols.Symbol) []symbols.Symbol {
		return append([]symbols.Symbol{
			{Name: "c_main", Addr: cMain, Size: 6, Kind: 'T'},
			{Name: "c_wide", Addr: cWide, Size: wide, Kind: 'T'},
		}, more...)
	}
	for _, c := range []struct {
		name, why string
		set       func(*fake.Target, *engine.Options)
		first     string
		probe     string
		hits      uint64
	}{
		{name: "route int3", set: func(_ *fake.Target, o *engine.Options) { o.Route = engine.RouteInt3 }},
		{name: "entries unknown", why: "what else enters the function is unknown", set: func(tg *fake.Target, _ *engine.Options) { tg.Entries = nil }},
		{name: "entries failing", why: "what else enters the function is unknown: no file", set: func(tg *fake.Target, _ *engine.Options) {
			tg.Entries = func() (*entries.Set, error) { return nil, errors.New("no file") }
		}},
		{name: "entry inside", why: "a branch at 0x1000 (c_main) lands inside the covered bytes (at 0x1062)", set: func(tg *fake.Target, _ *engine.Options) {
			tg.Entries = func() (*entries.Set, error) {
				return entries.New([]entries.Entry{{To: cWide + 2, From: cMain, Kind: entries.KindBranch}}), nil
			}
		}},
		{name: "no room", why: ": no room", set: func(tg *fake.Target, _ *engine.Options) { tg.RefuseNextMap(errors.New("no room")) }},
		{name: "thread inside", why: "thread 1 is inside the covered bytes (at 0x1062)", hits: 3, set: func(tg *fake.Target, _ *engine.Options) {
			// stopped in the middle of the covered bytes, past the
			// push: its first iteration goes on from there, past the
			// probe
			th := tg.Thread(1)
			th.Regs[rpn.RegRIP] = cWide + 2
			th.Regs[rpn.RegRSP] -= 8
		}},
		{name: "no size", why: "no function symbol with a size covers the address", set: func(tg *fake.Target, _ *engine.Options) { tg.SetSymbols(sized(0)) }},
		{name: "go", why: "Go code: goroutine stacks are too small for a pad's state", set: func(tg *fake.Target, _ *engine.Options) {
			tg.SetSymbols(sized(7, symbols.Symbol{Name: "runtime.morestack", Addr: 0x1100, Size: 1, Kind: 'T'}))
		}},
		{name: "too short", why: "", set: func(tg *fake.Target, _ *engine.Options) { tg.SetSymbols(sized(4)) }},
		{name: "shadow stack", why: "a call among the covered instructions, in a process with shadow stacks", probe: "c_main", hits: 0,
			set: func(tg *fake.Target, _ *engine.Options) { tg.ShadowStack = true }},
		// joins the int3 there: no jump tried
		{name: "int3 there", first: "offset = c_wide\nminor = 9\nlogonfault = yes\nexit 1\n"},
		// logonfault = yes: on an int3 (the bytes from c_wide+2 to the ret
		// would take a jump)
		{name: "int3 inside", why: "another breakpoint (0x1062) is inside the covered bytes", first: "offset = c_wide+2\nminor = 9\nlogonfault = yes\nexit 1\n"},
		// the thread runs elsewhere: the fake cannot run the first
		// probe's pad
		{name: "jump overlaps", why: "the jump of the probe at 0x1061 overlaps", first: "offset = c_wide+1\nminor = 9\nexit 1\n", hits: 0, probe: "c_wide",
			set: func(tg *fake.Target, _ *engine.Options) {
				th := tg.Thread(1)
				th.Entry, th.Regs[rpn.RegRIP] = cMain, cMain
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tg := jumpProcess(t)
			tg.AddThread(1, cWide, 4)
			var opts engine.Options
			if c.set != nil {
				c.set(tg, &opts)
			}
			r := startJump(t, tg, opts)
			probe, hits := "c_wide", uint64(4)
			if c.probe != "" {
				probe, hits = c.probe, c.hits
			} else if c.hits != 0 {
				hits = c.hits
			}
			mode := engine.InsertNew
			if c.first != "" {
				r.insert(t, "vars = 1\n"+c.first)
				mode = engine.InsertMerge
			}
			infos, err := r.eng.Insert(fakeModule(t, "vars = 1\noffset = "+probe+"\nminor = 1\ninc lv,0\nexit 1\n"), mode)
			if err != nil || len(infos) != 1 || infos[0].State != engine.StateActive {
				t.Fatalf("insert: %+v %v", infos, err)
			}
			q := queryOf(t, r, 1)
			switch {
			case c.name == "route int3" || c.name == "int3 there":
				if q.How != "emulate" {
					t.Errorf("HOW %q, want emulate (on an int3, as asked)", q.How)
				}
			case c.name == "too short":
				if !strings.HasPrefix(q.How, "int3 emulate: ") {
					t.Errorf("HOW %q, want the int3 route, and why", q.How)
				}
			case !strings.HasPrefix(q.How, "int3 ") || !strings.HasSuffix(q.How, c.why):
				t.Errorf("HOW %q, want the int3 route because %s", q.How, c.why)
			}
			if p := tg.Patches(); len(p) != 0 && c.name != "jump overlaps" {
				t.Errorf("patches %#x, want none", p)
			}
			r.runToEnd(t)
			if lv, _, _ := r.eng.Vars("prog", false); lv[0] != hits {
				t.Errorf("the probe ran %d times, want %d", lv[0], hits)
			}
		})
	}
}

// A jump's probes move to an int3 when a probe that cannot be in a pad
// comes: one inside the bytes the jump covers, one at its address that
// a pad cannot run (logonfault = yes), a return probe's breakpoint there.
// The jump goes (the original bytes back, out of the journal), and
// every probe counts every hit on the int3s.
func TestFakeJumpMovedToInt3(t *testing.T) {
	for _, c := range []struct {
		name, second, why string
		int3s             []uint64
	}{
		{"inside", "offset = c_wide+2\nminor = 2\nlogonfault = yes\ninc lv,1\nexit 1\n", "another probe (at 0x1062) is inside the bytes its jump would cover", []uint64{cWide, cWide + 2}},
		{"logonfault", "offset = c_wide\nminor = 2\nlogonfault = yes\ninc lv,1\nexit 1\n", "shares its address with a probe that cannot run in a pad (logonfault = yes: the record of a faulting step is the int3 route's)", []uint64{cWide}},
		// maxactive: its calls are tracked from the entry
		{"retprobe", "retprobe = c_wide\nminor = 2\nmaxactive = 4\ninc lv,1\nexit 1\n", "a return probe's breakpoint is at this address", []uint64{cWide, cWide + 6}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tg := jumpProcess(t)
			tg.AddThread(1, cWide, 5)
			r := startJump(t, tg, engine.Options{})
			r.insert(t, "vars = 2\noffset = c_wide\nminor = 1\ninc lv,0\nexit 1\n")
			if jumpTo(t, tg, cWide) == 0 {
				t.Fatal("no jump at c_wide")
			}
			infos, err := r.eng.Insert(fakeModule(t, "vars = 2\n"+c.second), engine.InsertMerge)
			if err != nil || len(infos) != 1 || infos[0].State != engine.StateActive {
				t.Fatalf("the second probe: %+v %v", infos, err)
			}
			if q := queryOf(t, r, 1); q.How != "int3 emulate: "+c.why {
				t.Errorf("the first probe's HOW %q, want on an int3 because %s", q.How, c.why)
			}
			if p := tg.Patches(); len(p) != 0 {
				t.Errorf("patches %#x, want none", p)
			}
			want := append([]byte{}, wideCode...)
			for _, a := range c.int3s {
				want[a-cWide] = 0xcc
			}
			if b := code(t, tg, cWide, 7); !bytes.Equal(b, want) {
				t.Errorf("c_wide is % x, want % x: int3s on the original code", b, want)
			}
			r.runToEnd(t)
			if o := tg.Outcome(1); o != "exited" {
				t.Fatalf("the thread ended %q", o)
			}
			if lv, _, _ := r.eng.Vars("prog", false); lv[0] != 5 || lv[1] != 5 {
				t.Errorf("the probes ran %d and %d times, want 5 each", lv[0], lv[1])
			}
		})
	}
}

// The process ends with a jump in: the engine ends with it, no warning,
// nothing of the process's left in its books (the region released).
func TestFakeJumpProcessExit(t *testing.T) {
	tg := jumpProcess(t)
	tg.AddThread(1, cMain, 2)
	tg.AddThread(2, cLeaf, 3)
	r := startJump(t, tg, engine.Options{})
	r.insert(t, "offset = c_wide\nminor = 1\nexit 1\n")
	region := jumpTo(t, tg, cWide)
	if region == 0 {
		t.Fatal("no jump at c_wide")
	}
	r.runToEnd(t)
	for tid := 1; tid <= 2; tid++ {
		if o := tg.Outcome(tid); o != "exited" {
			t.Errorf("thread %d ended %q", tid, o)
		}
	}
	if q := queryOf(t, r, 1); q.Hits != 0 {
		t.Errorf("%d hits of a pad no thread entered", q.Hits)
	}
}

// A jump goes in while the process runs (a merge on a hit of another
// probe's): the engine stops the running threads for the patch and lets
// them go again; every hit of the int3 probe is counted.
func TestFakeJumpWhileRunning(t *testing.T) {
	const n = 6
	tg := jumpProcess(t)
	tg.AddThread(1, cMain, n)
	tg.AddThread(2, cMain, n)
	r := startJump(t, tg, engine.Options{})
	kicked := onKick(tg)
	merged := make(chan error, 1)
	r.onCommit = func(*engine.Record) {
		if len(r.records()) == 1 {
			go func() {
				infos, err := r.eng.Insert(fakeModule(t, "offset = c_wide\nminor = 2\nexit 1\n"), engine.InsertMerge)
				if err == nil && (len(infos) != 1 || infos[0].How != "jump") {
					err = fmt.Errorf("the merged probe: %+v, want on a jump", infos)
				}
				merged <- err
			}()
			<-kicked
		}
	}
	r.insert(t, "offset = c_leaf\nminor = 1\npush r,rsp\nlog 1\nexit 1\n")
	r.runToEnd(t)
	if err := <-merged; err != nil {
		t.Fatal(err)
	}
	if jumpTo(t, tg, cWide) == 0 {
		t.Error("no jump at c_wide")
	}
	for tid := 1; tid <= 2; tid++ {
		if o := tg.Outcome(tid); o != "exited" {
			t.Errorf("thread %d ended %q", tid, o)
		}
	}
	if got := len(recordsOf(r.records(), 1)); got != 2*n {
		t.Errorf("%d hits of c_leaf, want %d", got, 2*n)
	}
}

// A signal that comes for a thread inside a pad is held until the thread
// leaves it: its signals blocked (the signal pending in the kernel), the
// held byte of every pad area set, system-call stops asked for. Close
// gives the thread its mask back and clears the held byte, with the jump
// taken out. (The fake cannot run the pad: the thread, let go inside it,
// dies of the first instruction the fake does not know; a real process
// runs the pad to its end, and its signal comes then: ptrace's tests.)
func TestFakeJumpSignalHeld(t *testing.T) {
	tg := jumpProcess(t)
	th := tg.AddThread(1, cWide, 2)
	r := startJump(t, tg, engine.Options{})
	r.insert(t, "offset = c_wide\nminor = 1\nexit 1\n")
	pad := jumpTo(t, tg, cWide)
	if pad == 0 {
		t.Fatal("no jump at c_wide")
	}
	held := tg.HeldBytes()
	if len(held) == 0 {
		t.Fatal("no pad area journaled")
	}
	th.SignalAt, th.Signal = pad, 10 // SIGUSR1, at the pad's first instruction
	var warned []string
	r.mu.Lock()
	r.warned = &warned
	r.mu.Unlock()
	heldBytes := func() []byte {
		b := make([]byte, len(held))
		for i, a := range held {
			if err := tg.ReadMem(fake.Pid, a, b[i:i+1]); err != nil {
				t.Error(err)
			}
		}
		return b
	}
	kicked := onKick(tg)
	closed := make(chan error, 1)
	tg.OnResume = func(tid, sig int) {
		if sig != 10 {
			return
		}
		// the engine let the thread go on in its pad with the signal
		if th.Blocked != 1 || fmt.Sprint(th.Pending) != "[10]" {
			t.Errorf("thread: blocked %d, pending %v; want its signals blocked, SIGUSR1 pending", th.Blocked, th.Pending)
		}
		if b := heldBytes(); !bytes.Equal(b, bytes.Repeat([]byte{1}, len(held))) {
			t.Errorf("held bytes % x, want every one set", b)
		}
		go func() { _, err := r.eng.Close(); closed <- err }()
		<-kicked
	}
	if err := r.eng.Release(); err != nil {
		t.Fatal(err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	want := fmt.Sprintf("stay mapped: thread 1 is inside gprobes' code (at %#x)", pad)
	if len(warned) != 1 || !strings.HasSuffix(warned[0], want) {
		t.Errorf("warnings %q, want one: the areas %s", warned, want)
	}
	r.mu.Unlock()
	if th.Blocked != 0 {
		t.Errorf("after close the thread's signals are blocked %d times, want its mask back", th.Blocked)
	}
	if b := heldBytes(); !bytes.Equal(b, make([]byte, len(held))) {
		t.Errorf("held bytes % x after close, want 0", b)
	}
	if b := code(t, tg, cWide, 7); !bytes.Equal(b, wideCode) {
		t.Errorf("c_wide is % x after close, want % x", b, wideCode)
	}
}

// A return probe that needs nothing from the entry goes on a jump over
// its function's ret, to a pad (return pads); removing it puts the
// function's bytes back, out of the journal, and so does Close for one
// still in.
func TestFakeRetPadPlaceAndRemove(t *testing.T) {
	tg := jumpProcess(t)
	tg.AddThread(1, cMain, 2)
	r := startJump(t, tg, engine.Options{})
	r.insert(t, "retprobe = c_wide\nminor = 1\npush r,rax\nlog 1\nexit 1\n")
	q := queryOf(t, r, 1)
	if !strings.HasPrefix(q.How, "jump") {
		t.Fatalf("HOW %q, want the return on a jump", q.How)
	}
	p := tg.Patches()
	if len(p) != 1 || p[0] <= cWide || p[0] > cWide+6 {
		t.Fatalf("patches %#x, want one jump inside c_wide, over its ret", p)
	}
	if to := jumpTo(t, tg, p[0]); to == 0 || !tg.Mapped(to) {
		t.Errorf("at %#x: % x, want a jump to a mapped pad", p[0], code(t, tg, p[0], 5))
	}
	if n, err := r.eng.Remove("prog", []uint16{1}); n != 1 || err != nil {
		t.Fatalf("remove: %d %v", n, err)
	}
	if b := code(t, tg, cWide, 7); !bytes.Equal(b, wideCode) {
		t.Errorf("c_wide is % x after the remove, want % x", b, wideCode)
	}
	if p := tg.Patches(); len(p) != 0 {
		t.Errorf("patches %#x after the remove, want none", p)
	}
	r.insert(t, "retprobe = c_wide\nminor = 2\nexit 1\n")
	if len(tg.Patches()) != 1 {
		t.Fatalf("patches %#x, want the return's jump again", tg.Patches())
	}
	if _, err := r.eng.Close(); err != nil {
		t.Fatal(err)
	}
	if b := code(t, tg, cWide, 7); !bytes.Equal(b, wideCode) {
		t.Errorf("c_wide is % x after close, want % x", b, wideCode)
	}
	if p := tg.Patches(); len(p) != 0 {
		t.Errorf("patches %#x after close, want none", p)
	}
	if o := tg.Outcome(1); o != "exited" {
		t.Errorf("the thread ended %q", o)
	}
}
