package engine_test

import (
	"encoding/binary"
	"fmt"
	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"slices"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/engine/fake"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/symbols"
)

// A program of calls for return probes (fake.Target.Calls): each
// iteration calls the thread's function, which returns to fake.Home.
const (
	cMain   = 0x1000 // call c_leaf; ret
	cLeaf   = 0x1010 // push %rbp; nop; pop %rbp; ret
	cTail   = 0x1020 // push %rbp; pop %rbp; jmp c_leaf (a tail call)
	cCaller = 0x1030 // call c_tail; ret
	cStore  = 0x1040 // mov %rax,(%rbx); nop; ret
	cLoad   = 0x1050 // mov (%rax),%rax; ret
	cWide   = 0x1060 // push %rbp; 4 nops; pop %rbp; ret: room for a jump
	cEnd    = 0x1070
)

// Where the calls return to: after c_main's call of c_leaf, after
// c_caller's call of c_tail.
const (
	cMainNext   = cMain + 5
	cCallerNext = cCaller + 5
)

func rel32(from, next, to uint64) []byte {
	b := []byte{0, 0, 0, 0}
	binary.LittleEndian.PutUint32(b, uint32(int32(int64(to)-int64(next))))
	_ = from
	return b
}

// callProcess is the fake process of the call program, with sized
// symbols (a function's end is known, as from an ELF file).
func callProcess(t *testing.T) *fake.Target {
	t.Helper()
	code := make([]byte, cEnd-cMain)
	put := func(at uint64, b ...byte) { copy(code[at-cMain:], b) }
	put(cMain, append(append([]byte{0xe8}, rel32(cMain, cMain+5, cLeaf)...), 0xc3)...)
	put(cLeaf, 0x55, 0x90, 0x5d, 0xc3)
	put(cTail, append([]byte{0x55, 0x5d, 0xe9}, rel32(cTail+2, cTail+7, cLeaf)...)...)
	put(cCaller, append(append([]byte{0xe8}, rel32(cCaller, cCaller+5, cTail)...), 0xc3)...)
	put(cStore, 0x48, 0x89, 0x03, 0x90, 0xc3)
	put(cLoad, 0x48, 0x8b, 0x00, 0xc3)
	put(cWide, 0x55, 0x90, 0x90, 0x90, 0x90, 0x5d, 0xc3)
	tg, err := fake.New("prog", cMain, code, fmt.Sprintf("%016x T c_main\n", cMain))
	if err != nil {
		t.Fatal(err)
	}
	tg.SetSymbols([]symbols.Symbol{
		{Name: "c_main", Addr: cMain, Size: 6, Kind: 'T'},
		{Name: "c_leaf", Addr: cLeaf, Size: 4, Kind: 'T'},
		{Name: "c_tail", Addr: cTail, Size: 7, Kind: 'T'},
		{Name: "c_caller", Addr: cCaller, Size: 6, Kind: 'T'},
		{Name: "c_store", Addr: cStore, Size: 5, Kind: 'T'},
		{Name: "c_load", Addr: cLoad, Size: 4, Kind: 'T'},
		{Name: "c_wide", Addr: cWide, Size: 7, Kind: 'T'},
		// cells for watch probes
		{Name: "cell0", Addr: data + 0x100, Size: 8, Kind: 'D'},
		{Name: "cell1", Addr: data + 0x108, Size: 8, Kind: 'D'},
		{Name: "cell2", Addr: data + 0x110, Size: 8, Kind: 'D'},
		{Name: "cell3", Addr: data + 0x118, Size: 8, Kind: 'D'},
		{Name: "cell4", Addr: data + 0x120, Size: 8, Kind: 'D'},
	})
	tg.Calls = true
	tg.Map(data, 4096, true)
	return tg
}

// code reads n bytes of the fake's memory.
func code(t *testing.T, tg *fake.Target, addr uint64, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if err := tg.ReadMem(fake.Pid, addr, b); err != nil {
		t.Fatal(err)
	}
	return b
}

// words are a record's logged values.
func words(rec engine.Record) []uint64 {
	var out []uint64
	for i := 0; i+8 <= len(rec.Data); i += 8 {
		out = append(out, binary.LittleEndian.Uint64(rec.Data[i:]))
	}
	return out
}

func recordsOf(recs []engine.Record, minor uint16) []engine.Record {
	var out []engine.Record
	for _, r := range recs {
		if r.Minor == minor {
			out = append(out, r)
		}
	}
	return out
}

func queryOf(t *testing.T, r *fakeRun, minor uint16) engine.ProbeInfo {
	t.Helper()
	for _, p := range r.eng.Query() {
		if p.Minor == minor {
			return p
		}
	}
	t.Fatalf("no probe of minor %d", minor)
	return engine.ProbeInfo{}
}

// A return probe runs once per call, after the ret, with the registers
// the caller sees (rip the return address, rsp 8 above the entry's), and
// reads the instance variables its call's entry stored. The entry and
// the ret get breakpoints, nothing else; the program runs as it would.
func TestFakeRetprobeEveryCall(t *testing.T) {
	const n = 7
	tg := callProcess(t)
	th := tg.AddThread(1, cMain, n)
	start := th.Regs[rpn.RegRSP]
	r := startFake(t, tg)
	r.insert(t, `offset = c_leaf
minor = 1
push r,rsp
pop iv,0
exit 0
retprobe = c_leaf
minor = 2
push iv,0
push r,rsp
push r,rip
log 3
exit 1
`)
	if how := queryOf(t, r, 2).How; how != "ret: entry and 1 return" {
		t.Errorf("HOW %q, want the entry and one return", how)
	}
	// the breakpoints: the entry's and the ret's, no more
	if b := code(t, tg, cLeaf, 4); b[0] != 0xcc || b[1] != 0x90 || b[2] != 0x5d || b[3] != 0xcc {
		t.Errorf("c_leaf is % x with the probe in, want int3s on its entry and its ret only", b)
	}
	r.runToEnd(t)
	if o := tg.Outcome(1); o != "exited" {
		t.Fatalf("the program ended %q", o)
	}
	if th.Regs[rpn.RegRSP] != start+8 {
		t.Errorf("rsp %#x at the end, want %#x (the last return to Home popped): the emulated ret or the stepped push and pop moved the stack", th.Regs[rpn.RegRSP], start+8)
	}
	rets := recordsOf(r.records(), 2)
	if len(rets) != n {
		t.Fatalf("%d return records, want %d (one per call)", len(rets), n)
	}
	for i, rec := range rets {
		w := words(rec)
		if len(w) != 3 || w[1] != w[0]+8 || w[2] != cMainNext || rec.Probe != "retprobe" {
			t.Errorf("return %d: %s %#x: want iv 0 = the entry's rsp, rsp 8 above it, rip %#x", i, rec.Probe, w, cMainNext)
		}
	}
	if got := tg.Runs(cLeaf + 1); got != n {
		t.Errorf("c_leaf's nop ran %d times, want %d", got, n)
	}
}

// Without instance variables a return probe needs no entry stop; it runs
// at every return. Removing it takes out its breakpoint, the original
// byte back, and the thread runs on with no stop.
func TestFakeRetprobeRemove(t *testing.T) {
	tg := callProcess(t)
	tg.AddThread(1, cMain, 10)
	r := startFake(t, tg)
	kicked := onKick(tg)
	removed := make(chan error, 1)
	r.onCommit = func(*engine.Record) {
		if len(r.records()) == 2 {
			// the third return: the remove runs before the thread goes on
			go func() {
				n, err := r.eng.Remove("prog", []uint16{1})
				if err == nil && n != 1 {
					err = fmt.Errorf("removed %d probes, want 1", n)
				}
				removed <- err
			}()
			<-kicked
		}
	}
	r.insert(t, "retprobe = c_leaf\nminor = 1\npush r,rax\nlog 1\nexit 1\n")
	if how := queryOf(t, r, 1).How; how != "ret: 1 return, no entry stop" {
		t.Errorf("HOW %q", how)
	}
	if b := code(t, tg, cLeaf, 4); string(b) != "\x55\x90\x5d\xcc" {
		t.Errorf("c_leaf is % x, want an int3 on its ret only", b)
	}
	if b := code(t, tg, cLeaf, 4); string(b) != "\x55\x90\x5d\xcc" {
		t.Errorf("c_leaf is % x, want an int3 on its ret only", b)
	}
	r.runToEnd(t)
	if err := <-removed; err != nil {
		t.Fatal(err)
	}
	if b := code(t, tg, cLeaf, 4); string(b) != "\x55\x90\x5d\xc3" {
		t.Errorf("c_leaf is % x after the remove, want its original bytes", b)
	}
	if o := tg.Outcome(1); o != "exited" {
		t.Fatalf("the program ended %q: a breakpoint was left behind", o)
	}
	if got := len(recordsOf(r.records(), 1)); got != 3 {
		t.Errorf("%d return records, want 3: the probe ran after its removal", got)
	}
	if got := tg.Runs(cLeaf + 1); got != 10 {
		t.Errorf("c_leaf ran %d times, want 10", got)
	}
}

// A function left by a jump (a tail call) returns to its caller's
// caller: the return probe runs there, at the return address, where a
// "caller" breakpoint is planted when a call first leaves by the jump.
// Close takes every breakpoint out, the caller's included.
func TestFakeRetprobeTailCall(t *testing.T) {
	const n = 5
	tg := callProcess(t)
	tg.AddThread(1, cCaller, n)
	r := startFake(t, tg)
	r.insert(t, "retprobe = c_tail\nminor = 1\npush r,rip\npush r,rsp\nlog 2\nexit 1\nretprobe = c_leaf\nminor = 2\npush r,rip\nlog 1\nexit 1\n")
	if how := queryOf(t, r, 1).How; !strings.Contains(how, "1 jump out") {
		t.Errorf("c_tail's HOW %q, want its jump out", how)
	}
	// let the calls run, then close: the engine lets the process go
	// with every breakpoint out, while it runs
	kicked := onKick(tg)
	closed := make(chan error, 1)
	r.onCommit = func(*engine.Record) {
		if len(r.records()) == 2*(n-2)-1 {
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
	if o := tg.Outcome(1); o != "exited" {
		t.Fatalf("the program ended %q: a breakpoint was left behind", o)
	}
	for _, a := range []uint64{cTail, cLeaf, cLeaf + 3, cCaller + 5} {
		if b := code(t, tg, a, 1); b[0] == 0xcc {
			t.Errorf("an int3 left at %#x after close", a)
		}
	}
	tail, leaf := recordsOf(r.records(), 1), recordsOf(r.records(), 2)
	if len(tail) != n-2 || len(leaf) != n-2 {
		t.Fatalf("%d returns of c_tail and %d of c_leaf, want %d of each: the calls before the close, none after", len(tail), len(leaf), n-2)
	}
	for i, rec := range tail {
		if w := words(rec); w[0] != cCallerNext {
			t.Errorf("c_tail's return %d at %#x, want %#x (in c_caller, after its call)", i, w[0], cCallerNext)
		}
	}
	for i, rec := range leaf {
		if w := words(rec); w[0] != cCallerNext {
			t.Errorf("c_leaf's return %d at %#x, want %#x (c_tail's caller)", i, w[0], cCallerNext)
		}
	}
}

// onKick reports each Kick of the engine's (a command waiting), for a
// test that must know its command is queued before the loop goes on.
func onKick(tg *fake.Target) chan struct{} {
	kicked := make(chan struct{}, 1)
	tg.OnKick = func() {
		select {
		case kicked <- struct{}{}:
		default:
		}
	}
	return kicked
}

// A return probe in a guest kernel's module that unloads and loads again
// (the fake's ModLoad): its entry and ret breakpoints are forgotten at
// the unload (nothing written back: the code is gone), the probe goes
// pending, and it is placed again at the next load, each return seen
// once. One iteration: rendezvous, call k_mod, rendezvous, a nop that
// counts the iterations, ret. The module is loaded in iterations 1-2 and
// 4-5.
func TestFakeRetprobeModuleUnload(t *testing.T) {
	const (
		rv1, call, rv2, counter, kMod = 0x1000, 0x1001, 0x1006, 0x1007, 0x1010
	)
	code := make([]byte, 0x20)
	copy(code, []byte{0x90, 0xe8})
	copy(code[2:], rel32(call, call+5, kMod))
	copy(code[6:], []byte{0x90, 0x90, 0xc3})
	copy(code[0x10:], []byte{0x55, 0x5d, 0xc3})
	tg, err := fake.New("prog", 0x1000, code, fmt.Sprintf("%016x T k_iter\n", rv1))
	if err != nil {
		t.Fatal(err)
	}
	tg.SetSymbols([]symbols.Symbol{{Name: "k_iter", Addr: rv1, Size: 9, Kind: 'T'}, {Name: "k_mod", Addr: kMod, Size: 3, Kind: 't'}})
	tg.Kernel, tg.Calls = true, true
	tg.ModName = "kmod"
	tg.ModExec = [2]uint64{kMod, kMod + 3}
	tg.RendezvousAt = []uint64{rv1, rv2}
	loads := []int{0, 1, 1, 0, 2, 2}
	tg.ModLoad = func() int { return loads[tg.Runs(counter)] }
	tg.AddThread(1, rv1, len(loads))
	r := startFake(t, tg)
	f, err := dpdf.ParseSource("kmod.dpdf", []byte("name = kmod\nmodtype = kernel\noffset = k_mod\nminor = 1\npush r,rsp\npop iv,0\nexit 0\nretprobe = k_mod\nminor = 2\npush iv,0\npush r,rsp\npush r,rip\nlog 3\nexit 1\n"), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := compiler.Compile(f, rpn.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	infos, err := r.eng.Insert(m, engine.InsertNew)
	if err != nil || len(infos) != 2 || infos[1].State != engine.StatePending {
		t.Fatalf("inserted before the load: %+v %v", infos, err)
	}
	r.runToEnd(t)
	if o := tg.Outcome(1); o != "exited" {
		t.Fatalf("the thread: %s", o)
	}
	rets := recordsOf(r.records(), 2)
	if len(rets) != 4 {
		t.Fatalf("%d returns, want 4 (two per load)", len(rets))
	}
	for i, rec := range rets {
		if w := words(rec); w[1] != w[0]+8 || w[2] != call+5 {
			t.Errorf("return %d: %#x, want rsp 8 above the entry's and rip %#x", i, w, call+5)
		}
	}
	slices.Sort(tg.Forgotten)
	if !slices.Equal(tg.Forgotten, []uint64{kMod, kMod + 2}) {
		t.Errorf("forgotten breakpoints %#x, want the entry's and the ret's once (the unload)", tg.Forgotten)
	}
	if n := tg.Runs(kMod + 1); n != 6 {
		t.Errorf("k_mod's pop ran %d times, want 6", n)
	}
}

// A call in flight when its process dies (a fault in the function,
// the program's SIGSEGV) never returns: it is counted dropped, no record.
func TestFakeRetprobeDroppedAtExit(t *testing.T) {
	tg := callProcess(t)
	th := tg.AddThread(1, cLoad, 3)
	th.Regs[rpn.RegRAX] = data
	r := startFake(t, tg)
	// data holds 0 (the fake's memory starts zeroed): the second call's
	// load reads address 0 and faults
	r.insert(t, "retprobe = c_load\nminor = 1\nmaxactive = 4\npush r,rax\nlog 1\nexit 1\n")
	r.runToEnd(t)
	if o := tg.Outcome(1); o != "killed by SIGSEGV" {
		t.Fatalf("the program ended %q, want killed by SIGSEGV as without the probe", o)
	}
	if n := len(r.records()); n != 1 {
		t.Errorf("%d records, want 1 (the first call's return)", n)
	}
	if q := queryOf(t, r, 1); q.Dropped != 1 || q.Hits != 1 {
		t.Errorf("hits %d dropped %d, want 1 and 1: the faulting call's return never came", q.Hits, q.Dropped)
	}
}
