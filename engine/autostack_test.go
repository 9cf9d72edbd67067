package engine_test

import (
	"testing"

	"github.com/gprobes/gprobes/engine"
)

// A probe with autostacktrace = yes on a target that takes no stacks
// (the fake target, as QEMU's and Xen's guests today) is refused at
// insert, saying why, rather than record its exceptions without their
// stacks; the module's other probe goes in and runs.
func TestFakeAutoStackRefused(t *testing.T) {
	const why = "autostacktrace = yes: this target takes no stacks yet, so its exception records would carry none"
	for _, kernel := range []bool{false, true} {
		tg := fakeProcess(t)
		tg.Kernel = kernel
		tg.AddThread(1, fPush, 3)
		r := startFake(t, tg)
		modtype := "user"
		if kernel {
			modtype = "kernel"
		}
		probes, err := r.eng.Insert(compileKinds(t, modtype, `vars = 1
offset = f_push
minor = 1
autostacktrace = yes
push d,0
push mrf,8
log 1
exit 1
offset = f_push
minor = 2
inc lv,0
exit 0
`), engine.InsertNew)
		if err != nil {
			t.Fatal(err)
		}
		want := map[uint16][2]string{1: {"refused", why}, 2: {"active", ""}}
		checkStates(t, "insert", probes, want)
		r.runToEnd(t)
		if lv, _, _ := r.eng.Vars("prog", false); lv[0] != 3 {
			t.Errorf("kernel %v: the other probe ran %d times, want 3", kernel, lv[0])
		}
		if n := len(r.records()); n != 0 {
			t.Errorf("kernel %v: %d records: the refused probe ran", kernel, n)
		}
	}
}
