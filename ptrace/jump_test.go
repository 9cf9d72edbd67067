//go:build linux

package ptrace_test

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/rpn"
)

// Jump pads (issue 11) against real processes: testdata/bench/kinds.c,
// whose functions start with the common first instructions, checks its
// own results; the probes count and log two registers.

func kindsFixture(t *testing.T) string {
	t.Helper()
	return testkit.CC(t, "kinds", "-O2", "-pthread", "../testdata/bench/kinds.c", "../testdata/bench/kinds.S")
}

func compileFor(t *testing.T, path, src string) *rpn.Module {
	t.Helper()
	src = strings.ReplaceAll(src, "PROGRAM", path)
	f, err := dpdf.ParseSource("test.dpdf", []byte(src), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	m, err := rpn.Compile(f, rpn.CompileOptions{})
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	return m
}

const kindProbe = `name = PROGRAM
modtype = user
vars = 1
offset = k_KIND
inc lv,0
push r,rdi
push r,rsi
log 2
exit 1
`

// Every common first instruction on the jump route, 4 threads: exact
// counts in lv, in query and in the records (with what the ring dropped),
// the logged registers right, the program's own results intact.
func TestJumpKinds(t *testing.T) {
	kinds := kindsFixture(t)
	const calls, threads = 20000, 4
	for _, kind := range []string{"rip", "lock", "push", "endbr", "call"} {
		t.Run(kind, func(t *testing.T) {
			r := startWith(t, startConfig{path: kinds}, fmt.Sprint(calls), fmt.Sprint(threads), kind)
			infos := r.insert(compileFor(t, kinds, strings.ReplaceAll(kindProbe, "KIND", kind)))
			if p := infos[0]; p.State != engine.StateActive || p.How != "jump" {
				t.Fatalf("probe %s: %s, how %q: %s", p.Location, p.State, p.How, p.Reason)
			}
			r.eng.Release()
			lines := r.finish()
			if !strings.Contains(strings.Join(lines, "\n"), "bad 0") {
				t.Errorf("the program's own check failed: %q", lines)
			}
			lv, _, err := r.eng.Vars(kinds, false)
			if err != nil {
				t.Fatal(err)
			}
			if lv[0] != calls*threads {
				t.Errorf("lv 0 = %d, want %d", lv[0], calls*threads)
			}
			q := r.eng.Query()[0]
			if q.Hits != calls*threads {
				t.Errorf("query: %d hits, want %d", q.Hits, calls*threads)
			}
			recs := r.records(0)
			if uint64(len(recs))+q.Lost != calls*threads {
				t.Errorf("%d records + %d lost, want %d", len(recs), q.Lost, calls*threads)
			}
			seen := map[uint64]int{}
			tids := map[int]bool{}
			for _, rec := range recs {
				if len(rec.Data) != 16 {
					t.Fatalf("record of %d bytes: %+v", len(rec.Data), rec)
				}
				a, b := binary.LittleEndian.Uint64(rec.Data), binary.LittleEndian.Uint64(rec.Data[8:])
				if b != 7 || a >= calls {
					t.Fatalf("logged rdi %d rsi %d: not what the program passed", a, b)
				}
				seen[a]++
				tids[rec.Tid] = true
				if rec.Pid != r.eng.Pid() || rec.Kind != "log" || rec.Time.IsZero() {
					t.Fatalf("record %+v", rec)
				}
			}
			if q.Lost == 0 {
				for i := uint64(0); i < calls; i++ {
					if seen[i] != threads {
						t.Fatalf("rdi %d logged %d times, want %d", i, seen[i], threads)
					}
				}
			}
			if q.Lost == 0 && len(tids) != threads {
				t.Errorf("records from %d threads, want %d", len(tids), threads)
			}
			t.Logf("%d records, %d lost", len(recs), q.Lost)
		})
	}
}
