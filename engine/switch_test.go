package engine_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/engine"
)

// Switching on the int3 route (the fake target): a probe inserted off
// (enabled = no) is no hit until a program's enable of its minor, and
// none again after the disable; the hit that switches runs on; query
// says disabled and why; Switch from outside, before the target runs.
func TestFakeSwitching(t *testing.T) {
	tg := fakeProcess(t)
	tg.AddThread(1, fPush, 20)
	r := startFake(t, tg)
	// A on hit 5 switches B on, on hit 10 off again; B runs after A at
	// the same address, so hits 5..9 are B's
	probes, err := r.eng.Insert(fakeModule(t, `vars = 1
offset = f_push
minor = 1
inc lv,0
push lv,0
push d,5
sub
jnz x
enable 2
x: push lv,0
push d,10
sub
jnz y
disable 2
y: exit 0
offset = f_push
minor = 2
enabled = no
push lv,0
log 1
exit 1
offset = f_push
minor = 3
enabled = no
exit 1
offset = f_push
minor = 4
max hits = 1
exit 0
`), engine.InsertNew)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []engine.ProbeState{engine.StateActive, engine.StateDisabled, engine.StateDisabled, engine.StateActive} {
		if probes[i].State != want {
			t.Errorf("probe %d inserted %s, want %s", i, probes[i].State, want)
		}
	}
	q := r.eng.Query()
	if q[1].State != engine.StateDisabled || !strings.HasPrefix(q[1].Reason, "switched off: enable 2") {
		t.Errorf("B before: %s %q", q[1].State, q[1].Reason)
	}
	// minor 3 switched on from outside, before the process runs
	if n, err := r.eng.Switch("prog", []uint16{3}, true); n != 1 || err != nil {
		t.Fatalf("Switch minor 3: %d %v", n, err)
	}
	if _, err := r.eng.Switch("prog", []uint16{3, 9}, true); !errors.Is(err, engine.ErrNoMinor) || !strings.Contains(err.Error(), "minor 9") {
		t.Errorf("Switch of a minor no probe has: %v", err)
	}
	if _, err := r.eng.Switch("nothing", nil, true); err == nil {
		t.Error("Switch of a module not inserted")
	}
	r.runToEnd(t)
	var got []uint64
	for _, rec := range r.records() {
		if rec.Minor == 2 {
			got = append(got, le64(rec.Data))
		}
	}
	if len(got) != 5 || got[0] != 5 || got[4] != 9 {
		t.Errorf("B's records of lv 0: %v, want 5..9", got)
	}
	q = r.eng.Query()
	if q[1].Hits != 5 || q[1].Skipped != 0 {
		t.Errorf("B counted %d hits, %d skipped: want 5, 0", q[1].Hits, q[1].Skipped)
	}
	if q[2].Hits != 20 {
		t.Errorf("minor 3, switched on from outside: %d hits, want 20", q[2].Hits)
	}
	// gone now, but the states as query shows a process that ended
	if q[3].Hits != 20 || q[3].Skipped != 19 {
		t.Errorf("max hits 1: %d hits %d skipped", q[3].Hits, q[3].Skipped)
	}
}
