//go:build linux

package ptrace_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/internal/testkit"
)

// A process under seccomp (testdata/jump/seccomp.c): strict mode, a
// filter that kills on mmap, one that kills on openat, every thread under
// it. gprobes injects no system call the thread's seccomp state would
// answer with anything but ALLOW: the jump route (openat, mmap, close for
// the shared memory) gives way to the int3 route with the reason, a probe
// that needs an out-of-line slot (mmap) is refused with it where mmap is
// refused and goes in where it is not; 4 threads check every result and
// the process exits 0, hits exact; 5 rounds of each. Before the check the first injected
// call killed the process (SIGKILL of strict mode, SIGSYS of the filter)
// and gprobes said "process is not traced".
func TestSeccomp(t *testing.T) {
	if os.Geteuid() != 0 {
		// reading the filters needs CAP_SYS_ADMIN; without it nothing
		// is injected (checked below with the strict mode, which needs
		// no reading)
		t.Log("not root: the filter cases expect every injection refused")
	}
	prog := testkit.CC(t, "seccomp", "-O2", "-pthread", "../testdata/jump/seccomp.c", "../testdata/harm/funcs.S")
	const n, threads = 2000, 4
	src := "name = PROGRAM\nmodtype = user\nvars = 2\noffset = f_push\nminor = 1\ninc lv,0\nexit 0\noffset = f_lock\nminor = 2\ninc lv,1\nexit 0\n"
	for _, c := range []struct {
		mode    string
		why     string // in f_push's HOW
		lockIn  bool   // f_lock gets its slot
		lockWhy string // else in its reason
	}{
		{"strict", "seccomp strict mode", false, "seccomp strict mode"},
		{"kill-mmap", "mmap: KILL_PROCESS", false, "mmap: KILL_PROCESS"},
		{"kill-openat", "openat: KILL_PROCESS", true, ""},
	} {
		t.Run(c.mode, func(t *testing.T) {
			for round := 0; round < rounds(5); round++ {
				if os.Geteuid() != 0 && c.mode != "strict" {
					c.why, c.lockIn, c.lockWhy = "cannot read", false, "cannot read"
				}
				r := startWith(t, startConfig{path: prog}, c.mode, fmt.Sprint(n), fmt.Sprint(threads))
				r.release()
				if l := r.line(); l != "ready" {
					t.Fatalf("the program says %q", l)
				}
				m := compileFor(t, prog, src)
				var infos []engine.ProbeInfo
				var err error
				inserted := make(chan struct{})
				go func() {
					infos, err = r.eng.Insert(m, engine.InsertNew)
					close(inserted)
				}()
				select {
				case <-inserted:
				case <-time.After(60 * time.Second):
					// a process killed while gprobes waits for the system
					// call it injected: gprobes waited for good
					t.Fatal("the insert did not end in 60 s")
				}
				if err != nil {
					t.Fatalf("insert: %v", err)
				}
				fmt.Fprintln(r.stdin, "go")
				lines := r.finish() // fails unless the process exits 0
				out := strings.Join(lines, "\n")
				if strings.Count(out, " bad 0") != threads || !strings.Contains(out, fmt.Sprintf("total %d", threads*n)) {
					t.Fatalf("the program's own check: %q", lines)
				}
				push, lock := infos[0], infos[1]
				t.Logf("f_push: %s %s; f_lock: %s %s %s", push.State, push.How, lock.State, lock.How, lock.Reason)
				if push.State != engine.StateActive || !strings.HasPrefix(push.How, "int3") || !strings.Contains(push.How, c.why) {
					t.Errorf("f_push: %s, how %q: want the int3 route because of %q", push.State, push.How, c.why)
				}
				lv := r.lv(prog)
				if lv[0] != threads*n {
					t.Errorf("f_push: %d hits, want %d", lv[0], threads*n)
				}
				if c.lockIn {
					if lock.State != engine.StateActive || lv[1] != threads*n {
						t.Errorf("f_lock: %s (%s), %d hits: want it in, %d hits", lock.State, lock.Reason, lv[1], threads*n)
					}
				} else if lock.State != engine.StateRefused || !strings.Contains(lock.Reason, c.lockWhy) || lv[1] != 0 {
					t.Errorf("f_lock: %s (%s), %d hits: want it refused because of %q", lock.State, lock.Reason, lv[1], c.lockWhy)
				}
			}
		})
	}
}
