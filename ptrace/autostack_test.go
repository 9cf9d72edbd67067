//go:build linux

package ptrace_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/probe"
)

// autostacktrace = yes (the header's, a probe's own keyword overriding
// it): every exception record of the probe carries the user stack at the
// hit, 16 frames at most, as log ustack would log it. At leaf of the
// recursive fixture a program reading address 0 raises invalid-address:
// with autostacktrace its records carry leaf, fact x5, run, main, then
// libc's start and _start; with autostacktrace = no, none; a probe with
// autostacktrace whose program commits a log carries no stack (the
// keyword is for exceptions). The probe with autostacktrace is refused a
// jump pad (route auto) and HOW says why.
func TestAutoStackTrace(t *testing.T) {
	const depth = 4
	prog := stackFixture(t, "fact-O2", "-O2")
	syms := elfSyms(t, prog)
	r := startWith(t, startConfig{path: prog}, fmt.Sprint(depth), "2")
	infos := r.insert(compileFor(t, prog, `name = PROGRAM
modtype = user
autostacktrace = yes
offset = leaf
minor = 1
push d,0
push mrf,8
log 1
exit 1
offset = leaf
minor = 2
autostacktrace = no
push d,0
push mrf,8
log 1
exit 1
offset = run
minor = 3
push r,rdi
log 1
exit 1
`))
	for _, p := range infos {
		if p.Minor == 1 && (!strings.HasPrefix(p.How, "int3") || !strings.Contains(p.How, "autostacktrace = yes")) {
			t.Errorf("probe %d: how %q: want the int3 route, saying autostacktrace", p.Minor, p.How)
		}
	}
	r.release()
	r.finish()

	recs := r.records(1)
	if len(recs) != 2 {
		t.Fatalf("%d records of minor 1, want 2: %+v", len(recs), recs)
	}
	want := []string{"leaf"}
	for i := 0; i <= depth; i++ {
		want = append(want, "fact")
	}
	want = append(want, "run", "main")
	for _, rec := range recs {
		if rec.Kind != "exception" || rec.Exception != "invalid-address" {
			t.Fatalf("minor 1: %+v, want an invalid-address exception", rec)
		}
		if len(rec.Stacks) != 1 || rec.Stacks[0].Kind != "user" {
			t.Fatalf("minor 1: stacks %+v, want one user stack", rec.Stacks)
		}
		fr := rec.Stacks[0].Frames
		var names []string
		for _, f := range fr {
			names = append(names, f.Function)
		}
		if len(names) < len(want)+1 || strings.Join(names[:len(want)], " ") != strings.Join(want, " ") {
			t.Fatalf("frames %v, want %v then libc's", fr, want)
		}
		if last := fr[len(fr)-1]; last.Function != "_start" || last.Module != prog {
			t.Errorf("outermost frame %v, want _start in %s", last, prog)
		}
		bias := rec.Address - syms["leaf"].Value
		if fr[0].Address != probe.Hex(rec.Address) || fr[0].Offset != 0 {
			t.Errorf("frame 0 %v, want leaf+0x0 at %#x", fr[0], rec.Address)
		}
		for i := 1; i < len(want); i++ {
			ret := uint64(fr[i].Address) - bias
			if to, ok := callTarget(t, prog, ret); !ok || to != syms[want[i-1]].Value {
				t.Errorf("frame %d %v: the instruction before %#x calls %#x (%v), want %s", i, fr[i], ret, to, ok, want[i-1])
			}
		}
		if len(fr) > 16 {
			t.Errorf("%d frames, want 16 at most", len(fr))
		}
	}
	recs = r.records(2)
	if len(recs) != 2 {
		t.Fatalf("%d records of minor 2, want 2: %+v", len(recs), recs)
	}
	for _, rec := range recs {
		if rec.Kind != "exception" || rec.Exception != "invalid-address" || len(rec.Stacks) != 0 {
			t.Errorf("minor 2 (autostacktrace = no): %+v, want an invalid-address exception without stacks", rec)
		}
	}
	recs = r.records(3)
	if len(recs) != 2 {
		t.Fatalf("%d records of minor 3, want 2: %+v", len(recs), recs)
	}
	for _, rec := range recs {
		if rec.Kind != "log" || len(rec.Stacks) != 0 {
			t.Errorf("minor 3 (a log, no exception): %+v, want no stacks", rec)
		}
	}
}
