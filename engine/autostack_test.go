package engine_test

import (
	"fmt"
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

// A target that says at insert which stacks it cannot take (a guest
// kernel without its vmlinux's ORC tables; a guest's user stacks)
// refuses the probes that log one, or whose exception records would
// carry one, each alone with the line and the target's reason; the
// module's other probe goes in and runs. Where it can take them, the
// same probes go in and their records carry the stack.
func TestFakeStackRefusedAtInsert(t *testing.T) {
	const src = `vars = 1
offset = f_push
minor = 1
push d,0
log 1
log kstack
exit 1
offset = f_push
minor = 2
autostacktrace = yes
push d,0
push mrf,8
log 1
exit 1
offset = f_push
minor = 3
inc lv,0
log ustack,4
exit 0
offset = f_push
minor = 4
inc lv,0
exit 0
`
	const noORC = "no ORC here"
	for _, can := range []bool{false, true} {
		tg := fakeProcess(t)
		tg.Kernel = true
		tg.StackRefused = func(kernel bool) string {
			if !kernel {
				return "no user stacks here"
			}
			if !can {
				return noORC
			}
			return ""
		}
		tg.AddThread(1, fPush, 3)
		r := startFake(t, tg)
		probes, err := r.eng.Insert(compileKinds(t, "kernel", src), engine.InsertNew)
		if err != nil {
			t.Fatal(err)
		}
		want := map[uint16][2]string{
			1: {"refused", "log kstack (kinds.dpdf:8:1): " + noORC},
			2: {"refused", "autostacktrace = yes: " + noORC + "; its exception records would carry no stack"},
			3: {"refused", "log ustack (kinds.dpdf:20:1): no user stacks here"},
			4: {"active", ""},
		}
		if can {
			want[1], want[2] = [2]string{"active", ""}, [2]string{"active", ""}
		}
		checkStates(t, fmt.Sprintf("insert (kernel stacks %v)", can), probes, want)
		r.runToEnd(t)
		if lv, _, _ := r.eng.Vars("prog", false); lv[0] != 3 {
			t.Errorf("kernel stacks %v: lv 0 = %d, want 3 (probe 4's hits)", can, lv[0])
		}
		recs := r.records()
		if !can {
			if len(recs) != 0 {
				t.Errorf("refused probes ran: %d records", len(recs))
			}
			continue
		}
		var logs, exc int
		for _, rec := range recs {
			if len(rec.Stacks) != 1 || rec.Stacks[0].Kind != "kernel" || len(rec.Stacks[0].Frames) != 1 || rec.Stacks[0].Frames[0].Function != "f" {
				t.Errorf("probe %d record %v: stacks %+v", rec.Minor, rec.Kind, rec.Stacks)
			}
			switch rec.Minor {
			case 1:
				logs++
			case 2:
				exc++
			}
		}
		if logs != 3 || exc != 3 {
			t.Errorf("records with a stack: %d of log kstack, %d exceptions; want 3 each (%d records)", logs, exc, len(recs))
		}
	}
}
