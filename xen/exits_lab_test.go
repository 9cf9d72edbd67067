package xen_test

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/lab/corecheck"
	"github.com/gprobes/gprobes/lab/labkit"
	"github.com/gprobes/gprobes/lab/qemulab"
	"github.com/gprobes/gprobes/lab/xenlab"
)

// TestXenGuestExits: on a PV domU probed natively from dom0 (xen:DOMID),
// through a daemon:
//   - pop u writes the task's saved user-mode registers: at exit_group's
//     entry status 7 becomes 42, and the shell sees 42;
//   - exit 3 writes an ELF core of the guest from its mapped frames, which
//     gdb (in dom0) opens with the guest's vmlinux: jiffies there is what
//     the probe read live, linux_banner and init_task.comm the kernel's;
//   - exit 4 leaves the domain paused at the probe and prints a command
//     (gdbsx, gdb, xl unpause) that the test runs with gdb in batch mode:
//     gdb's pc is the probed function, and the domain runs on after it.
func TestXenGuestExits(t *testing.T) {
	xenlab.Require(t)
	art, err := qemulab.Artifacts() // the domU kernel's vmlinux (BTF)
	if err != nil {
		t.Fatal(err)
	}
	lab, err := xenlab.Artifacts()
	if err != nil {
		t.Fatal(err)
	}
	// gdb in dom0: the lab's gdb-minimal and its libraries (the PV lab
	// has them at /opt/gdb, /bin/gdb its wrapper, when the build made them)
	if _, err := os.Stat(filepath.Join(lab, "gdb", "gdb")); err != nil {
		testkit.SkipOrFail(t, "%v", err)
	}
	// gdb reads the core with the vmlinux and System.map's addresses
	core, err := corecheck.New(art)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(name string) uint64 {
		a, err := core.Addr(name)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}

	l := pvLab(t, labSetup{timeout: 25 * time.Minute, dump: dumpOf("/tmp/daemon.log"),
		files: map[string]string{"/etc/gprobes/io.dpdf": portIO, "/etc/gprobes/popu.dpdf": popU, "/etc/gprobes/dump.dpdf": dumpOnce, "/etc/gprobes/handover.dpdf": handover}})
	vm := l.vm
	d := vm.DomID("domu1")
	run := func(cmd string) string {
		t.Helper()
		return l.runFor(cmd, xenlab.RunBound)
	}
	run(xenlab.DaemonUp("", "/tmp/g.sock", "--state /tmp/gstate", "/tmp/daemon.log"))
	syms := guestSyms
	insert := func(file string) {
		t.Helper()
		run(fmt.Sprintf("gprobes insert --socket /tmp/g.sock --target xen:%d %s /etc/gprobes/%s", d, syms, file))
	}
	remove := func() {
		t.Helper()
		run(fmt.Sprintf("gprobes remove --socket /tmp/g.sock --target xen:%d vmlinux", d))
	}
	type logLine struct {
		Target   string
		Minor    int
		Data     string
		Dump     string
		Debugger string
	}
	// records waits for a record of the domain's probes that want takes
	records := func(what string, want func(logLine) bool) logLine {
		t.Helper()
		var found logLine
		testkit.Wait(t, 3*time.Minute, "a record in the daemon's log: "+what, func() (bool, string) {
			out := run("gprobes log --socket /tmp/g.sock --json")
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				var rec logLine
				if json.Unmarshal([]byte(l), &rec) == nil && rec.Target == fmt.Sprintf("xen:%d", d) && want(rec) {
					found = rec
					return true, ""
				}
			}
			return false, labkit.Tail(out, 10)
		})
		return found
	}
	words := func(rec logLine) []uint64 {
		b, _ := hex.DecodeString(rec.Data)
		var w []uint64
		for ; len(b) >= 8; b = b[8:] {
			w = append(w, binary.LittleEndian.Uint64(b))
		}
		return w
	}

	// pop u
	insert("popu.dpdf")
	out, _, err := vm.RunDomU("domu1", "sh -c 'exit 7'; echo status=$?", 5*time.Minute)
	if err != nil || !strings.Contains(out, "status=42") {
		t.Errorf("domu1 saw %q (%v), want status=42 (pop u,rdi at exit_group)", out, err)
	}
	rec := records("pop u's", func(l logLine) bool { return l.Minor == 1 && l.Data != "" })
	if w := words(rec); len(w) != 3 || w[0] != 7 || w[1] == 0 || w[1] >= 1<<47 || w[2] < 1<<63 {
		t.Errorf("push u,rdi / u,rip / r,rip: %#x, want 7, a user address, a kernel address", w)
	}
	if out, _, _ := vm.RunDomU("domu1", "sh -c 'exit 5'; echo status=$?", 5*time.Minute); !strings.Contains(out, "status=5") {
		t.Errorf("exit 5: domu1 saw %q", out)
	}
	remove()
	// port IO: refused at insert, the reason named
	out, rc, _ := vm.Run(fmt.Sprintf("gprobes insert --socket /tmp/g.sock --target xen:%d %s /etc/gprobes/io.dpdf 2>&1", d, syms), xenlab.RunBound)
	if rc == 0 || !strings.Contains(out, "IO space") {
		t.Errorf("push io on a PV domain: rc %d: %s", rc, out)
	}
	if out, _, _ := vm.Run("gprobes query --socket /tmp/g.sock --all", xenlab.RunBound); strings.Contains(out, "vmlinux") {
		t.Logf("the refused module is left in the daemon:\n%s", out)
		remove()
	}

	// exit 3
	insert("dump.dpdf")
	if out, rc, err := vm.RunDomU("domu1", "gpwork counts 1 /etc/gp-a /etc/gp-b", 2*time.Minute); err != nil || rc != 0 {
		t.Fatalf("gpwork: rc %d %v\n%s", rc, err, out)
	}
	rec = records("exit 3's, with its dump", func(l logLine) bool { return l.Dump != "" })
	if !strings.HasPrefix(rec.Dump, "/tmp/gstate/dumps/") {
		t.Fatalf("exit 3: dump %q", rec.Dump)
	}
	jiffies := words(rec)[0]
	t.Logf("core: %s", run("ls -ls "+rec.Dump+"; du -k "+rec.Dump))
	gargs, err := core.GdbArgs(rec.Dump)
	if err != nil {
		t.Fatal(err)
	}
	gout := run("gdb -nx -batch /guest/vmlinux " + corecheck.ShellArgs(gargs) + " 2>&1")
	t.Logf("gdb on the core:\n%s", gout)
	for _, e := range core.Verify(gout, jiffies) {
		t.Error(e)
	}
	run("rm " + rec.Dump)
	remove()
	if out, rc, err := vm.RunDomU("domu1", "echo alive", 5*time.Minute); err != nil || rc != 0 || !strings.Contains(out, "alive") {
		t.Errorf("domu1 after the dump: rc %d %v %q", rc, err, out)
	}

	// exit 4
	insert("handover.dpdf")
	run(fmt.Sprintf("(domu-run -t 170 %d 'sync; echo synced' >/tmp/sync.out 2>&1 &)", d))
	rec = records("exit 4's, with its debugger command", func(l logLine) bool { return l.Debugger != "" })
	t.Logf("exit 4: %s", rec.Debugger)
	remote := regexp.MustCompile(`-ex '(target remote [^']+)'`).FindStringSubmatch(rec.Debugger)
	if remote == nil || !strings.HasPrefix(rec.Debugger, fmt.Sprintf("gdbsx -a %d 64 ", d)) {
		t.Fatalf("exit 4 printed %q", rec.Debugger)
	}
	line := strings.Replace(rec.Debugger, "gdb ", "gdb -nx -batch ", 1)
	sync := addr("__x64_sys_sync")
	line = strings.Replace(line, remote[0], remote[0]+fmt.Sprintf(` -ex 'printf "PC %%lx\n", $pc' -ex 'x/2i %#x' -ex detach`, sync), 1)
	gout = run(line + " 2>&1")
	t.Logf("%s:\n%s", line, gout)
	// the vCPU stands where the probed instruction has run, once: the
	// next instruction's address (x/2i's second line)
	m := regexp.MustCompile(`PC ([0-9a-f]+)`).FindStringSubmatch(gout)
	insns := regexp.MustCompile(`(?m)^(?:=> |\s+)0x([0-9a-f]+):`).FindAllStringSubmatch(gout, -1)
	if m == nil || len(insns) < 2 {
		t.Fatalf("gdb through the printed command: no pc or disassembly")
	}
	pc, _ := strconv.ParseUint(m[1], 16, 64)
	next, _ := strconv.ParseUint(insns[1][1], 16, 64)
	if w := words(rec); pc != next || len(w) != 1 || w[0] != sync {
		t.Errorf("gdb's pc %#x, want %#x, the instruction after the probe at %#x (rip logged %#x)", pc, next, sync, w)
	}
	if out, _, err := vm.Run(labkit.Wait{What: "domu1 to run on after the debugger", Cond: "grep -q synced /tmp/sync.out", Show: "cat /tmp/sync.out; xl list", Secs: 180}.Cmd(), xenlab.RunBound); err != nil || out != "" {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, rc, err := vm.RunDomU("domu1", "echo alive", 5*time.Minute); err != nil || rc != 0 || !strings.Contains(out, "alive") {
		t.Errorf("domu1 after the debugger: rc %d %v %q", rc, err, out)
	}
	// the lab as found (exit 4 took its probes out): no module, no daemon
	run("gprobes remove --socket /tmp/g.sock --all; kill $(pidof gprobes); " + xenlab.Gone("gprobes"))
}

const portIO = `name = vmlinux
modtype = kernel
offset = __x64_sys_exit_group
push d,0x64
push io,1
log 1
exit 1
`

const popU = `name = vmlinux
modtype = kernel
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

const handover = `name = vmlinux
modtype = kernel
offset = __x64_sys_sync
minor = 1
push r,rip
log 1
exit 4
`
