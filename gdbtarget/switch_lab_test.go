package gdbtarget_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/gdbtarget"
	"github.com/gprobes/gprobes/rpn"
)

// switching is the stateful trace on a guest kernel: B (ksys_write,
// inserted off) recorded only between A (ksys_read) and C
// (do_sys_openat2), A and C switching only for the workload (its task's
// comm, from the kernel's BTF).
const switching = `name = vmlinux
modtype = kernel
offset = ksys_read            // A
minor = 1
push task
push d,offsetof(struct task_struct, comm)
add
push mrf,8
push d,0x00006b726f777067     // "gpwork\0\0"
sub
jnz out
enable 2
out: exit 0
offset = ksys_write           // B
minor = 2
enabled = no
push pid
push r,rdi
log 2
exit 1
offset = do_sys_openat2       // C
minor = 3
push task
push d,offsetof(struct task_struct, comm)
add
push mrf,8
push d,0x00006b726f777067
sub
jnz out
disable 2
out: exit 0
`

// Switching on a guest kernel through QEMU's stub (docs/language.md, "Switching"): gpwork's
// rounds are N getppid, N reads of /dev/zero (A: on), N writes to
// /dev/null (B), 2N opens (C: off); its lines to the console are written
// after an open, so B records exactly N writes a round, every one to
// /dev/null. Then from outside: A and C off, B on: every write of the
// workload, its console lines included.
func TestGuestSwitch(t *testing.T) {
	g := boot(t, true)
	g.attach(gdbtarget.Options{})
	infos := g.insertAs(compile(t, switching))
	if infos[1].State != engine.StateDisabled || !strings.HasPrefix(infos[1].Reason, "switched off") {
		t.Fatalf("B inserted: %s %q", infos[1].State, infos[1].Reason)
	}
	const n, rounds = 6, 3
	pid, out := g.run(fmt.Sprintf("gpwork loop %d %d", n, rounds))
	if !strings.Contains(out, fmt.Sprintf("GPWORK round %d getppid %d", rounds, n)) {
		t.Fatalf("the workload did not finish correctly:\n%s", out)
	}
	recs := g.of(pid, 2)
	fds := map[uint64]int{}
	for _, r := range recs {
		fds[word(r, 1)]++
	}
	if len(recs) != n*rounds || len(fds) != 1 {
		t.Errorf("B recorded %d writes of pid %d (by fd %v), want %d, all to /dev/null", len(recs), pid, fds, n*rounds)
	}
	// from outside: A and C off, B on
	if k, err := g.eng.Switch("vmlinux", []uint16{1, 3}, false); k != 2 || err != nil {
		t.Fatalf("Switch A and C off: %d %v", k, err)
	}
	if k, err := g.eng.Switch("vmlinux", []uint16{2}, true); k != 1 || err != nil {
		t.Fatalf("Switch B on: %d %v", k, err)
	}
	pid, out = g.run(fmt.Sprintf("gpwork counts %d", n))
	lines := strings.Count(out, "GPWORK ")
	if got := len(g.of(pid, 2)); got != n+lines {
		t.Errorf("B on from outside: %d writes of pid %d, want %d to /dev/null and %d lines:\n%s", got, pid, n, lines, out)
	}
	for _, p := range g.eng.Query() {
		t.Logf("query: %d %s: %s %q, hits %d", p.Minor, p.Location, p.State, p.Reason, p.Hits)
		if p.Minor != 2 && (p.State != engine.StateDisabled || !strings.HasPrefix(p.Reason, "switched off")) {
			t.Errorf("minor %d: %s %q", p.Minor, p.State, p.Reason)
		}
	}
}

// insertAs is insert for a module whose probes may go in switched off.
func (g *guest) insertAs(m *rpn.Module) []engine.ProbeInfo {
	g.t.Helper()
	infos, err := g.eng.Insert(m, engine.InsertNew)
	if err != nil {
		g.t.Fatal(err)
	}
	for _, p := range infos {
		if p.State != engine.StateActive && p.State != engine.StateDisabled {
			g.t.Fatalf("probe %s: %s %s", p.Location, p.State, p.Reason)
		}
	}
	if err := g.eng.Release(); err != nil {
		g.t.Fatal(err)
	}
	return infos
}
