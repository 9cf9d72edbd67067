//go:build linux

package ptrace_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/internal/testkit"
)

// A thread parked in a signal handler whose saved pc is inside what a
// jump would cover (testdata/jump/parked.c: a SIGSEGV at g_load+3,
// handled as garbage collectors' safepoints are): the jump is refused,
// the probe goes on an int3 with the reason, and when the handler
// returns the load runs again where it faulted. segv: the frame is on
// the thread's stack; nested: the thread is in a second handler on its
// alternate signal stack, and the SIGSEGV frame is found through that
// handler's frame. 20 rounds each, 4 threads, exact hits, exit 0. Before
// the check, the jump went in and the returning thread died of SIGSEGV
// or SIGTRAP.
func TestJumpSignalFrames(t *testing.T) {
	prog := testkit.CC(t, "parked", "-O2", "-pthread", "../testdata/jump/parked.c", "../testdata/jump/parked.S")
	const n, threads = 2000, 4
	for _, mode := range []string{"segv", "nested"} {
		for round := 0; round < rounds(20); round++ {
			r := startWith(t, startConfig{path: prog}, mode, fmt.Sprint(n), fmt.Sprint(threads))
			r.release()
			if l := r.line(); l != "parked" {
				t.Fatalf("%s round %d: the program says %q", mode, round, l)
			}
			infos := r.insert(compileFor(t, prog, "name = PROGRAM\nmodtype = user\nvars = 1\noffset = g_load\ninc lv,0\nexit 0\n"))
			p := infos[0]
			fmt.Fprintln(r.stdin, "go")
			lines := r.finish() // fails when the program did not exit 0
			if !strings.Contains(strings.Join(lines, "\n"), "bad 0 ") {
				t.Fatalf("%s round %d: the program's own check: %q", mode, round, lines)
			}
			if p.State != engine.StateActive || !strings.HasPrefix(p.How, "int3") || !strings.Contains(p.How, "signal handler that returns to") {
				t.Fatalf("%s round %d: %s, how %q (%s): want an int3, the thread being in a signal handler", mode, round, p.State, p.How, p.Reason)
			}
			if lv := r.lv(prog); lv[0] != (threads-1)*n {
				t.Errorf("%s round %d: %d hits, want %d", mode, round, lv[0], (threads-1)*n)
			}
			if round == 0 {
				t.Logf("%s: %s", mode, p.How)
			}
		}
	}
}
