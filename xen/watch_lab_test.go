package xen_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/lab/labkit"
	"github.com/gprobes/gprobes/lab/xenlab"
)

// TestXenWatch: watch probes on a PV domU's kernel from dom0, in the
// vCPUs' debug registers, shared with the debug-register breakpoints of
// code probes. The variable is lease_break_time, behind
// /proc/sys/fs/lease-break-time, which nothing else in the guest touches:
// a busybox loop writes it with echo (one write(2)) and reads it with read
// (one look at it: the second byte read is the end of the file), the same
// loop TestGuestWatch counts exactly in the QEMU lab. Then: the daemon
// killed with SIGKILL with the watch in (the next write pauses the domain
// for good) and `gprobes recover`; and gdbsx, which has no watchpoints:
// the watch refused, by name.
func TestXenWatch(t *testing.T) {
	l := pvLab(t, labSetup{files: map[string]string{
		// three code probes: debug registers DR0-DR2 (breakpoints = auto)
		"/etc/gprobes/code.dpdf": "name = vmlinux\nmodtype = kernel\nvars = 5\n" +
			"offset = ksys_write\nminor = 1\ninc lv,0\nexit 0\n" +
			"offset = ksys_read\nminor = 2\ninc lv,1\nexit 0\n" +
			"offset = do_sys_openat2\nminor = 3\ninc lv,2\nexit 0\n",
		"/etc/gprobes/watch.dpdf": "name = vmlinux\nmodtype = kernel\nvars = 5\n" +
			"watch = lease_break_time,4,w\nminor = 11\ninc lv,3\npush pid\nlog 1\nexit 1\n" +
			"watch = lease_break_time,4,rw\nminor = 12\ninc lv,4\nexit 0\n",
		// the rw one first: it gets the lower register, which the backend
		// swaps (QEMU's x86 sets only the first matching register's DR6 bit)
		"/etc/gprobes/watch2.dpdf": "name = vmlinux\nmodtype = kernel\nvars = 5\n" +
			"watch = lease_break_time,4,rw\nminor = 12\ninc lv,4\nexit 0\n" +
			"watch = lease_break_time,4,w\nminor = 11\ninc lv,3\npush pid\nlog 1\nexit 1\n"},
		dump: dumpOf("/tmp/wd.log"), timeout: 25 * time.Minute})
	vm, run := l.vm, l.run
	d := vm.DomID("domu1")
	loop := func(n int) {
		t.Helper()
		cmd := fmt.Sprintf("i=0; while [ $i -lt %d ]; do echo 45 >/proc/sys/fs/lease-break-time; read x </proc/sys/fs/lease-break-time; i=$((i+1)); done; echo x=$x", n)
		if out, rc, err := vm.RunDomU("domu1", cmd, 10*time.Minute); err != nil || rc != 0 || !strings.Contains(out, "x=4") {
			t.Fatalf("domu1: the loop: rc %d %v\n%s", rc, err, out)
		}
	}
	syms := guestSyms
	sock := "--socket /tmp/w.sock"

	// gdbsx: no watchpoints, the watch refused by name (gprobes takes a
	// while to read the vmlinux in dom0 under TCG before it asks)
	// (both watches refused, gprobes run has no probe in, and the stub
	// ignores ^C: the domain paused is the stop it waits for)
	out, rc, err := vm.Run(xenlab.GdbsxUp(d)+"; "+xenlab.RunUp("", fmt.Sprintf("--target gdb:127.0.0.1:9999 %s /etc/gprobes/watch.dpdf", syms), "/tmp/run.out")+
		"; "+xenlab.StopWaiting("/tmp/run.out")+
		fmt.Sprintf("; xl pause %d; %s; pidof gprobes || echo GPROBES-GONE; cat /tmp/run.out; cat /tmp/gdbsx.log; xl list %d", d, xenlab.Gone("gprobes"), d), xenlab.RunBound)
	if err != nil || rc != 0 || !strings.Contains(out, "the stub has no watchpoints") || !strings.Contains(out, "GPROBES-GONE") {
		t.Errorf("gdbsx: the watch should be refused by name and gprobes end: rc %d %v\n%s", rc, err, out)
		vm.Run(fmt.Sprintf("kill -9 $(pidof gprobes) $(pidof gdbsx); %s; xl unpause %d; xl list", xenlab.Gone("gprobes gdbsx"), d), xenlab.RunBound)
	}
	t.Logf("gdbsx:\n%s", out)
	loop(5)

	run(xenlab.DaemonUp("", "/tmp/w.sock", "--state /tmp/w", "/tmp/wd.log"))
	lv := func() []int {
		t.Helper()
		out := run(fmt.Sprintf("gprobes getvars %s vmlinux", sock))
		m := regexp.MustCompile(`lv 0=(\d+) 1=(\d+) 2=(\d+) 3=(\d+) 4=(\d+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("getvars: %s", out)
		}
		v := make([]int, 5)
		for i := range v {
			fmt.Sscan(m[i+1], &v[i])
		}
		return v
	}

	// the code probes take three registers; the first watch the fourth;
	// the second is refused, naming the four
	run(fmt.Sprintf("gprobes insert %s --target xen:%d %s /etc/gprobes/code.dpdf", sock, d, syms))
	// (insert exits 1 when a probe is refused, the others in)
	if out, rc, err := vm.Run(fmt.Sprintf("gprobes insert %s --merge --target xen:%d %s /etc/gprobes/watch.dpdf", sock, d, syms), xenlab.RunBound); err != nil || rc != 1 || !strings.Contains(out, "1 probe of 2 refused") {
		t.Fatalf("insert of the watches: rc %d %v\n%s", rc, err, out)
	}
	q := run(fmt.Sprintf("gprobes query %s --json vmlinux", sock))
	t.Logf("query:\n%s", q)
	for _, want := range []string{`"how":"watch DR3"`, "no debug register left for watch = lease_break_time",
		"DR0 debug-register breakpoint of the code probe at 0x", "GPROBES_XEN_BREAKPOINTS=int3", "DR3 watch = lease_break_time (vmlinux minor 11)"} {
		if !strings.Contains(q, want) {
			t.Errorf("query does not say %q", want)
		}
	}
	const n = 30
	loop(n)
	if v := lv(); v[3] != n || v[4] != 0 {
		t.Errorf("with three code probes: the w watch counted %d (want %d), the refused rw one %d", v[3], n, v[4])
	}

	// the code probes out: the rw watch gets a register of its own
	run(fmt.Sprintf("gprobes remove %s --target xen:%d --minor 1 --minor 2 --minor 3 vmlinux", sock, d))
	run(fmt.Sprintf("gprobes insert %s --merge --target xen:%d %s /etc/gprobes/watch2.dpdf", sock, d, syms))
	run(fmt.Sprintf("gprobes getvars %s --reset vmlinux", sock))
	loop(n)
	if v := lv(); v[3] != n || v[4] != 2*n {
		t.Errorf("two watches: w %d (want %d), rw %d (want %d)", v[3], n, v[4], 2*n)
	}
	q = run(fmt.Sprintf("gprobes query %s vmlinux", sock))
	t.Logf("query:\n%s", q)

	// the daemon and its guard killed with the watches in: the next
	// write pauses domu1 (a #DB with no debugger); gprobes recover clears
	// the registers and lets it go
	run("for p in $(pidof gprobes); do grep -q -- --guard /proc/$p/cmdline && kill -9 $p; done; for p in $(pidof gprobes); do kill -9 $p; done; " + xenlab.Gone("gprobes"))
	run(fmt.Sprintf("rm -f /tmp/ww.out; (domu-run -t 150 %d 'echo 45 >/proc/sys/fs/lease-break-time; echo wrote' >/tmp/ww.out 2>&1; echo rc=$? >>/tmp/ww.out) &", d))
	if out, _, _ := vm.Run(xenlab.WaitPaused(d)+fmt.Sprintf("; xl list %d; cat /tmp/ww.out", d), xenlab.RunBound); !regexp.MustCompile(`domu1\s+\d+\s+\d+\s+\d+\s+[-rb]*p`).MatchString(out) || strings.Contains(out, "rc=") {
		t.Errorf("domu1 should be paused at the watch of the dead daemon:\n%s", out)
	}
	out = run("gprobes recover; " + labkit.Wait{What: "the write in domu1 to end", Cond: "grep -q rc= /tmp/ww.out", Show: fmt.Sprintf("cat /tmp/ww.out; xl list %d", d), Secs: 200}.Cmd() +
		"; cat /tmp/ww.out; ls /run/gprobes/xen; xl list " + fmt.Sprint(d))
	if !strings.Contains(out, "put back after gprobes") || !strings.Contains(out, "wrote") || !strings.Contains(out, "rc=0") || strings.Contains(out, ".json") {
		t.Errorf("domu1 not put back:\n%s", out)
	}
	t.Logf("recover:\n%s", out)
	loop(5) // nothing stops it any more

	loop(5)
}
