package engine_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/engine/fake"
	"github.com/gprobes/gprobes/rpn"
)

// A kernel module that loads, unloads and loads again under its probe, as
// a guest kernel's does (linuxkernel: do_init_module and free_module are
// the rendezvous): pending until the first load, placed at a rendezvous,
// forgotten (not written back) at the unload, placed again for the new
// load, with exact hits. The fake's function, one iteration of its
// thread: rendezvous 1, the module's push (the probe), rendezvous 2, a
// nop that counts the iterations, ret. The module is loaded in
// iterations 1-2 (load 1) and 4-5 (load 2), not in 0 and 3.
func TestFakeModuleLoadUnload(t *testing.T) {
	const (
		rv1, fMod, rv2, counter = 0x1020, 0x1021, 0x1022, 0x1023
	)
	code := make([]byte, 0x30)
	copy(code[0x20:], []byte{0x90, 0x55, 0x90, 0x90, 0xc3})
	tg, err := fake.New("prog", 0x1000, code, fmt.Sprintf("%016x T f_rv\n%016x t f_mod\n%016x t f_tail\n", rv1, fMod, rv2))
	if err != nil {
		t.Fatal(err)
	}
	tg.Kernel = true
	tg.ModName = "kmod"
	tg.ModExec = [2]uint64{fMod, fMod + 1}
	tg.RendezvousAt = []uint64{rv1, rv2}
	loads := []int{0, 1, 1, 0, 2, 2}
	tg.ModLoad = func() int { return loads[tg.Runs(counter)] }
	th := tg.AddThread(1, rv1, len(loads))
	start := th.Regs[rpn.RegRSP]
	r := startFake(t, tg)

	f, err := dpdf.ParseSource("kmod.dpdf", []byte("name = kmod\nmodtype = kernel\nvars = 1\noffset = f_mod\ninc lv,0\npush lv,0\nlog 1\nexit 1\n"), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := compiler.Compile(f, rpn.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	infos, err := r.eng.Insert(m, engine.InsertNew)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].State != engine.StatePending || infos[0].Reason != "kmod is not loaded" {
		t.Fatalf("inserted before the load: %+v", infos)
	}
	r.runToEnd(t)

	if pushes(th, start) != len(loads) {
		t.Errorf("the thread pushed %d times, want %d", pushes(th, start), len(loads))
	}
	// native in the iterations without the module's probe, emulated in the others
	if n := tg.Runs(fMod); n != 2 {
		t.Errorf("the module's push ran natively %d times, want 2 (iterations 0 and 3)", n)
	}
	var got []uint64
	for _, rec := range r.records() {
		got = append(got, binary.LittleEndian.Uint64(rec.Data))
	}
	if !slices.Equal(got, []uint64{1, 2, 3, 4}) {
		t.Errorf("records %v, want lv 0 = 1 2 3 4 (two hits per load)", got)
	}
	if !slices.Equal(tg.Forgotten, []uint64{fMod}) {
		t.Errorf("forgotten breakpoints %#x, want the module's once (its unload)", tg.Forgotten)
	}
	q := r.eng.Query()
	if len(q) != 1 || q[0].Hits != 4 {
		t.Errorf("query %+v", q)
	}
	if out := tg.Outcome(1); !strings.HasPrefix(out, "exited") {
		t.Errorf("the thread: %s", out)
	}
}

// RemoveClose takes a module out and keeps the engine while another is
// in; taking the last one out closes the engine in the same command (one
// stop for a whole remove, on a target only a hit or a pause stops): the
// code is whole again and the thread let go, running on to its end.
func TestFakeRemoveClose(t *testing.T) {
	tg := fakeProcess(t)
	tg.AddThread(1, fPush, 5)
	r := startFake(t, tg)
	r.insert(t, "offset = f_push\nexit 1\n") // module prog
	f, err := dpdf.ParseSource("prog2.dpdf", []byte("name = prog2\nmodtype = user\noffset = f_load\nexit 1\n"), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := compiler.Compile(f, rpn.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.eng.Insert(m, engine.InsertNew); err != nil {
		t.Fatal(err)
	}
	code := func(addr uint64) byte {
		var b [1]byte
		if err := tg.ReadMem(fake.Pid, addr, b[:]); err != nil {
			t.Fatal(err)
		}
		return b[0]
	}
	if code(fPush) != 0xcc || code(fLoad) != 0xcc {
		t.Fatalf("inserted: code %#x %#x, want int3 at both", code(fPush), code(fLoad))
	}
	n, found, closed, err := r.eng.RemoveClose(func(name string) bool { return name == "prog" }, nil)
	if n != 1 || !found || closed || err != nil {
		t.Fatalf("remove prog: %d probes, found %v, closed %v, %v; want 1, true, false, nil", n, found, closed, err)
	}
	if mods := r.eng.Modules(); !slices.Equal(mods, []string{"prog2"}) {
		t.Errorf("modules after removing prog: %q", mods)
	}
	if code(fPush) != 0x55 || code(fLoad) != 0xcc {
		t.Errorf("after removing prog: code %#x %#x, want 0x55 and an int3", code(fPush), code(fLoad))
	}
	if tg.Outcome(1) != "" {
		t.Errorf("the thread is %q while a module is in", tg.Outcome(1))
	}
	n, found, closed, err = r.eng.RemoveClose(func(string) bool { return true }, nil)
	if n != 1 || !found || !closed || err != nil {
		t.Fatalf("remove all: %d probes, found %v, closed %v, %v; want 1, true, true, nil", n, found, closed, err)
	}
	if code(fPush) != 0x55 || code(fLoad) != 0x48 {
		t.Errorf("after removing all: code %#x %#x, want the original 0x55 0x48", code(fPush), code(fLoad))
	}
	if tg.Outcome(1) != "exited" {
		t.Errorf("the thread after the close: %q, want exited (let go)", tg.Outcome(1))
	}
	// the daemon forgets a target whose engine stopped: closed, nothing in it
	if n, found, closed, err := r.eng.RemoveClose(func(string) bool { return true }, nil); n != 0 || found || !closed || err != nil {
		t.Errorf("a remove on the closed engine: %d, found %v, closed %v, %v; want 0, false, true, nil", n, found, closed, err)
	}
}

// A backend whose wait fails (a hypervisor call refused) ends the target,
// but not with the probes' int3 bytes left in code that may run on: the
// engine takes them out and lets the threads go first, as a close does.
func TestFakeWaitErrorTakesProbesOut(t *testing.T) {
	tg := fakeProcess(t)
	tg.AddThread(1, fPush, 20)
	waits := 0
	tg.WaitErr = func() error {
		if waits++; waits > 6 {
			return errors.New("fake: the wait failed")
		}
		return nil
	}
	r := startFake(t, tg)
	r.insert(t, "offset = f_push\nexit 1\n")
	if err := r.eng.Release(); err != nil {
		t.Fatal(err)
	}
	<-r.eng.Ended()
	if reason := r.eng.EndReason(); !strings.Contains(reason, "the wait failed") {
		t.Errorf("end reason %q", reason)
	}
	var b [1]byte
	if err := tg.ReadMem(fake.Pid, fPush, b[:]); err != nil || b[0] != 0x55 {
		t.Errorf("code at the probe after the failed wait: %#x %v, want the original 0x55", b[0], err)
	}
	if tg.Outcome(1) != "exited" {
		t.Errorf("the thread after the failed wait: %q, want exited (let go, it ran on)", tg.Outcome(1))
	}
}
