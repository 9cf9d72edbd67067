package engine_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/engine/entries"
	"github.com/gprobes/gprobes/engine/fake"
	"github.com/gprobes/gprobes/rpn"
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
		r.mu.Lock()
		r.recs = append(r.recs, *rec)
		r.mu.Unlock()
	})
	opts.Warn = func(msg string) { t.Errorf("engine warning: %s", msg) }
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
// books give: --route int3; the module's entries unknown; an entry inside
// the covered bytes; a thread stopped inside them; no room for the
// region. Each probe still runs, on its int3, every hit counted.
func TestFakeJumpRefusals(t *testing.T) {
	for _, c := range []struct {
		name, why string
		set       func(*fake.Target, *engine.Options)
		hits      uint64
	}{
		{"route int3", "", func(_ *fake.Target, o *engine.Options) { o.Route = engine.RouteInt3 }, 4},
		{"entries unknown", "what else enters the function is unknown", func(tg *fake.Target, _ *engine.Options) { tg.Entries = nil }, 4},
		{"entries failing", "what else enters the function is unknown: no file", func(tg *fake.Target, _ *engine.Options) {
			tg.Entries = func() (*entries.Set, error) { return nil, errors.New("no file") }
		}, 4},
		{"entry inside", "a branch at 0x1000 (c_main) lands inside the covered bytes (at 0x1062)", func(tg *fake.Target, _ *engine.Options) {
			tg.Entries = func() (*entries.Set, error) {
				return entries.New([]entries.Entry{{To: cWide + 2, From: cMain, Kind: entries.KindBranch}}), nil
			}
		}, 4},
		{"no room", ": no room", func(tg *fake.Target, _ *engine.Options) { tg.RefuseNextMap(errors.New("no room")) }, 4},
		{"thread inside", "thread 1 is inside the covered bytes (at 0x1062)", func(tg *fake.Target, _ *engine.Options) {
			// stopped in the middle of the covered bytes, past the
			// push: its first iteration goes on from there, past the
			// probe
			th := tg.Thread(1)
			th.Regs[rpn.RegRIP] = cWide + 2
			th.Regs[rpn.RegRSP] -= 8
		}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			tg := jumpProcess(t)
			tg.AddThread(1, cWide, 4)
			var opts engine.Options
			c.set(tg, &opts)
			r := startJump(t, tg, opts)
			r.insert(t, "vars = 1\noffset = c_wide\nminor = 1\ninc lv,0\nexit 1\n")
			if q := queryOf(t, r, 1); c.why == "" && q.How != "emulate" || c.why != "" && (!strings.HasPrefix(q.How, "int3 emulate: ") || !strings.HasSuffix(q.How, c.why)) {
				t.Errorf("HOW %q, want the int3 route because %s", q.How, c.why)
			}
			if b := code(t, tg, cWide, 1); b[0] != 0xcc {
				t.Errorf("c_wide starts % x, want an int3", b)
			}
			if p := tg.Patches(); len(p) != 0 {
				t.Errorf("patches %#x, want none", p)
			}
			r.runToEnd(t)
			if lv, _, _ := r.eng.Vars("prog", false); lv[0] != c.hits {
				t.Errorf("the probe ran %d times, want %d", lv[0], c.hits)
			}
		})
	}
}
