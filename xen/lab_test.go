package xen_test

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/lab/labkit"
	"github.com/gprobes/gprobes/lab/xenlab"
)

// TestXenNative, on the shared PV lab and a second PV domU, from dom0 probes
// their kernels with the native backend (xen:DOMID) through a gprobes
// daemon: exact hit counts from the workload, the pid and fd logged,
// removal mid-run, a domU destroyed while probed, the daemon stopped with
// probes in.
func TestXenNative(t *testing.T) {
	l := pvLab(t, labSetup{files: map[string]string{
		// two probe addresses: both get a debug register (breakpoints auto)
		"/etc/gprobes/writes.dpdf": "name = vmlinux\nmodtype = kernel\nvars = 2\n" +
			"offset = ksys_write\nminor = 1\ninc lv,0\npush pid\npush r,rdi\nlog 2\nexit 1\n" +
			"offset = do_sys_openat2\nminor = 2\ninc lv,1\npush pid\nlog 1\npush d,255\npush r,rsi\nlog str\nexit 1\n",
		"/etc/gprobes/fd4.dpdf": "name = vmlinux\nmodtype = kernel\noffset = ksys_write\npush r,rdi\nlog 1\nexit 1\n"},
		dump: dumpOf("/tmp/daemon.log"), timeout: 30 * time.Minute})
	vm, run := l.vm, l.run
	// domu2 beside the lab's domu1 (destroyed below, while probed)
	d1, d2 := vm.DomID("domu1"), l.createDomU("domu2")
	pidRe := regexp.MustCompile(`GPWORK pid (\d+)`)
	work := func(name string, n int) int {
		t.Helper()
		out, rc, err := vm.RunDomU(name, fmt.Sprintf("gpwork counts %d /etc/gp-a /etc/gp-b", n), 10*time.Minute)
		if err != nil || rc != 0 || !strings.Contains(out, fmt.Sprintf("write %d ", n)) {
			t.Fatalf("%s: gpwork: rc %d %v\n%s", name, rc, err, out)
		}
		m := pidRe.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no pid in %q", out)
		}
		var pid int
		fmt.Sscan(m[1], &pid)
		return pid
	}
	run(xenlab.DaemonUp("", "/tmp/g.sock", "", "/tmp/daemon.log"))
	if out, _, err := vm.RunDomU("domu1", "grep -w -e linux_banner -e _stext /proc/kallsyms; uname -a", 5*time.Minute); err == nil {
		t.Logf("domu1:\n%s", out)
	}
	t.Logf("dom0: %s", run("grep -w -e linux_banner -e _stext /guest/System.map"))
	syms := guestSyms
	t0 := time.Now()
	run(fmt.Sprintf("gprobes insert --socket /tmp/g.sock --target xen:%d %s /etc/gprobes/writes.dpdf", d1, syms))
	t.Logf("insert into xen:%d in %v", d1, time.Since(t0))
	run(fmt.Sprintf("gprobes insert --socket /tmp/g.sock --target xen:%d %s /etc/gprobes/writes.dpdf", d2, syms))
	// count counts the records of writes to fd and of opens of path by
	// pid (the string read from the task's memory)
	count := func(dom, pid, fd int, path string) (writes, opens int) {
		t.Helper()
		out := run("gprobes log --socket /tmp/g.sock --json")
		pidHex := hex.EncodeToString(binary.LittleEndian.AppendUint64(nil, uint64(pid)))
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var rec struct {
				Target string
				Pid    int
				Minor  int
				Data   string
			}
			if json.Unmarshal([]byte(l), &rec) != nil || rec.Target != fmt.Sprintf("xen:%d", dom) || rec.Pid != pid {
				continue
			}
			if rec.Minor == 1 && rec.Data == pidHex+fmt.Sprintf("%02x00000000000000", fd) {
				writes++
			}
			if rec.Minor == 2 && rec.Data == pidHex+hex.EncodeToString([]byte(path)) {
				opens++
			}
		}
		return writes, opens
	}
	t0 = time.Now()
	p1 := work("domu1", 4)
	t.Logf("4 probed rounds in domu1 in %v", time.Since(t0))
	p2 := work("domu2", 3)
	if w, o := count(d1, p1, 4, "/etc/gp-a"); w != 4 || o != 4 {
		t.Errorf("domu1: %d writes and %d opens of /etc/gp-a by pid %d logged, want 4 and 4", w, o, p1)
	}
	if w, o := count(d2, p2, 4, "/etc/gp-b"); w != 3 || o != 3 {
		t.Errorf("domu2: %d writes and %d opens of /etc/gp-b by pid %d logged, want 3 and 3", w, o, p2)
	}
	out := run("gprobes query --socket /tmp/g.sock --all")
	t.Logf("query:\n%s", out)
	// out of domu1 only; domu2 still probed
	run(fmt.Sprintf("gprobes remove --socket /tmp/g.sock --target xen:%d vmlinux", d1))
	p1, p2 = work("domu1", 2), work("domu2", 2)
	if w, o := count(d1, p1, 4, "/etc/gp-a"); w != 0 || o != 0 {
		t.Errorf("domu1: %d writes and %d opens logged after removal", w, o)
	}
	if w, o := count(d2, p2, 4, "/etc/gp-a"); w != 2 || o != 2 {
		t.Errorf("domu2: %d writes and %d opens of /etc/gp-a by pid %d logged, want 2 and 2", w, o, p2)
	}
	// latency of write(2) in domu1: native, then probed with an empty
	// program (figures for BENCHMARKS.md, not checked)
	lat := func(name string) string {
		// 2000 stops when probed: under TCG on a loaded host one has taken
		// 90 ms and more, so a generous bound
		out, rc, err := vm.RunDomU(name, "gpwork lat write 2000", 15*time.Minute)
		if err != nil || rc != 0 {
			t.Fatalf("%s: gpwork lat: rc %d %v\n%s", name, rc, err, out)
		}
		return strings.TrimSpace(out)
	}
	native := lat("domu1")
	run(fmt.Sprintf("printf 'name = vmlinux\\nmodtype = kernel\\noffset = ksys_write\\nexit 0\\n' >/etc/gprobes/empty.dpdf && gprobes insert --socket /tmp/g.sock --target xen:%d %s /etc/gprobes/empty.dpdf", d1, syms))
	probed := lat("domu1")
	run(fmt.Sprintf("gprobes remove --socket /tmp/g.sock --target xen:%d vmlinux", d1))
	t.Logf("write(2) latency in domu1: native %q, native backend with an empty probe %q", native, probed)

	// domu2 destroyed while probed: its probes are gone, the daemon serves
	// (it learns of the end by xenstore's @releaseDomain watch)
	if err := vm.DestroyDomU("domu2"); err != nil {
		t.Fatal(err)
	}
	out = run(labkit.Wait{What: "the daemon to let destroyed domu2 go", Show: "gprobes query --socket /tmp/g.sock --all; ls /run/gprobes/xen",
		Cond: fmt.Sprintf("! gprobes query --socket /tmp/g.sock --all | grep -q active && [ ! -e /run/gprobes/xen/dom%d.json ]", d2)}.Cmd() +
		"; gprobes query --socket /tmp/g.sock --all")
	if strings.Contains(out, "active") {
		t.Errorf("probes of a destroyed domain still active:\n%s", out)
	}
	t.Logf("query after domu2 was destroyed:\n%s", out)
	if out := run("ls /run/gprobes/xen"); strings.Contains(out, fmt.Sprintf("dom%d.json", d2)) {
		t.Errorf("the journal of destroyed domu2 is still there (its target was not released):\n%s", out)
	}
	// the daemon stopped with probes in: domu1 runs on with its own code
	run(fmt.Sprintf("gprobes insert --socket /tmp/g.sock --target xen:%d %s /etc/gprobes/writes.dpdf", d1, syms))
	work("domu1", 1)
	run("kill $(pidof gprobes); " + xenlab.Gone("gprobes"))
	work("domu1", 2)
	if out := run("xl list"); !strings.Contains(out, "domu1") {
		t.Errorf("domu1 is gone:\n%s", out)
	}
	// the stops of the daemon's targets came by VIRQ_DEBUGGER: debug
	// registers, no polling (the 50 ms state check that catches a guest's
	// own int3 may cross a hit now and then and be first to see it)
	dlog := run("cat /tmp/daemon.log")
	if strings.Contains(dlog, "found by a state check") {
		t.Errorf("the daemon runs without VIRQ_DEBUGGER or the @releaseDomain watch:\n%.2000s", dlog)
	}
	sums := summaryRe.FindAllStringSubmatch(dlog, -1)
	events := 0
	for _, m := range sums {
		var stops, byEvent, byCheck int
		fmt.Sscan(m[1], &stops)
		fmt.Sscan(m[2], &byEvent)
		fmt.Sscan(m[3], &byCheck)
		if byEvent+byCheck > stops || byCheck*50 > stops {
			t.Errorf("debug-register breakpoints: %s", m[0])
		}
		events += byEvent
	}
	if events < 4+3+2*2+2*2+2000 {
		t.Errorf("%d stops reported by VIRQ_DEBUGGER, want at least the %d probed calls:\n%q", events, 4+3+2*2+2*2+2000, sums)
	}

	// int3 breakpoints, found by the state check: gprobes run, no daemon
	run(xenlab.RunUp("GPROBES_XEN_BREAKPOINTS=int3 ", fmt.Sprintf("--target xen:%d %s /etc/gprobes/fd4.dpdf", d1, syms), "/tmp/run.out"))
	work("domu1", 3)
	out = run("kill -INT $(pidof gprobes); " + xenlab.Gone("gprobes") + "; cat /tmp/run.out")
	if n := strings.Count(out, "data 4\n"); n != 3 {
		t.Errorf("int3: %d records of writes to fd 4, want 3:\n%.3000s", n, out)
	}
	if m := summaryRe.FindStringSubmatch(out); m == nil || m[3] == "0" {
		t.Errorf("int3: no stop found by the state check:\n%.3000s", out)
	}
	work("domu1", 1)

	// gprobes killed with SIGKILL, probes in: the next hit pauses domu1
	// and nobody lets it go. The journal puts it back: `gprobes recover`
	// after a `gprobes run` with int3 bytes; a daemon starting after a
	// daemon with debug registers.
	hangThenRecover := func(what, kill, recover string) {
		t.Helper()
		killed := run(kill + "; " + xenlab.Gone("gprobes") + "; cat /tmp/run3.out /tmp/k.log 2>/dev/null; ps")
		// the workload's first write stops domu1 at a probe nobody serves:
		// it stays paused, and the workload does not end
		run(fmt.Sprintf("rm -f /tmp/w.out; (domu-run -t 150 %d 'gpwork counts 1 /etc/gp-a /etc/gp-b' >/tmp/w.out 2>&1; echo rc=$? >>/tmp/w.out) &", d1))
		if out, _, _ := vm.Run(xenlab.WaitPaused(d1)+fmt.Sprintf("; xl list %d; cat /tmp/w.out", d1), xenlab.RunBound); !regexp.MustCompile(`domu1\s+\d+\s+\d+\s+\d+\s+[-rb]*p`).MatchString(out) || strings.Contains(out, "rc=") {
			t.Errorf("%s: domu1 should be paused at the probe of the dead gprobes:\n%s\nthe kill and gprobes' output:\n%s", what, out, killed)
		}
		out := run(recover + "; " + labkit.Wait{What: "the workload in domu1 to end", Cond: "grep -q rc= /tmp/w.out", Show: fmt.Sprintf("cat /tmp/w.out; xl list %d", d1), Secs: 200}.Cmd() +
			"; cat /tmp/w.out; ls /run/gprobes/xen; xl list " + fmt.Sprint(d1))
		if !strings.Contains(out, "put back after gprobes") || !strings.Contains(out, "write 1 ") || !strings.Contains(out, "rc=0") || strings.Contains(out, ".json") {
			t.Errorf("%s: domu1 not put back:\n%s", what, out)
		}
		t.Logf("%s:\n%s", what, out)
		if w, rc, err := vm.RunDomU("domu1", "gpwork counts 1; echo OOPS=$(dmesg | grep -c -e Oops -e 'int3:')", 5*time.Minute); err != nil || rc != 0 || !strings.Contains(w, "OOPS=0") {
			t.Errorf("%s: domu1 after recovery: rc %d %v\n%s", what, rc, err, w)
		}
	}
	// every gprobes leaves a guard (gprobes recover --guard PID) that
	// puts the domain back the moment its owner dies: killed first here,
	// so the journal is what recovers; pidof names guards too, and which
	// of the two a plain kill -9 reaches first is a race
	guards := "for p in $(pidof gprobes); do grep -q -- --guard /proc/$p/cmdline && kill -9 $p; done; "
	others := "for p in $(pidof gprobes); do grep -q -- --guard /proc/$p/cmdline || kill -9 $p; done"
	hangThenRecover("int3 bytes, gprobes run and its guard killed, gprobes recover",
		xenlab.RunUp("GPROBES_XEN_BREAKPOINTS=int3 ", fmt.Sprintf("--target xen:%d %s /etc/gprobes/writes.dpdf", d1, syms), "/tmp/run3.out")+
			fmt.Sprintf("; cat /run/gprobes/xen/dom%d.json; %s%s", d1, guards, others),
		"gprobes recover")
	hangThenRecover("debug registers, daemon and its guard killed, a daemon starting",
		xenlab.DaemonUp("", "/tmp/k.sock", "--state /tmp/k", "/tmp/k.log")+
			fmt.Sprintf("; gprobes insert --socket /tmp/k.sock --target xen:%d %s /etc/gprobes/writes.dpdf; %s%s", d1, syms, guards, others),
		xenlab.DaemonUp("", "/tmp/k.sock", "--state /tmp/k", "/tmp/k2.log")+"; cat /tmp/k2.log")
	// gprobes run killed, its guard alive: the domain is put back at once,
	// and the workload never waits
	out = run(xenlab.RunUp("GPROBES_XEN_BREAKPOINTS=int3 ", fmt.Sprintf("--target xen:%d %s /etc/gprobes/writes.dpdf", d1, syms), "/tmp/run4.out") + "; " + others + "; " +
		labkit.Wait{What: "the guard to put domu1 back", Cond: "grep -q 'put back after gprobes' /tmp/run4.out && ! ls /run/gprobes/xen | grep -q json", Show: "cat /tmp/run4.out; ls /run/gprobes/xen"}.Cmd() +
		"; cat /tmp/run4.out; ls /run/gprobes/xen")
	if !strings.Contains(out, "gprobes guard: xen:") || !strings.Contains(out, "put back after gprobes") || strings.Contains(out, ".json") {
		t.Errorf("run killed, guard alive: the guard did not put domu1 back:\n%s", out)
	}
	if w, rc, err := vm.RunDomU("domu1", "gpwork counts 1; echo OOPS=$(dmesg | grep -c -e Oops -e 'int3:')", 5*time.Minute); err != nil || rc != 0 || !strings.Contains(w, "OOPS=0") {
		t.Errorf("run killed, guard alive: domu1 after the guard: rc %d %v\n%s", rc, err, w)
	}
	run("kill $(pidof gprobes); " + xenlab.Gone("gprobes"))
}

var summaryRe = regexp.MustCompile(`gprobes: xen:\d+: (\d+) stops in [0-9.]+ s: (\d+) reported by VIRQ_DEBUGGER or xenstore, (\d+) found by a timed state check`)

// TestXenGdbsx is the gdbsx path: gprobes run with a gdb: target against
// gdbsx in dom0 (no Z0/Z1, no X: int3 written with M), exact records of the
// workload's writes, the write(2) latency under it logged for BENCHMARKS.md.
func TestXenGdbsx(t *testing.T) {
	l := pvLab(t, labSetup{files: map[string]string{
		"/etc/gprobes/writes.dpdf": "name = vmlinux\nmodtype = kernel\noffset = ksys_write\npush r,rdi\nlog 1\nexit 1\n"}})
	vm := l.vm
	d := vm.DomID("domu1")
	lat := func() string {
		out, rc, err := vm.RunDomU("domu1", "gpwork lat write 200", 10*time.Minute) // 300 ms a probed call has been seen
		if err != nil || rc != 0 {
			t.Fatalf("gpwork lat: rc %d %v\n%s", rc, err, out)
		}
		return strings.TrimSpace(out[strings.Index(out, "GPWORK lat"):])
	}
	native := lat()
	dom0 := func(cmd string) string {
		t.Helper()
		out, rc, err := vm.Run(cmd, xenlab.RunBound)
		if err != nil || rc != 0 {
			t.Fatalf("dom0: %s: rc %d %v\n%s", cmd, rc, err, out)
		}
		return out
	}
	const runArgs = "--target gdb:127.0.0.1:9999 " + guestSyms + " /etc/gprobes/writes.dpdf"
	dom0(xenlab.GdbsxUp(d) + "; " + xenlab.RunUp("", runArgs, "/tmp/run.out"))
	w, rc, err := vm.RunDomU("domu1", "gpwork counts 2", 5*time.Minute)
	m := regexp.MustCompile(`GPWORK pid (\d+)`).FindStringSubmatch(w)
	if err != nil || rc != 0 || m == nil {
		t.Fatalf("domu1: rc %d %v\n%s", rc, err, w)
	}
	// gdbsx's register block has no gs_base: the records cannot name the
	// task (pid 0); the workload is the only writer of fd 4
	out, _, _ := vm.Run("cat /tmp/run.out", time.Minute)
	if n := strings.Count(out, "data 4\n"); n != 2 {
		t.Errorf("%d records of writes to fd 4, want 2 (gpwork pid %s):\n%.3000s", n, m[1], out)
	}
	probed := lat()
	// Ctrl-C: gdbsx ignores ^C (and sends its next stop reply twice, for
	// it reads the 0x03 where it waits for an ack), so gprobes detaches
	// at the next hit, which it logs; the guest's code is whole again.
	// gprobes says it waits for that hit once a second has passed: the
	// workload starts then (the domain is idle: no write comes before)
	dom0(xenlab.StopWaiting("/tmp/run.out"))
	w, rc, err = vm.RunDomU("domu1", "gpwork counts 2; echo OOPS=$(dmesg | grep -c -e Oops -e 'int3:')", 5*time.Minute)
	if err != nil || rc != 0 || !strings.Contains(w, "write 2 ") || !strings.Contains(w, "OOPS=0") {
		t.Errorf("domu1 after the Ctrl-C of gprobes: rc %d %v\n%s", rc, err, w)
	}
	out, _, _ = vm.Run(xenlab.Gone("gprobes")+"; pidof gprobes || echo GPROBES-GONE; tail -8 /tmp/run.out; xl list", xenlab.RunBound)
	if !strings.Contains(out, "domu1") || !strings.Contains(out, "GPROBES-GONE") || strings.Contains(out, "gdb packet") {
		t.Errorf("after Ctrl-C and a hit, gprobes should have detached cleanly and domu1 run on:\n%s", out)
	}
	if m := regexp.MustCompile(`ksys_write\s+0x[0-9a-f]+\s+\S+\s+\S+\s+(\d+)`).FindStringSubmatch(out); m == nil || m[1] == "0" {
		t.Errorf("no hit count in the summary:\n%s", out)
	}
	// the other way out: ^C, then the domain paused, which gdbsx reports
	// as a stop (SIGINT); it unpauses the domain as gprobes detaches
	// (the first gdbsx ended with its client's detach). The domain is
	// paused only while gprobes waits: had a hit ended it first, nobody
	// would unpause it, and this way out would not have been taken
	dom0(xenlab.Gone("gdbsx") + "; " + xenlab.GdbsxUp(d) + "; " + xenlab.RunUp("", runArgs, "/tmp/run2.out") + "; " + xenlab.StopWaiting("/tmp/run2.out"))
	out, _, _ = vm.Run(fmt.Sprintf("kill -0 $(cat /tmp/run2.out.pid) && xl pause %d && echo PAUSED-WHILE-WAITING; %s; pidof gprobes || echo GPROBES-GONE; cat /tmp/run2.out; xl list %d", d, xenlab.Gone("gprobes"), d), xenlab.RunBound)
	if !strings.Contains(out, "PAUSED-WHILE-WAITING") || !strings.Contains(out, "gprobes: waiting for the guest to stop") {
		t.Errorf("Ctrl-C then xl pause: gprobes had ended before the pause (a hit?), so this way out was not tried:\n%s", out)
	}
	if !strings.Contains(out, "GPROBES-GONE") || strings.Contains(out, "gdb packet") || !regexp.MustCompile(`domu1\s+\d+\s+\d+\s+\d+\s+[r-]b?-{3,}`).MatchString(out) {
		t.Errorf("Ctrl-C then xl pause: gprobes should have detached and domu1 run on (not paused):\n%s", out)
	}
	if w, rc, err := vm.RunDomU("domu1", "gpwork counts 1; echo OOPS=$(dmesg | grep -c -e Oops -e 'int3:')", 5*time.Minute); err != nil || rc != 0 || !strings.Contains(w, "OOPS=0") {
		t.Errorf("domu1 after gprobes left through xl pause: rc %d %v\n%s", rc, err, w)
	}
	t.Logf("write(2) latency in domu1: native %q, gdbsx path with a logging probe %q", native, probed)
}
