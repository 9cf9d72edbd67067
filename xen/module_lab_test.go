package xen_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/daemon"
	"github.com/gprobes/gprobes/lab/qemulab"
	"github.com/gprobes/gprobes/lab/xenlab"
)

// rmd160Module is a probe in Debian's rmd160.ko (the domUs have it with
// af_alg and algif_hash: lab/xenlab/build.sh DOMU_MODULES): `gpwork hash
// rmd160 N` calls rmd160_final exactly N times. lv 1 and 2 are a layout
// of the module's own struct rmd160_ctx, from the .ko's split BTF.
const rmd160Module = `name = rmd160
modtype = kernel
vars = 3
offset = rmd160_final
minor = 1
inc lv,0
push d,sizeof(struct rmd160_ctx)
pop lv,1
push d,offsetof(struct rmd160_ctx, buffer)
pop lv,2
exit 0
`

// Deferred module probes on a PV domU through the native backend and a
// daemon in dom0: inserted before rmd160 is loaded, the probe is pending;
// modprobe in the domU puts it in (at do_init_module, before the module's
// init runs) and it counts exactly; rmmod makes it pending again (its
// debug register cleared at free_module, before the module's memory is
// freed), other modules come and go, the domU has no oops; loaded again,
// it counts exactly again. All of it twice: on the debug registers, and
// on int3 bytes in the module's text (GPROBES_XEN_BREAKPOINTS=int3, what a
// fifth address takes), where the processes the domU starts after rmmod
// (grep, modprobe) must run normally: a writable mapping of the freed
// text kept in dom0 made their page-table pins fail. Last, a probe bound
// to another build of rmd160 is refused naming both build IDs.
func TestXenKernelModule(t *testing.T) {
	xart, err := xenlab.Artifacts()
	if err != nil {
		t.Fatal(err)
	}
	kos, _ := filepath.Glob(filepath.Join(xart, "..", "kernel", "*", "domU-modules", "kernel", "crypto", "rmd160.ko"))
	if len(kos) != 1 {
		t.Fatalf("the Xen lab's rmd160.ko: %v", kos)
	}
	// the PV lab has it at /guest/rmd160.ko, and this copy at
	// /guest/rmd160-other.ko
	_, id, other, err := qemulab.OtherBuild(kos[0])
	if err != nil {
		t.Fatal(err)
	}
	l := pvLab(t, labSetup{files: map[string]string{"/etc/gprobes/rmd160.dpdf": rmd160Module},
		dump: dumpOf("/tmp/daemon-debug.log", "/tmp/daemon-int3.log", "/tmp/daemon-build.log")})
	vm, run := l.vm, l.run
	d := vm.DomID("domu1")
	// the lab as found: the modules this test loads unloaded (rmd160,
	// algif_hash and af_alg, which modprobe algif_hash brought in)
	t.Cleanup(func() {
		if !t.Failed() {
			l.domU("domu1", "for m in rmd160 algif_hash af_alg; do ! grep -q \"^$m \" /proc/modules || rmmod $m || exit; done")
		}
	})
	domU := func(cmd string) string {
		t.Helper()
		out := l.domU("domu1", cmd)
		if strings.Contains(out, "Segmentation fault") {
			t.Fatalf("domu1: %s:\n%s", cmd, out)
		}
		return out
	}
	hash := func(n int) {
		t.Helper()
		out := domU(fmt.Sprintf("gpwork hash rmd160 %d", n))
		if !strings.Contains(out, fmt.Sprintf("GPWORK hash rmd160 %d 8eb208f7e05d987a9b044a8e98c6b087f15a0bfc", n)) {
			t.Errorf("gpwork hash:\n%s", out)
		}
	}
	const size, bufOff = 96, 28 // struct rmd160_ctx of Debian 6.1 (cmd/gprobes rmd160Layout reads them with cilium/ebpf)
	query := func(step string) daemon.TargetProbe {
		t.Helper()
		var q struct {
			Probes []daemon.TargetProbe `json:"probes"`
		}
		out := run("gprobes query --socket /tmp/g.sock --all --json")
		if err := json.Unmarshal([]byte(out), &q); err != nil {
			t.Fatalf("query: %v\n%s", err, out)
		}
		if len(q.Probes) != 1 {
			t.Fatalf("%s: query %s", step, out)
		}
		return q.Probes[0]
	}
	check := func(step, state string, hits uint64, reason string) {
		t.Helper()
		p := query(step)
		if string(p.State) != state || p.Hits != hits || p.Faults != 0 || !strings.Contains(p.Reason, reason) {
			t.Errorf("%s: %s, %d hits (%d faults), reason %q, how %q; want %s, %d hits, reason %q", step, p.State, p.Hits, p.Faults, p.Reason, p.How, state, hits, reason)
		}
		want := fmt.Sprintf("rmd160: lv 0=%d 1=%d 2=%d", hits, size, bufOff)
		if hits == 0 {
			want = "rmd160: lv 0=0 1=0 2=0"
		}
		if out := run("gprobes getvars --socket /tmp/g.sock rmd160"); !strings.Contains(out, want) {
			t.Errorf("%s: getvars, want %q:\n%s", step, want, out)
		}
	}
	syms := guestSyms + " --symbols /guest/rmd160.ko"
	domU("modprobe algif_hash && ! grep -q rmd160 /proc/modules")
	// The same story on both breakpoint routes: the debug registers (the
	// default for up to four addresses) and int3 bytes in the module's
	// text and at do_init_module/free_module (addresses 5+ take them).
	selfTests := uint64(0)
	for _, route := range []string{"debug", "int3"} {
		env := ""
		if route == "int3" {
			env = "GPROBES_XEN_BREAKPOINTS=int3 "
		}
		run(xenlab.DaemonUp(env, "/tmp/g.sock", "--state /tmp/state-"+route, "/tmp/daemon-"+route+".log"))
		run(fmt.Sprintf("gprobes insert --socket /tmp/g.sock --target xen:%d %s /etc/gprobes/rmd160.dpdf", d, syms))
		check(route+": inserted, rmd160 not loaded", "pending", 0, "kernel module rmd160 is not loaded")

		// in before the module's init runs: the crypto self-tests its init
		// starts call rmd160_final, the same number of times at every load
		domU("modprobe rmd160")
		n := query(route + ": loaded").Hits
		t.Logf("%s: rmd160_final hits during modprobe (the self-tests of its init): %d", route, n)
		if n == 0 {
			t.Errorf("%s: no hit while rmd160's init ran: the probe went in after init", route)
		}
		if selfTests != 0 && n != selfTests {
			t.Errorf("%s: %d hits during modprobe, %d on the debug-register route", route, n, selfTests)
		}
		selfTests = n
		check(route+": loaded", "active", selfTests, "")
		hash(20)
		check(route+": 20 hashes", "active", selfTests+20, "")

		domU("rmmod rmd160 && ! grep -q rmd160 /proc/modules")
		check(route+": unloaded", "pending", selfTests+20, "kernel module rmd160 was unloaded; its probes go in again when it is loaded")
		domU("modprobe rmd160")
		check(route+": loaded again", "active", 2*selfTests+20, "")
		hash(7)
		check(route+": loaded again, 7 hashes", "active", 2*selfTests+27, "")
		domU("rmmod rmd160")
		run(fmt.Sprintf("gprobes remove --socket /tmp/g.sock --target xen:%d rmd160; kill $(pidof gprobes); %s", d, xenlab.Gone("gprobes")))
		if st := strings.TrimSpace(run("xl list domu1 | awk 'NR==2{print $5}'")); strings.Contains(st, "p") {
			t.Errorf("%s: domu1 left paused (%s)", route, st)
		}
	}
	// bound to another build of rmd160 (the module's build ID is read
	// from its notes in the domU's memory): refused, naming both
	domU("modprobe rmd160")
	run(xenlab.DaemonUp("", "/tmp/g.sock", "--state /tmp/state-build", "/tmp/daemon-build.log"))
	out, _, _ := vm.Run(fmt.Sprintf("gprobes insert --socket /tmp/g.sock --target xen:%d %s /etc/gprobes/rmd160.dpdf 2>&1", d, strings.Replace(syms, "rmd160.ko", "rmd160-other.ko", 1)), xenlab.RunBound)
	if p := query("another build"); p.State != "refused" || !strings.Contains(p.Reason, fmt.Sprintf("%x", id)) || !strings.Contains(p.Reason, fmt.Sprintf("%x", other)) {
		t.Errorf("a probe built for another build of rmd160: %s (%s), want refused naming %x and %x\n%s", p.State, p.Reason, id, other, out)
	}
	run(fmt.Sprintf("gprobes remove --socket /tmp/g.sock --target xen:%d rmd160; kill $(pidof gprobes); %s", d, xenlab.Gone("gprobes")))
	hash(2)
	if w := domU("rmmod rmd160; modprobe rmd160; gpwork hash rmd160 1 >/dev/null; echo OOPS=$(dmesg | grep -c -e Oops -e 'int3:' -e 'BUG' -e 'general protection' -e 'multicall(s) failed')"); !strings.Contains(w, "OOPS=0") {
		t.Errorf("domu1's kernel log after the module probes:\n%s\n%s", w, domU("dmesg | tail -40"))
	}
}
