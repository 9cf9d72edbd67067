package gdbtarget_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/gdbtarget"
	"github.com/gprobes/gprobes/lab/qemulab"
)

// smp is getppid and openat on every vCPU: the caller, push procid (the
// vCPU, as gdbtarget numbers the stub's threads), and the CPU the guest's
// kernel says the task runs on (task_struct.thread_info.cpu, read from
// memory at the hit); openat's path from the caller's user memory.
const smp = `name = vmlinux
modtype = kernel
major = 5
vars = 2
offset = __x64_sys_getppid
minor = 1
inc lv,0
push pid
push procid
push task
push d,offsetof(struct task_struct, thread_info.cpu)
add
push mrf,4
log 3
exit 1
offset = do_sys_openat2
minor = 2
inc lv,1
push pid
push procid
log 2
push d,255
push r,rsi
log str
exit 1
`

// TestGuestSMP (docs/guest.md, "SMP guests"): a guest with two vCPUs, two
// workloads pinned one to each (taskset) making their calls at the same
// time. Every hit is counted exactly, per process and so per vCPU; each
// record's procid is the vCPU the guest's kernel says the task was on,
// and is its workload's CPU; each openat record holds its own process's
// path, read from user memory through the page tables of the vCPU that
// hit; the temporary logs of hits on the two vCPUs do not mix.
func TestGuestSMP(t *testing.T) {
	qemulab.Require(t)
	art, err := qemulab.Artifacts()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	vm, err := qemulab.Boot(ctx, qemulab.Options{CPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vm.Kill)
	g := &guest{t: t, vm: vm, art: art}
	g.attach(gdbtarget.Options{})
	g.insert(compile(t, smp, filepath.Join(art, "System.map"), filepath.Join(art, "vmlinux")))
	const n = 200
	out, rc, err := vm.Run(fmt.Sprintf("nproc; taskset 1 gpwork counts %d /etc/gp-a & taskset 2 gpwork counts %d /etc/gp-b & wait", n, n), 5*time.Minute)
	if err != nil || rc != 0 {
		t.Fatalf("rc %d %v\n%s", rc, err, out)
	}
	if !strings.HasPrefix(out, "2\n") {
		t.Fatalf("the guest has not 2 CPUs:\n%s", out)
	}
	// which pid ran where: its path says
	pids := map[int]string{}
	for _, m := range pidLine.FindAllStringSubmatch(out, -1) {
		var pid int
		fmt.Sscan(m[1], &pid)
		pids[pid] = ""
	}
	if len(pids) != 2 || strings.Count(out, fmt.Sprintf("GPWORK done getppid %d", n)) != 2 {
		t.Fatalf("not two workloads done:\n%s", out)
	}
	perCPU := map[uint64]int{}
	for pid := range pids {
		opens := g.of(pid, 2)
		var path string
		cpu := uint64(99)
		for _, r := range opens {
			p := string(r.Data[16:])
			if p != "/etc/gp-a" && p != "/etc/gp-b" {
				continue
			}
			if path == "" {
				path, cpu = p, map[string]uint64{"/etc/gp-a": 0, "/etc/gp-b": 1}[p]
			}
			if p != path || word(r, 1) != cpu {
				t.Fatalf("pid %d: openat of %q on vCPU %d, after %q on vCPU %d", pid, p, word(r, 1), path, cpu)
			}
		}
		if path == "" {
			t.Fatalf("pid %d opened neither path", pid)
		}
		pids[pid] = path
		calls := g.of(pid, 1)
		got := 0
		for _, r := range calls {
			if len(r.Data) != 24 {
				t.Fatalf("pid %d: getppid record %x", pid, r.Data)
			}
			if kcpu := binary.LittleEndian.Uint32(r.Data[16:]); word(r, 1) != uint64(kcpu) {
				t.Errorf("pid %d: procid %d, the kernel says CPU %d", pid, word(r, 1), kcpu)
			}
			if word(r, 1) == cpu {
				got++
			}
			perCPU[word(r, 1)]++
		}
		// the shell's own getppid before it execs gpwork may run anywhere
		if got != n || len(calls) > n+1 {
			t.Errorf("pid %d (%s, vCPU %d): %d getppid records on its vCPU, %d in all; want %d", pid, path, cpu, got, len(calls), n)
		}
	}
	if perCPU[0] < n || perCPU[1] < n {
		t.Errorf("getppid records per vCPU %v, want at least %d on each", perCPU, n)
	}
	for _, p := range g.eng.Query() {
		if p.State != engine.StateActive || p.Hits < 2*n {
			t.Errorf("query: %+v", p)
		}
	}
	g.mu.Lock()
	if len(g.warn) > 0 {
		t.Errorf("the engine warned: %q", g.warn)
	}
	g.mu.Unlock()
	t.Logf("per vCPU %v, paths %v", perCPU, pids)
}
