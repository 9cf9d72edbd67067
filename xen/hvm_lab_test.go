package xen_test

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/lab/labkit"
	"github.com/gprobes/gprobes/lab/xenlab"
)

// TestXenPVH boots the Xen lab (QEMU TCG, -cpu qemu64,+npt: AMD SVM with
// nested paging) and finds out what reaches dom0 from a PVH domU, an HVM
// container (docs/xen.md, "HVM and PVH domains"):
//
//   - Xen sees SVM and HAP (xl info's virt_caps) and boots a PVH domU;
//   - xenrecord reads vCPU 0's context and walks its page tables to
//     linux_banner (kept for TestHVMRecorded; GPROBES_XEN_RECORD_OUT names a
//     folder of the host to keep the recordings in, xen/testdata);
//   - a single-step (the trap flag) comes back as a #DB by both routes,
//     debugging mode and the vm_event monitor ring, whose request is kept
//     for TestVMEventRecorded;
//   - gprobes refuses the domain when no route is named;
//   - debug-register probes by either route go in and out, but no hit
//     comes back: QEMU 7.2 loads the guest's %dr7 at VMRUN without arming
//     its breakpoints;
//   - int3 bytes, the native backend's and gdbsx's: the #BP intercept
//     never comes (QEMU executes int3 as a software interrupt), the
//     guest's own #BP handler takes the byte and the guest kernel oopses.
//
// The findings about TCG are asserted: a QEMU that delivers these events
// fails the test, and the docs are to be updated then.
func TestXenPVH(t *testing.T) {
	l := pvLab(t, labSetup{timeout: 30 * time.Minute,
		files: map[string]string{
			"/etc/gprobes/writes.dpdf": "name = vmlinux\nmodtype = kernel\nvars = 2\n" +
				"offset = ksys_write\nminor = 1\ninc lv,0\npush pid\npush r,rdi\nlog 2\nexit 1\n" +
				"offset = do_sys_openat2\nminor = 2\ninc lv,1\npush pid\nlog 1\npush d,255\npush r,rsi\nlog str\nexit 1\n",
			"/etc/gprobes/fd4.dpdf": "name = vmlinux\nmodtype = kernel\noffset = ksys_write\npush r,rdi\nlog 1\nexit 1\n"},
		dump: "grep -v 'xen: walk' /tmp/daemon.log | head -c 3000; xl list; xl dmesg | tail -15; tail -30 /var/log/xen/console/guest-pvh1.log"})
	vm, run := l.vm, l.run

	// what the hypervisor offers under TCG
	caps := run("xl info | grep -E '^(virt_caps|xen_caps)'; xl dmesg | grep -iE 'svm|hap|asid|hvm' | head -20")
	t.Logf("Xen under TCG (-cpu qemu64,+npt):\n%s", caps)
	if !regexp.MustCompile(`virt_caps\s*:.*\bhvm\b.*\bhap\b`).MatchString(caps) {
		t.Fatalf("Xen offers no HVM with HAP under this QEMU CPU:\n%s", caps)
	}

	// PVH domUs: the lab's domU config with type pvh (destroyed at the
	// end: the shared PV lab's domu1 runs beside them, untouched)
	const pvh = `s/^type .*/type    = "pvh"/`
	d := l.createDomU("pvh1", pvh)
	t.Logf("pvh1 (domid %d): %s", d, run("xl list -l pvh1 | grep -m1 '\"type\"'; xl list"))

	// what the hypervisor answers, for the replay test
	banner := strings.Fields(run("grep -w linux_banner /guest/System.map"))[0]
	rec := run("xenrecord " + fmt.Sprint(d) + " 0x" + banner)
	var r struct {
		Flags   uint32
		Context string
		Bytes   string
	}
	if err := json.Unmarshal([]byte(rec), &r); err != nil {
		t.Fatalf("xenrecord: %v\n%.500s", err, rec)
	}
	if b, _ := hex.DecodeString(r.Bytes); !strings.HasPrefix(string(b), "Linux version") || r.Flags&2 == 0 {
		t.Errorf("xenrecord: flags %#x, at linux_banner %q", r.Flags, b)
	}
	keep := func(name, data string) {
		if out := os.Getenv("GPROBES_XEN_RECORD_OUT"); out != "" {
			if err := os.WriteFile(filepath.Join(out, name), []byte(data), 0o644); err != nil {
				t.Error(err)
			}
		}
	}
	keep("pvh-record.json", rec)

	pidRe := regexp.MustCompile(`GPWORK pid (\d+)`)
	work := func(name string, n int) int {
		t.Helper()
		out, rc, err := vm.RunDomU(name, fmt.Sprintf("gpwork counts %d /etc/gp-a", n), 10*time.Minute)
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
	count := func(pid int) (writes, opens int) {
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
			if json.Unmarshal([]byte(l), &rec) != nil || rec.Target != fmt.Sprintf("xen:%d", d) || rec.Pid != pid {
				continue
			}
			if rec.Minor == 1 && rec.Data == pidHex+"0400000000000000" {
				writes++
			}
			if rec.Minor == 2 && rec.Data == pidHex+hex.EncodeToString([]byte("/etc/gp-a")) {
				opens++
			}
		}
		return writes, opens
	}
	syms := guestSyms

	// the single-step's #DB comes back by both routes (xen.StepEvent)
	step := func(route string) string {
		t.Helper()
		out, rc, err := vm.Run(fmt.Sprintf("xenrecord step %d %s", d, route), xenlab.RunBound)
		var res struct {
			RIPBefore, RIPAfter, DR6 uint64
			Request                  string
			After                    time.Duration
		}
		json.Unmarshal([]byte(out), &res)
		t.Logf("single-step of pvh1's vCPU 0, route %s: rc %d %v: rip %#x -> %#x, dr6 %#x, after %v", route, rc, err, res.RIPBefore, res.RIPAfter, res.DR6, res.After)
		// the vCPU moved on by one instruction (or into an interrupt's
		// handler). %dr6 in the context does not show BS: Xen copies it
		// from the VMCB only while the guest's %dr7 enables a register
		if err != nil || rc != 0 || res.RIPAfter == 0 || res.RIPAfter == res.RIPBefore || route == "vmevent" && res.Request == "" {
			t.Errorf("single-step by route %s:\n%s", route, out)
		}
		return res.Request
	}
	step("debug")
	req := step("vmevent")
	if b, _ := hex.DecodeString(req); len(b) != 400 {
		t.Errorf("vm_event route: request %q", req)
	} else {
		keep("vmevent-requests.txt", req+"\n")
	}

	// without a route named, refused
	if out, rc, _ := vm.Run(fmt.Sprintf("gprobes run --target xen:%d %s /etc/gprobes/fd4.dpdf", d, syms), xenlab.RunBound); rc == 0 || !strings.Contains(out, "GPROBES_XEN_ROUTE") {
		t.Errorf("gprobes on a PVH domain with no route: rc %d\n%s", rc, out)
	}

	// debug-register probes: under QEMU 7.2 no hit comes back by either
	// route (VMRUN loads the guest's %dr7 without arming TCG's
	// breakpoints); the probes go in and out, the guest runs on
	for _, route := range []string{"debug", "vmevent"} {
		run(xenlab.DaemonUp("GPROBES_XEN_ROUTE="+route+" ", "/tmp/g.sock", "", "/tmp/daemon.log"))
		run(fmt.Sprintf("gprobes insert --socket /tmp/g.sock --target xen:%d %s /etc/gprobes/writes.dpdf", d, syms))
		p := work("pvh1", 4)
		w, o := count(p)
		t.Logf("route %s, debug registers on ksys_write and do_sys_openat2: %d writes and %d opens of 4 logged; query:\n%s", route, w, o, run("gprobes query --socket /tmp/g.sock --all"))
		if w != 0 || o != 0 {
			t.Errorf("route %s: %d writes and %d opens logged: has TCG learnt to arm an HVM guest's debug registers? (docs/xen.md)", route, w, o)
		}
		run(fmt.Sprintf("gprobes remove --socket /tmp/g.sock --target xen:%d vmlinux", d))
		run("kill $(pidof gprobes); " + xenlab.Gone("gprobes"))
		dlog := run("cat /tmp/daemon.log")
		t.Logf("daemon, route %s:\n%.1500s", route, dlog)
		if strings.Contains(dlog, "vm_event: close") || strings.Contains(dlog, "rror") {
			t.Errorf("route %s: daemon:\n%s", route, dlog)
		}
		if out, rc, err := vm.RunDomU("pvh1", "gpwork counts 1 >/dev/null; echo OOPS=$(dmesg | grep -c -e Oops -e 'int3:' -e 'debug')", 5*time.Minute); err != nil || rc != 0 || !strings.Contains(out, "OOPS=0") {
			t.Errorf("pvh1 after route %s: rc %d %v\n%s", route, rc, err, out)
		}
	}
	// the vm_event route gave the ring back at detach: it can be taken again
	step("vmevent")

	// int3 bytes: the native backend's, then gdbsx's (a second PVH domU)
	int3 := func(name, target, setup string) {
		t.Helper()
		run(setup)
		run(fmt.Sprintf("gprobes insert --socket /tmp/g3.sock --target %s %s /etc/gprobes/fd4.dpdf", target, syms))
		// the workload, in the background: the guest's kernel dies under
		// it, so it never ends; its domu-run is stopped once the oops is
		// there
		run(fmt.Sprintf("(domu-run -t 600 %d 'gpwork counts 1 /etc/gp-a' >/tmp/w.out 2>&1; echo rc=$? >>/tmp/w.out) &", vm.DomID(name)))
		// the oops, on the guest's console (its RIP line is the last the
		// checks below need); the wait's failure goes into the log
		console := "/var/log/xen/console/guest-" + name + ".log"
		log := run(labkit.Wait{What: "the int3 oops on " + name + "'s console", Cond: "grep -q -e 'RIP: .*ksys_write' -e 'Kernel panic' " + console, Show: "tail -20 " + console}.Cmd() +
			"; grep -e 'int3: ' -e 'RIP: .*ksys_write' -e 'Kernel panic' " + console + "; xl list")
		out := run("kill $(pidof domu-run) 2>/dev/null; " + xenlab.Gone("domu-run") + "; cat /tmp/w.out")
		recs := run("gprobes log --socket /tmp/g3.sock --json | grep -c '\"Minor\"' || true")
		t.Logf("%s, int3 at ksys_write under TCG: workload (stopped after the oops) %q; records %s; guest console:\n%s", target, out, recs, log)
		// the oops: "int3: 0000 [#1]", the kernel stopped one byte into
		// ksys_write, past the int3
		if strings.TrimSpace(recs) != "0" || !strings.Contains(log, "int3: ") || !strings.Contains(log, "ksys_write+0x1/") {
			t.Errorf("%s: int3 under TCG: %s records, and no int3 oops in the guest (has TCG learnt the #BP intercept?)", target, strings.TrimSpace(recs))
		}
		// gdbsx first: a daemon's removal through it would wait for a stop
		// of the oopsed guest
		vm.Run("kill $(pidof gdbsx) 2>/dev/null; kill $(pidof gprobes); "+xenlab.Gone("gprobes gdbsx"), xenlab.RunBound)
	}
	int3("pvh1", fmt.Sprintf("xen:%d", d), xenlab.DaemonUp("GPROBES_XEN_ROUTE=debug GPROBES_XEN_BREAKPOINTS=int3 ", "/tmp/g3.sock", "", "/tmp/daemon3.log"))
	d2 := l.createDomU("pvh2", pvh)
	// vm_event's monitor ring on a PVH domain under TCG: xen-access sets
	// it up and asks for software breakpoints (the same #BP intercept)
	if out, _, err := vm.Run(fmt.Sprintf("timeout 5 xen-access %d breakpoint 2>&1 | head -20", d2), time.Minute); err == nil {
		t.Logf("xen-access %d breakpoint:\n%s", d2, out)
	}
	int3("pvh2", "gdb:127.0.0.1:9999", xenlab.GdbsxUp(d2)+"; "+xenlab.DaemonUp("", "/tmp/g3.sock", "", "/tmp/daemon3.log"))
}
