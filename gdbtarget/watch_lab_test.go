package gdbtarget_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/gdbtarget"
	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/lab/qemulab"
)

// Watch probes on a guest kernel through QEMU's stub (Z2/Z4): a kernel
// variable that a workload writes and reads an exact number of times,
// lease_break_time behind /proc/sys/fs/lease-break-time (nothing else in
// the lab's guest touches it: leases are never broken there), written by
// testdata/watch/sysctlwork.c with one pwrite and read with one pread each.

const sysctlWatch = `name = vmlinux
modtype = kernel
vars = 4
watch = lease_break_time,4,w
minor = 1
inc lv,0
push r,rip
push pid
log 2
exit 1
watch = lease_break_time,4,rw
minor = 2
inc lv,1
exit 0
`

// bootWatch boots the lab with the sysctl workload in it, KASLR on (the
// watched address moves with the slide).
func bootWatch(t *testing.T) *guest {
	t.Helper()
	qemulab.Require(t)
	art, err := qemulab.Artifacts()
	if err != nil {
		t.Fatal(err)
	}
	work := testkit.CC(t, "sysctlwork", "-static", "-O2", "../testdata/watch/sysctlwork.c")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	vm, err := qemulab.Boot(ctx, qemulab.Options{KASLR: true, Files: []qemulab.File{{Guest: "/bin/sysctlwork", Host: work}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vm.Kill)
	return &guest{t: t, vm: vm, art: art}
}

// sysctl runs the workload and returns its pid.
func (g *guest) sysctl(w, r int) int {
	g.t.Helper()
	out, rc, err := g.vm.Run(fmt.Sprintf("sysctlwork /proc/sys/fs/lease-break-time %d %d 45", w, r), 5*time.Minute)
	if err != nil || rc != 0 {
		g.t.Fatalf("sysctlwork: rc %d, %v\n%s", rc, err, out)
	}
	var pid, gw, gr int
	if _, err := fmt.Sscanf(strings.TrimSpace(out), "SYSCTLWORK pid %d writes %d reads %d", &pid, &gw, &gr); err != nil || gw != w || gr != r {
		g.t.Fatalf("sysctlwork printed %q (%v)", out, err)
	}
	return pid
}

// Exact counts: w the writes, rw the writes and reads; each record is the
// workload's (push pid: the task's) and its rip is past the store, in the
// kernel's text; the fifth watch of a target is refused; removal takes the
// stub's watchpoints out and the guest runs on.
func TestGuestWatch(t *testing.T) {
	g := bootWatch(t)
	g.attach(gdbtarget.Options{})
	infos := g.insert(compile(t, sysctlWatch))
	for _, p := range infos {
		t.Logf("minor %d %s at %#x: %s", p.Minor, p.Location, p.Address, p.How)
	}
	const W, R = 150, 100
	pid := g.sysctl(W, R)
	lv, _, err := g.eng.Vars("vmlinux", false)
	if err != nil {
		t.Fatal(err)
	}
	if lv[0] != W || lv[1] != W+R {
		t.Errorf("hits: w %d (want %d), rw %d (want %d)", lv[0], W, lv[1], W+R)
	}
	g.mu.Lock()
	var mine, others int
	rips := map[uint64]int{}
	for _, r := range g.recs {
		if r.Minor != 1 {
			continue
		}
		if int(binary.LittleEndian.Uint64(r.Data[8:])) == pid {
			mine++
		} else {
			others++
		}
		rips[binary.LittleEndian.Uint64(r.Data)]++
	}
	g.mu.Unlock()
	if mine != W || others != 0 {
		t.Errorf("records: %d by the workload (pid %d), %d by others; want %d and 0", mine, pid, others, W)
	}
	// one store in the kernel writes it: every record has the same rip,
	// the instruction after that store, never the watched address
	if len(rips) != 1 {
		t.Errorf("rips %v: want one", rips)
	}
	for rip := range rips {
		t.Logf("rip after the store: %#x", rip)
		if rip < 0xffffffff80000000 || rip == infos[0].Address {
			t.Errorf("rip %#x", rip)
		}
	}

	// the shell's way, which the Xen lab's domUs (no sysctlwork there)
	// use: busybox's echo writes "45\n" with one write(2), and its read
	// builtin reads byte by byte, the second read at offset 1 being the
	// end of the file without a look at the variable
	const loop = 40
	if out, rc, err := g.vm.Run(shellSysctl(loop), 5*time.Minute); err != nil || rc != 0 || !strings.Contains(out, "x=4") {
		t.Fatalf("the shell loop: rc %d %v\n%s", rc, err, out)
	}
	lv, _, _ = g.eng.Vars("vmlinux", false)
	if lv[0] != W+loop || lv[1] != W+R+2*loop {
		t.Errorf("the shell loop: w %d (want %d), rw %d (want %d)", lv[0], W+loop, lv[1], W+R+2*loop)
	}

	// two more watches fill the four registers; the fifth is refused
	more := `name = vmlinux
modtype = kernel
watch = leases_enable,4,w
minor = 3
exit 0
watch = dir_notify_enable,4,w
minor = 4
exit 0
watch = sysctl_mount_max,4,w
minor = 5
exit 0
`
	got, err := g.eng.Insert(compile(t, more), engine.InsertMerge)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].State != engine.StateActive || got[1].State != engine.StateActive || got[2].State != engine.StateRefused ||
		!strings.Contains(got[2].Reason, "no debug register left") || !strings.Contains(got[2].Reason, "DR3 watch = dir_notify_enable") {
		t.Errorf("three more watches: %+v", got)
	}

	// removed: no more hits, and the guest runs the workload on
	if _, err := g.eng.Remove("vmlinux", []uint16{1, 2}); err != nil {
		t.Fatal(err)
	}
	g.sysctl(20, 20)
	lv, _, _ = g.eng.Vars("vmlinux", false)
	if lv[0] != W+loop || lv[1] != W+R+2*loop {
		t.Errorf("after removal: w %d, rw %d", lv[0], lv[1])
	}
	for _, p := range g.eng.Query() {
		t.Logf("query: minor %d %s %s hits %d %s", p.Minor, p.State, p.How, p.Hits, p.Reason)
	}
}

// shellSysctl is a busybox shell loop writing lease_break_time n times
// (echo) and reading it n times (read): the workload of the Xen lab's
// watch test.
func shellSysctl(n int) string {
	return fmt.Sprintf("i=0; while [ $i -lt %d ]; do echo 45 >/proc/sys/fs/lease-break-time; read x </proc/sys/fs/lease-break-time; i=$((i+1)); done; echo x=$x", n)
}
