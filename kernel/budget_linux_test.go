//go:build linux

package kernel

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/engine"
)

// A probe past the kernel verifier's budget is refused at insert before
// its program is loaded, naming the probe's DPDF line where it goes past
// and the kernel's figure; 400 diamonds of conditional code go in, as do
// the module's other probes.
func TestInsertTooLarge(t *testing.T) {
	k, _ := start(t, Options{PID: os.Getpid()})
	var b strings.Builder
	b.WriteString("name = vmlinux\nmodtype = kernel\ntracepoint = syscalls:sys_enter_getppid\nminor = 1\nexit 0\n")
	b.WriteString("tracepoint = syscalls:sys_enter_getppid\nminor = 2\n")
	for i := 0; i < 400; i++ {
		fmt.Fprintf(&b, "push u,rdi\nshr %d\npush d,1\nand\njz l%d\npush d,%d\nlog 1\nl%d: nop\n", i%64, i, i, i)
	}
	b.WriteString("exit 1\ntracepoint = syscalls:sys_enter_getppid\nminor = 3\n")
	for i := 0; i < 8000; i++ {
		b.WriteString("log 32\n")
	}
	b.WriteString("exit 1\n")
	infos, err := k.Insert(compile(t, b.String()), engine.InsertNew)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range infos {
		switch p.Minor {
		case 3:
			if p.State != engine.StateRefused || !strings.Contains(p.Reason, "too large for the kernel: probe 2 pc ") || !strings.Contains(p.Reason, " at test.dpdf:") || !strings.Contains(p.Reason, "the kernel's limit: 1000000") {
				t.Errorf("minor 3: %s %q, want refused past the verifier's budget", p.State, p.Reason)
			}
			t.Log(p.Reason)
		default:
			if p.State != engine.StateActive {
				t.Errorf("minor %d: %s %q, want active", p.Minor, p.State, p.Reason)
			}
		}
	}
}
