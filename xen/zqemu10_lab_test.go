//go:build linux

// This file's name sorts after the other lab tests' on purpose: go test
// runs a package's tests file by file in name order, and this test's
// labs (QEMU 10.0) are not the shared PV lab, which is powered off for
// them (one TCG lab at a time): run among the PV tests, it would cost the
// PV lab a second boot.

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

	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/lab/labkit"
	"github.com/gprobes/gprobes/lab/xenlab"
)

// TestXenPVHProbes runs the Xen lab under Debian's QEMU 10.0 from
// bookworm-backports (xenlab.BackportsQEMU; the system's QEMU 7.2 is
// TestXenPVH's) and proves probes on a PVH domU end to end (docs/xen.md,
// "HVM and PVH domains"):
//
//   - plain: the lab's hypervisor boots, dom0 and a PV domU run, PV probes
//     come back exactly; a PVH domU does not boot: QEMU 10.0 reports its
//     kernel's read of CR2 as a CR0 read, Xen emulates it from a stale
//     copy, and the early page-fault handler halts with interrupts off,
//     which Xen takes for a power-off (asserted: a QEMU without that bug
//     fails the test, and the docs are to be updated then);
//   - probes: the hypervisor with src/xen-svm-cr2.patch (xen-cr2sync, that
//     copy kept current) boots the PVH domU, and debug-register probes come
//     back by both routes (GPROBES_XEN_ROUTE=debug and vmevent): QEMU 10.0
//     arms the guest's %dr7 at VMRUN. Exact counts, the records' pid and
//     argument registers, the query before and after removal, the guest
//     without an oops, the time per hit logged; int3 bytes are still not
//     intercepted (the guest's own #BP handler takes them and oopses).
//
// Under CI=true, failing to get the backports QEMU fails the test.
func TestXenPVHProbes(t *testing.T) {
	xenlab.Require(t)
	q, err := xenlab.BackportsQEMU()
	if err != nil {
		testkit.SkipOrFail(t, "%v", err)
	}
	t.Logf("QEMU: %s (%s)", q.Path, q.Version)
	files := map[string]string{
		"/etc/gprobes/writes.dpdf": "name = vmlinux\nmodtype = kernel\nvars = 2\n" +
			"offset = ksys_write\nminor = 1\ninc lv,0\npush pid\npush r,rdi\nlog 2\nexit 1\n" +
			"offset = do_sys_openat2\nminor = 2\ninc lv,1\npush pid\nlog 1\npush d,255\npush r,rsi\nlog str\nexit 1\n",
		"/etc/gprobes/empty.dpdf": "name = vmlinux\nmodtype = kernel\noffset = ksys_write\nexit 0\n",
		"/etc/gprobes/fd4.dpdf":   "name = vmlinux\nmodtype = kernel\noffset = ksys_write\npush r,rdi\nlog 1\nexit 1\n",
	}
	pidRe := regexp.MustCompile(`GPWORK pid (\d+)`)
	latRe := regexp.MustCompile(`GPWORK lat write ([0-9.]+)`)
	// work runs gpwork counts n in a domU: n writes to fd 4, n opens of
	// /etc/gp-a; the pid
	work := func(l *labEnv, name string, n int) int {
		l.t.Helper()
		out := l.domU(name, fmt.Sprintf("gpwork counts %d /etc/gp-a", n))
		m := pidRe.FindStringSubmatch(out)
		if m == nil || !strings.Contains(out, fmt.Sprintf("write %d ", n)) {
			l.t.Fatalf("%s: gpwork:\n%s", name, out)
		}
		var pid int
		fmt.Sscan(m[1], &pid)
		return pid
	}
	// count counts the records of pid in domain d: writes to fd 4 (the
	// pid and %rdi), opens of /etc/gp-a (the pid and the string at %rsi),
	// others
	count := func(l *labEnv, d, pid int) (writes, opens, other int) {
		l.t.Helper()
		pidHex := hex.EncodeToString(binary.LittleEndian.AppendUint64(nil, uint64(pid)))
		for _, line := range strings.Split(strings.TrimSpace(l.run("gprobes log --socket /tmp/g.sock --json")), "\n") {
			var rec struct {
				Target string
				Pid    int
				Minor  int
				Data   string
			}
			if json.Unmarshal([]byte(line), &rec) != nil || rec.Target != fmt.Sprintf("xen:%d", d) || rec.Pid != pid {
				continue
			}
			switch {
			case rec.Minor == 1 && rec.Data == pidHex+"0400000000000000":
				writes++
			case rec.Minor == 2 && rec.Data == pidHex+hex.EncodeToString([]byte("/etc/gp-a")):
				opens++
			default:
				other++
			}
		}
		return writes, opens, other
	}
	// lat is gpwork's mean time of a write(2), in µs
	lat := func(l *labEnv, name string) float64 {
		l.t.Helper()
		out := l.domU(name, "gpwork lat write 200")
		m := latRe.FindStringSubmatch(out)
		if m == nil {
			l.t.Fatalf("%s: gpwork lat:\n%s", name, out)
		}
		var ns float64
		fmt.Sscan(m[1], &ns)
		return ns / 1000
	}
	// probe inserts writes.dpdf into domain d through a daemon started
	// with env, checks 4 workload calls come back exactly, logs the time
	// per hit, removes the probes and stops the daemon
	probe := func(l *labEnv, name string, d int, env string) {
		l.t.Helper()
		l.run(xenlab.DaemonUp(env+" ", "/tmp/g.sock", "", "/tmp/daemon.log"))
		l.run(fmt.Sprintf("gprobes insert --socket /tmp/g.sock --target xen:%d %s /etc/gprobes/writes.dpdf", d, guestSyms))
		q := l.run("gprobes query --socket /tmp/g.sock --all")
		if strings.Count(q, fmt.Sprintf("xen:%d ", d)) != 2 || strings.Count(q, " active ") != 2 {
			l.t.Errorf("%s, %s: query after insert, want both probes active:\n%s", name, env, q)
		}
		pid := work(l, name, 4)
		w, o, x := count(l, d, pid)
		if w != 4 || o != 4 {
			l.t.Errorf("%s, %s: %d writes to fd 4 and %d opens of /etc/gp-a by pid %d logged, want 4 and 4", name, env, w, o, pid)
		}
		q = l.run("gprobes query --socket /tmp/g.sock --all")
		l.run(fmt.Sprintf("gprobes remove --socket /tmp/g.sock --target xen:%d vmlinux", d))
		l.run(fmt.Sprintf("gprobes insert --socket /tmp/g.sock --target xen:%d %s /etc/gprobes/empty.dpdf", d, guestSyms))
		probed := lat(l, name)
		l.run(fmt.Sprintf("gprobes remove --socket /tmp/g.sock --target xen:%d vmlinux", d))
		if after := l.run("gprobes query --socket /tmp/g.sock --all"); strings.Contains(after, fmt.Sprintf("xen:%d ", d)) {
			l.t.Errorf("%s, %s: probes still listed after remove:\n%s", name, env, after)
		}
		l.run("kill $(pidof gprobes); " + xenlab.Gone("gprobes"))
		dlog := l.run("grep -v 'xen: walk' /tmp/daemon.log")
		stops := 0
		for _, m := range summaryRe.FindAllStringSubmatch(dlog, -1) {
			var n int
			fmt.Sscan(m[2], &n)
			stops += n
		}
		if stops < 8+200 || strings.Contains(dlog, "rror") || strings.Contains(dlog, "vm_event: close") {
			l.t.Errorf("%s, %s: %d stops reported by an event, want at least %d; daemon:\n%.3000s", name, env, stops, 8+200, dlog)
		}
		l.t.Logf("%s, %s: 4 writes to fd 4 and 4 opens of /etc/gp-a by pid %d logged (and %d other calls of it: its output, /dev/zero, /dev/null); query:\n%swrite(2) with a probe on ksys_write: %.0f µs", name, env, pid, x, q, probed)
		if out := l.domU(name, "gpwork counts 1 >/dev/null; echo OOPS=$(dmesg | grep -c -e Oops -e 'int3:' -e 'debug')"); !strings.Contains(out, "OOPS=0") {
			l.t.Errorf("%s after %s: %s", name, env, out)
		}
	}

	t.Run("plain", func(t *testing.T) {
		l := startLab(t, labSetup{opts: xenlab.Options{QEMU: q}, files: files,
			dump: dumpOf("/tmp/daemon.log") + "; cat /var/log/xen/xl-pvh0.log"})
		t.Logf("boot: %+v", l.vm.Timings())
		caps := l.run("xl info | grep -E '^(virt_caps|xen_caps)'")
		if !regexp.MustCompile(`virt_caps\s*:.*\bhvm\b.*\bhap\b`).MatchString(caps) {
			t.Fatalf("Xen offers no HVM with HAP under QEMU 10.0:\n%s", caps)
		}
		t.Logf("domu1 (PV): write(2) %.0f µs", lat(l, "domu1"))
		probe(l, "domu1", l.vm.DomID("domu1"), "")
		// a PVH domU powers off at once: its vCPU halted with interrupts
		// off in the early exception handler (its context: rip in
		// native_halt, called from early_fixup_exception; the fault at
		// copy_bootdata's first access to the direct map), and Xen's
		// hvm_hlt takes the last vCPU down as a power-off (reason 0),
		// silently in a release build
		l.run(`sed -i 's/^type .*/type    = "pvh"/' /etc/xen/domU.cfg.in`)
		// (until it is gone, or up against expectation)
		out := l.run("xlab-domu create pvh0 || true; " + labkit.Wait{What: "pvh0 to power off", Show: "xl list",
			Cond: "(grep -q 'has shut down' /var/log/xen/xl-pvh0.log && ! xl list pvh0 >/dev/null 2>&1) || grep -q 'XLAB READY' /var/log/xen/console/guest-pvh0.log"}.Cmd() +
			"; xl list; cat /var/log/xen/xl-pvh0.log; echo CONSOLE; cat /var/log/xen/console/guest-pvh0.log")
		if !strings.Contains(out, "has shut down, reason code 0 ") || regexp.MustCompile(`(?m)^pvh0 `).MatchString(out) || strings.Contains(out, "XLAB READY") {
			t.Errorf("a PVH domU on the plain hypervisor under QEMU 10.0 was to power off at once (has QEMU fixed its CR-read intercept? docs/xen.md):\n%s", out)
		}
		t.Logf("PVH domU on the plain hypervisor:\n%s", out)
	})

	t.Run("cr2sync", func(t *testing.T) {
		l := startLab(t, labSetup{opts: xenlab.Options{QEMU: q, CR2Sync: true, DomUs: -1}, files: files,
			dump: "grep -v 'xen: walk' /tmp/daemon.log | tail -c 3000; xl list; xl dmesg | tail -15; tail -30 /var/log/xen/console/guest-pvh1.log"})
		l.run(`sed -i 's/^type .*/type    = "pvh"/' /etc/xen/domU.cfg.in`)
		d, err := l.vm.CreateDomU("pvh1", 0)
		if err != nil {
			out, _, _ := l.vm.Run("xl list; xl dmesg | tail -20; cat /var/log/xen/xl-pvh1.log", time.Minute)
			t.Fatalf("PVH domU: %v\n%s", err, out)
		}
		t.Logf("pvh1 (domid %d): %s", d, l.run("xl list -l pvh1 | grep -m1 '\"type\"'"))
		// under QEMU 10.0's TCG a PVH boot has triple-faulted in the guest's
		// early code (before any probe; xl restarted it and the second boot
		// ran): counted here, and the docs say so
		if n := strings.TrimSpace(l.run("xl dmesg | grep -c 'Triple fault' || true")); n != "0" {
			t.Logf("pvh1's boot triple-faulted %s time(s) before it came up (xl restarted it; domid %d runs)", n, d)
		}
		t.Logf("pvh1: write(2) %.0f µs", lat(l, "pvh1"))
		probe(l, "pvh1", d, "GPROBES_XEN_ROUTE=debug")
		probe(l, "pvh1", d, "GPROBES_XEN_ROUTE=vmevent")

		// int3 bytes: not intercepted under QEMU 10.0 either; the guest's
		// own #BP handler takes the byte and the kernel oopses (last: pvh1
		// is dead after it)
		l.run(xenlab.DaemonUp("GPROBES_XEN_ROUTE=debug GPROBES_XEN_BREAKPOINTS=int3 ", "/tmp/g3.sock", "", "/tmp/daemon3.log") +
			fmt.Sprintf("; gprobes insert --socket /tmp/g3.sock --target xen:%d %s /etc/gprobes/fd4.dpdf", d, guestSyms))
		// the workload, in the background: the guest's kernel dies under
		// it, so it never ends; its domu-run is stopped once the oops is
		// there
		l.run(fmt.Sprintf("(domu-run -t 600 %d 'gpwork counts 1 /etc/gp-a' >/tmp/w.out 2>&1; echo rc=$? >>/tmp/w.out) &", d))
		// the oops, on the guest's console; the wait's failure goes into
		// the log the checks below read
		const log = "/var/log/xen/console/guest-pvh1.log"
		console := l.run(labkit.Wait{What: "the int3 oops on pvh1's console", Cond: "grep -q -e 'RIP: .*ksys_write' -e 'Kernel panic' " + log, Show: "tail -20 " + log}.Cmd() +
			"; grep -e 'int3: ' -e 'RIP: .*ksys_write' -e 'Kernel panic' " + log + "; xl list")
		out := l.run("kill $(pidof domu-run) 2>/dev/null; " + xenlab.Gone("domu-run") + "; cat /tmp/w.out")
		recs := l.run("gprobes log --socket /tmp/g3.sock --json | grep -c '\"location\":\"ksys_write\".*\"data\":\"0400000000000000\"' || true")
		query := l.run("gprobes query --socket /tmp/g3.sock --all; kill $(pidof gprobes); " + xenlab.Gone("gprobes"))
		t.Logf("int3 at ksys_write under QEMU 10.0: workload (stopped after the oops) %q; records %s; guest console:\n%s\nquery:\n%s", out, strings.TrimSpace(recs), console, query)
		if strings.TrimSpace(recs) != "0" || !strings.Contains(console, "int3: ") || !strings.Contains(console, "ksys_write+0x1/") {
			t.Errorf("int3 under QEMU 10.0: %s records, and no int3 oops in the guest (has TCG learnt the #BP intercept? docs/xen.md)", strings.TrimSpace(recs))
		}
		if !strings.Contains(query, " gone ") {
			t.Errorf("int3: the probe of the crashed domain is not gone:\n%s", query)
		}
	})
}
