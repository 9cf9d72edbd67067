//go:build linux

package ptrace_test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/internal/testkit"
)

// Code that enters the bytes a jump pad's jump would cover past their
// first, from outside the probed function: a tail jump into a function's
// second instruction, a .cold part jumping back, an exception landing pad
// (testdata/jump/entries.S), and glibc's __mempcpy_avx_unaligned_erms
// jumping to __memmove_avx_unaligned_erms+3 in a static program. Each
// probe goes on an int3 with the reason, 4 threads check every result,
// and the hits are exact; 5 rounds of each. Before the whole-file scan (engine/entries)
// the jump went in and each program died of SIGSEGV or SIGTRAP, or
// computed wrong results.
func TestJumpEntries(t *testing.T) {
	prog := testkit.CC(t, "entries", "-O2", "-g", "-pthread", "../testdata/jump/entries.cc", "../testdata/jump/entries.S", "-lstdc++")
	const n, threads = 20000, 4
	for _, c := range []struct {
		mode, loc, why string
		hits           uint64
	}{
		{"tail", "t_body", "a branch at", n * threads},
		{"cold", "c_func+8", "a branch at", n * threads / 2},
		{"pad", "lp_func+8", "an exception landing pad", n * threads * 6 / 8},
	} {
		t.Run(c.mode, func(t *testing.T) {
			for round := 0; round < rounds(5); round++ {
				r := startWith(t, startConfig{path: prog}, c.mode, fmt.Sprint(n), fmt.Sprint(threads))
				checkEntered(t, r, prog, c.loc, c.why, c.hits)
			}
		})
	}
	t.Run("mempcpy", func(t *testing.T) {
		static := testkit.CC(t, "mempcpy", "-O2", "-static", "-pthread", "../testdata/jump/mempcpy.c")
		if out := unprobedProg(t, static, "1", "1"); strings.Contains(out, "no avx2") {
			testkit.SkipOrFail(t, "the CPU has no AVX2: glibc's __memmove_avx_unaligned_erms cannot run")
		}
		for round := 0; round < rounds(5); round++ {
			r := startWith(t, startConfig{path: static}, fmt.Sprint(n), fmt.Sprint(threads))
			checkEntered(t, r, static, "__memmove_avx_unaligned_erms", "a branch at", n*threads)
		}
	})
}

func checkEntered(t *testing.T, r *run, prog, loc, why string, hits uint64) {
	t.Helper()
	infos := r.insert(compileFor(t, prog, "name = PROGRAM\nmodtype = user\nvars = 1\noffset = "+loc+"\ninc lv,0\nexit 0\n"))
	p := infos[0]
	t.Logf("%s: %s", loc, p.How)
	r.eng.Release()
	lines := r.finish() // fails when the program did not exit 0
	if !strings.Contains(strings.Join(lines, "\n"), "bad 0 ") {
		t.Fatalf("the program's own check: %q", lines)
	}
	if p.State != engine.StateActive || !strings.HasPrefix(p.How, "int3") || !strings.Contains(p.How, why) {
		t.Errorf("%s: %s, how %q (%s): want an int3, because %s...", loc, p.State, p.How, p.Reason, why)
	}
	if lv := r.lv(prog); lv[0] != hits {
		t.Errorf("%d hits, want %d", lv[0], hits)
	}
}

// unprobedProg runs a program without gprobes and returns its output.
func unprobedProg(t *testing.T, prog string, args ...string) string {
	t.Helper()
	out, err := exec.Command(prog, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", prog, args, err, out)
	}
	return string(out)
}
