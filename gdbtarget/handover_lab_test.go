package gdbtarget_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/gdbtarget"
	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/lab/corecheck"
	"github.com/gprobes/gprobes/lab/qemulab"
	"github.com/gprobes/gprobes/rpn"
)

// bootSmall boots the lab guest with 256 MiB of RAM: its dumps stay small.
func bootSmall(t *testing.T) *guest {
	t.Helper()
	qemulab.Require(t)
	art, err := qemulab.Artifacts()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	vm, err := qemulab.Boot(ctx, qemulab.Options{Memory: "256M"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vm.Kill)
	return &guest{t: t, vm: vm, art: art}
}

// waitRec waits for a record of the module's probe minor.
func (g *guest) waitRec(minor uint16, timeout time.Duration) engine.Record {
	g.t.Helper()
	var rec engine.Record
	testkit.Wait(g.t, timeout, fmt.Sprintf("a record of probe %d", minor), func() (bool, string) {
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, r := range g.recs {
			if r.Minor == minor {
				rec = r
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d records of other probes", len(g.recs))
	})
	return rec
}

// TestGuestPopU: push io and pop io reach the guest's IO space through
// QEMU's monitor. pop u writes the user-mode registers the task returns
// to user mode with. At exit_group's entry, before the kernel reads the
// status from the task's pt_regs, the probe turns status 7 into 42: the
// shell sees 42. push u reads the same pt_regs: rdi is the status, rip a
// user address (after the syscall instruction), rip of the vCPU the
// kernel function.
func TestGuestPopU(t *testing.T) {
	g := bootSmall(t)
	if _, err := g.vm.HMP("o /b 0x3ff 0x11", time.Minute); err != nil {
		t.Fatal(err)
	}
	g.attach(gdbtarget.Options{})
	g.insert(compile(t, popU+portIO))
	out, rc, err := g.vm.Run("sh -c 'exit 7'; echo status=$?", time.Minute)
	if err != nil || rc != 0 {
		t.Fatalf("rc %d %v\n%s", rc, err, out)
	}
	if !strings.Contains(out, "status=42") {
		t.Errorf("the shell saw %q, want status=42 (pop u,rdi at exit_group)", out)
	}
	rec := g.waitRec(1, time.Minute)
	if word(rec, 0) != 7 || word(rec, 1) >= 1<<47 || word(rec, 1) == 0 || word(rec, 2) < 1<<63 {
		t.Errorf("push u,rdi / u,rip / r,rip: %#x %#x %#x, want 7, a user address, a kernel address", word(rec, 0), word(rec, 1), word(rec, 2))
	}
	// port IO through QEMU's monitor: the probe read the UART's scratch
	// register as the host had set it, then wrote it, as the host sees
	if rec := g.waitRec(2, time.Minute); word(rec, 0) != 0x11 || word(rec, 1) != 0x5a {
		t.Errorf("push io,1 of 0x3ff before and after pop io,1 0x5a: %#x %#x, want 0x11 0x5a", word(rec, 0), word(rec, 1))
	}
	if out, err := g.vm.HMP("i /b 0x3ff", time.Minute); err != nil || !strings.Contains(out, "= 0x5a") {
		t.Errorf("the guest's port 0x3ff after the probe: %q %v, want 0x5a", out, err)
	}
	// a status other than 7 is left alone
	out, _, _ = g.vm.Run("sh -c 'exit 5'; echo status=$?", time.Minute)
	if !strings.Contains(out, "status=5") {
		t.Errorf("exit 5: the shell saw %q", out)
	}
}

// portIO reads and writes the scratch register of the guest's COM1
// (16550 SCR, 0x3f8+7: no effect on the device), once
const portIO = `offset = __x64_sys_exit_group
minor = 2
push gv,0
jnz seen
inc gv,0
push d,0x3ff
push io,1
push d,0x3ff
push d,0x5a
pop io,1
push d,0x3ff
push io,1
log 2
exit 1
seen:
exit 0
`

const popU = `name = vmlinux
modtype = kernel
gvars = 1
offset = __x64_sys_exit_group
minor = 1
push u,rdi
push d,7
sub
jnz other
push u,rdi
push u,rip
push r,rip
log 3
push d,42
pop u,rdi
exit 1
other:
exit 0
`

// TestGuestDump: exit 3 writes an ELF core of the guest that gdb opens
// with the guest's vmlinux: jiffies there is what the probe read from the
// live guest at the hit (the guest stood still while QEMU wrote the core),
// linux_banner and init_task's comm are the kernel's. The guest runs on.
func TestGuestDump(t *testing.T) {
	gdb := testkit.Tool(t, "gdb")
	g := bootSmall(t)
	g.attach(gdbtarget.Options{})
	g.insert(compile(t, dumpOnce))
	out, rc, err := g.vm.Run("echo hello", 2*time.Minute)
	if err != nil || rc != 0 {
		t.Fatalf("rc %d %v\n%s", rc, err, out)
	}
	rec := g.waitRec(1, time.Minute)
	if rec.Exit != rpn.ExitDump || strings.HasPrefix(rec.Dump, "failed") || rec.Dump == "" {
		t.Fatalf("record %+v: no dump", rec)
	}
	st, err := os.Stat(rec.Dump)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("core %s: %d MiB", rec.Dump, st.Size()>>20)
	jiffies := word(rec, 0)
	checkCore(t, gdb, g.art, rec.Dump, jiffies)
	if out, rc, err := g.vm.Run("echo alive", time.Minute); err != nil || rc != 0 || !strings.Contains(out, "alive") {
		t.Errorf("the guest after the dump: rc %d %v %q", rc, err, out)
	}
}

const dumpOnce = `name = vmlinux
modtype = kernel
gvars = 1
offset = __x64_sys_getppid
minor = 1
push gv,0
jnz done
inc gv,0
push d,jiffies
push mrf
log 1
exit 3
done:
exit 0
`

// checkCore opens core with gdb and the lab's vmlinux and checks jiffies,
// linux_banner and init_task.comm (qemulab.CoreCheck).
func checkCore(t *testing.T, gdb, art, core string, jiffies uint64) {
	t.Helper()
	c, err := corecheck.New(art)
	if err != nil {
		t.Fatal(err)
	}
	args, err := c.GdbArgs(core)
	if err != nil {
		t.Fatal(err)
	}
	b, err := exec.Command(gdb, append([]string{"-nx", "-batch", filepath.Join(art, "vmlinux")}, args...)...).CombinedOutput()
	out := string(b)
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	for _, e := range c.Verify(out, jiffies) {
		t.Error(e)
	}
	t.Logf("gdb on the core:\n%s", out)
}

// TestGuestHandover: exit 4 leaves the guest stopped at the probe with
// the breakpoints out and prints a gdb command for the same stub; the
// test runs that command (batch mode): gdb attaches and its pc is the
// probed function. gdb's detach lets the guest run on.
func TestGuestHandover(t *testing.T) {
	gdb := testkit.Tool(t, "gdb")
	g := bootSmall(t)
	g.attach(gdbtarget.Options{})
	infos := g.insert(compile(t, handover))
	// sync waits for a file the host makes once Start has returned: the
	// hand-over stops the whole guest, and Start's answer must be out by
	// then. The answer of the command that makes the file may come after
	// gdb's detach: it is waited for in the background
	if err := g.vm.Start("waitfor -t 300 'the host to start it' 'test -e /tmp/go' && sync && echo synced"); err != nil {
		t.Fatal(err)
	}
	touched := make(chan error, 1)
	go func() {
		_, rc, err := g.vm.Run("touch /tmp/go", 5*time.Minute)
		if err == nil && rc != 0 {
			err = fmt.Errorf("touch /tmp/go: status %d", rc)
		}
		touched <- err
	}()
	rec := g.waitRec(1, 2*time.Minute)
	t.Logf("exit 4: %s", rec.Debugger)
	if !strings.Contains(rec.Debugger, "target remote "+g.vm.GDBAddr()) {
		t.Fatalf("debugger command %q does not name the stub %s", rec.Debugger, g.vm.GDBAddr())
	}
	line := strings.Replace(rec.Debugger, "gdb ", gdb+" -nx -batch ", 1) +
		fmt.Sprintf(` -ex 'printf "PC %%lx\n", $pc' -ex 'x/2i %#x' -ex detach`, infos[0].Address)
	out, err := exec.Command("sh", "-c", line).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	t.Logf("%s", out)
	// the vCPU stands where the probed instruction has run, once (the
	// engine emulated or stepped it before the hand-over)
	m := regexp.MustCompile(`PC ([0-9a-f]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("gdb through the printed command printed no pc:\n%s", out)
	}
	pc, _ := strconv.ParseUint(string(m[1]), 16, 64)
	// x/2i at the probe: the second line's address is the next instruction's
	insns := regexp.MustCompile(`(?m)^(?:=> |\s+)0x([0-9a-f]+):`).FindAllSubmatch(out, -1)
	if len(insns) < 2 {
		t.Fatalf("no disassembly at the probe:\n%s", out)
	}
	next, _ := strconv.ParseUint(string(insns[1][1]), 16, 64)
	if a := infos[0].Address; word(rec, 0) != a || pc != next {
		t.Errorf("gdb's pc %#x, want %#x: the instruction after the probe at %#x (rip logged %#x)", pc, next, a, word(rec, 0))
	}
	if _, err := g.vm.WaitFor(regexp.MustCompile(`synced`), 3*time.Minute); err != nil {
		t.Errorf("the guest did not run on after gdb detached: %v", err)
	}
	if err := <-touched; err != nil {
		t.Error(err)
	}
}

const handover = `name = vmlinux
modtype = kernel
offset = __x64_sys_sync
minor = 1
push r,rip
log 1
exit 4
`
