package xen_test

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/lab/xenlab"
)

// smpProbes: getppid and openat on every vCPU of the domU. getppid logs
// the caller, push procid (the vCPU) and its kernel stack pointer;
// openat the caller, the vCPU, the path's user address and the path,
// read from the caller's user memory.
const smpProbes = `name = vmlinux
modtype = kernel
vars = 2
offset = __x64_sys_getppid
minor = 1
inc lv,0
push pid
push procid
push r,rsp
log 3
exit 1
offset = do_sys_openat2
minor = 2
inc lv,1
push pid
push procid
push r,rsi
log 3
push d,255
push r,rsi
log str
exit 1
`

// TestXenSMP (SMP guests; docs/xen.md counts the hypercalls of a
// hit): a PV domU with two
// vCPUs, probed from dom0 by the native backend (debug registers, VIRQ_
// DEBUGGER) while two gpwork processes, pinned one to each vCPU
// (taskset), make their calls at the same time. Every hit is counted
// exactly per process and so per vCPU, and each record's procid is the
// vCPU its process is pinned to. The two processes run with the guest's
// address-space randomization off, so each holds its path (/etc/gp-a,
// /etc/gp-b) at the same user virtual address: each openat record reads
// its own process's path through the page tables of the vCPU that hit
// (vCPU 0's would give one of them the other's path, or nothing). The
// temporary logs of hits on the two vCPUs do not mix: each getppid
// record's kernel stack pointer is in its own task's stack. The daemon's
// summary gives the hypercalls a stop costs: at most 3 (debug-register
// route: one multicall reads the domain's state and the vCPUs' contexts,
// one writes the context and unpauses).
func TestXenSMP(t *testing.T) {
	l := pvLab(t, labSetup{files: map[string]string{"/etc/gprobes/smp.dpdf": smpProbes},
		dump: dumpOf("/tmp/daemon.log") + "; tail -30 /var/log/xen/console/guest-smp1.log", timeout: 40 * time.Minute})
	vm, run := l.vm, l.run
	// a domU of its own beside the lab's domu1: two vCPUs
	dom := l.createDomU("smp1", `s/^vcpus .*/vcpus   = 2/`)
	if out := run(fmt.Sprintf("xl vcpu-list %d", dom)); strings.Count(out, "smp1") != 2 {
		t.Fatalf("smp1 has not 2 vCPUs:\n%s", out)
	}
	run(xenlab.DaemonUp("", "/tmp/g.sock", "", "/tmp/daemon.log"))
	run(fmt.Sprintf("gprobes insert --socket /tmp/g.sock --target xen:%d --symbols /guest/System.map --symbols /guest/vmlinux /etc/gprobes/smp.dpdf", dom))
	const n = 200
	out, rc, err := vm.RunDomU("smp1", fmt.Sprintf("nproc; echo 0 >/proc/sys/kernel/randomize_va_space; "+
		"taskset 1 gpwork counts %d /etc/gp-a & taskset 2 gpwork counts %d /etc/gp-b & wait", n, n), 20*time.Minute) // 1200 probed calls: minutes on a loaded host
	if err != nil || rc != 0 {
		t.Fatalf("smp1: rc %d %v\n%s", rc, err, out)
	}
	if !strings.HasPrefix(out, "2\n") || strings.Count(out, fmt.Sprintf("GPWORK done getppid %d ", n)) != 2 {
		t.Fatalf("smp1: not two vCPUs, or a gpwork failed:\n%s", out)
	}
	// which pid opened which path: gpwork's own lines say
	paths := map[int]string{}
	for _, m := range regexp.MustCompile(`GPWORK pid (\d+)`).FindAllStringSubmatch(out, -1) {
		var pid int
		fmt.Sscan(m[1], &pid)
		paths[pid] = ""
	}
	// gpwork's output of the two processes interleaves: which path a pid
	// opened is told by its records below, its CPU by the path's taskset
	if len(paths) != 2 {
		t.Fatalf("want two gpwork pids:\n%s", out)
	}
	logOut := run("gprobes log --socket /tmp/g.sock --json")
	run(fmt.Sprintf("gprobes remove --socket /tmp/g.sock --target xen:%d vmlinux", dom))
	type perPid struct {
		getppid, own, devs int
		unmapped           int // opens whose path was not in the page tables
		cpus               map[int]int
		stacks             map[uint64]bool
		addr               map[uint64]bool // user addresses of its own path
		other              []string        // anything else it opened
	}
	by := map[int]*perPid{}
	for pid := range paths {
		by[pid] = &perPid{cpus: map[int]int{}, stacks: map[uint64]bool{}, addr: map[uint64]bool{}}
	}
	for _, l := range strings.Split(strings.TrimSpace(logOut), "\n") {
		var rec struct {
			Target    string
			Kind      string
			Exception string
			Pid       int
			CPU       int
			Minor     int
			Data      string
		}
		if json.Unmarshal([]byte(l), &rec) != nil || rec.Target != fmt.Sprintf("xen:%d", dom) {
			continue
		}
		p := by[rec.Pid]
		if p == nil {
			continue
		}
		if rec.Kind == "exception" && rec.Minor == 2 && rec.Exception == "invalid-address" {
			// the shell's child, before it runs taskset, opens /dev/null
			// as a background job's stdin: a string in busybox's text,
			// whose page a forked child's page tables do not hold until
			// it touches it (Linux copies no file-backed page-table
			// entries at fork), so its read fails, as it must
			p.unmapped++
			continue
		}
		data, err := hex.DecodeString(rec.Data)
		if err != nil || len(data) < 24 {
			t.Errorf("record %s: short data", l)
			continue
		}
		pid, cpu, w := int(binary.LittleEndian.Uint64(data)), int(binary.LittleEndian.Uint64(data[8:])), binary.LittleEndian.Uint64(data[16:])
		if pid != rec.Pid || cpu != rec.CPU {
			t.Errorf("record %s: logged pid %d and procid %d, the record's pid %d and cpu %d", l, pid, cpu, rec.Pid, rec.CPU)
		}
		p.cpus[cpu]++
		switch rec.Minor {
		case 1:
			p.getppid++
			p.stacks[w&^0x3fff] = true // THREAD_SIZE 16 KiB, aligned
		case 2:
			s := string(data[24:])
			switch {
			case s == "/etc/gp-a" || s == "/etc/gp-b":
				if paths[rec.Pid] == "" {
					paths[rec.Pid] = s
				}
				if s != paths[rec.Pid] {
					p.other = append(p.other, s)
				} else {
					p.own++
					p.addr[w] = true
				}
			case s == "/dev/zero" || s == "/dev/null":
				p.devs++
			default:
				p.other = append(p.other, fmt.Sprintf("%q at %#x", s, w))
			}
		}
	}
	var addrs []uint64
	stacks := map[uint64]int{}
	for pid, p := range by {
		// taskset 1: CPU 0 and /etc/gp-a; taskset 2: CPU 1 and /etc/gp-b
		want := map[string]int{"/etc/gp-a": 0, "/etc/gp-b": 1}[paths[pid]]
		t.Logf("pid %d (%s): getppid %d, opens of its path %d (at %s), of /dev/zero and /dev/null %d, unreadable %d, by vCPU %v, kernel stacks %s, other opens %q",
			pid, paths[pid], p.getppid, p.own, hexKeys(p.addr), p.devs, p.unmapped, p.cpus, hexKeys(p.stacks), p.other)
		if paths[pid] == "" || p.getppid != n || p.own != n || p.devs != 2 || len(p.other) != 0 {
			t.Errorf("pid %d: getppid %d, opens of %q %d, device opens %d, other opens %q; want %d, %d, 2 and none", pid, p.getppid, paths[pid], p.own, p.devs, p.other, n, n)
		}
		if p.unmapped > 1 {
			t.Errorf("pid %d: %d opens of a path not in its page tables, want at most the shell's one", pid, p.unmapped)
		}
		if len(p.cpus) != 1 || p.cpus[want] != 2*n+2 {
			t.Errorf("pid %d (%s, pinned to CPU %d): records by vCPU %v, want all %d on vCPU %d", pid, paths[pid], want, p.cpus, 2*n+2, want)
		}
		if len(p.stacks) != 1 {
			t.Errorf("pid %d: getppid's rsp in %d kernel stacks %s, want its own one", pid, len(p.stacks), hexKeys(p.stacks))
		}
		for s := range p.stacks {
			stacks[s]++
		}
		if len(p.addr) != 1 {
			t.Errorf("pid %d: its path at %d user addresses, want one", pid, len(p.addr))
		}
		for a := range p.addr {
			addrs = append(addrs, a)
		}
	}
	if len(stacks) != 2 {
		t.Errorf("the two tasks' getppid records share a kernel stack: %d stacks", len(stacks))
	}
	if len(addrs) != 2 || addrs[0] != addrs[1] {
		t.Errorf("the paths' user addresses %#x: want the same address in both processes (randomization off)", addrs)
	}
	dlog := run("cat /tmp/daemon.log")
	m := regexp.MustCompile(`gprobes: xen:\d+: (\d+) stops in [0-9.]+ s: (\d+) reported by VIRQ_DEBUGGER or xenstore, (\d+) found by a timed state check.*?(?:; (\d+) times two vCPUs or more stopped at once)?; (\d+) hypercalls \((\d+) domctls, (\d+) multicalls`).FindStringSubmatch(dlog)
	if m == nil {
		t.Fatalf("no summary in the daemon's log:\n%.3000s", dlog)
	}
	t.Logf("daemon: %s", m[0])
	var stops, byEvent, together, hcalls int
	fmt.Sscan(m[1], &stops)
	fmt.Sscan(m[2], &byEvent)
	together, _ = strconv.Atoi(m[4])
	fmt.Sscan(m[5], &hcalls)
	if stops < 4*n+4 || byEvent < stops*49/50 {
		t.Errorf("%d stops, %d by VIRQ_DEBUGGER: want at least %d, nearly all by the event", stops, byEvent, 4*n+4)
	}
	// the whole life of the target: insertion, the stops, the 50 ms
	// state checks, the removal
	if per := float64(hcalls) / float64(stops); per > 3 {
		t.Errorf("%.2f hypercalls a stop (%d for %d stops), want at most 3", per, hcalls, stops)
	} else {
		t.Logf("%.2f hypercalls a stop; two vCPUs stopped at once %d times", per, together)
	}
	// the guest runs on, unprobed, without an oops
	if w, rc, err := vm.RunDomU("smp1", "gpwork counts 5 /etc/gp-a; echo OOPS=$(dmesg | grep -c -e Oops -e 'int3:')", 5*time.Minute); err != nil || rc != 0 || !strings.Contains(w, "OOPS=0") {
		t.Errorf("smp1 after the probes: rc %d %v\n%s", rc, err, w)
	}
	// the lab as found: no daemon (smp1 is destroyed at the end)
	run("kill $(pidof gprobes); " + xenlab.Gone("gprobes"))
}

func hexKeys(m map[uint64]bool) string {
	var s []string
	for k := range m {
		s = append(s, fmt.Sprintf("%#x", k))
	}
	return strings.Join(s, " ")
}
