package gdbtarget_test

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/gdbtarget"
	"github.com/gprobes/gprobes/lab/qemulab"
	"github.com/gprobes/gprobes/linuxkernel"
	"github.com/gprobes/gprobes/symbols"
)

// A probe in a kernel module of the guest (Dynamic Probes' deferred
// module probes): rmd160_final of Debian's rmd160.ko, which `gpwork hash
// rmd160 N` reaches exactly N times through an AF_ALG socket. Its
// location is resolved from the module's kallsyms in guest memory; lv 1
// and 2 are a layout of the module's own struct, from the .ko's split BTF
// given with the symbols.
const rmd160Probe = `name = rmd160
modtype = kernel
vars = 3
offset = rmd160_final
minor = 1
inc lv,0
push d,sizeof(struct rmd160_ctx)
pop lv,1
push d,offsetof(struct rmd160_ctx, buffer)
pop lv,2
push pid
log 1
exit 1
`

// The sizes the host reads from the lab's rmd160.ko with cilium/ebpf's
// BTF (cmd/gprobes rmd160Layout): Debian 6.1's struct rmd160_ctx.
const rmd160CtxSize, rmd160BufferOff = 96, 28

// labModule is a .ko of the lab's kernel on the host.
func labModule(t *testing.T, path string) string {
	t.Helper()
	dir, err := qemulab.Artifacts()
	if err != nil {
		t.Fatal(err)
	}
	kos, _ := filepath.Glob(filepath.Join(dir, "..", "kernel", "*", "modules", "kernel", path))
	if len(kos) != 1 {
		t.Fatalf("the lab's %s: %v", path, kos)
	}
	return kos[0]
}

// The module's probe inserted before it loads is pending; modprobe puts
// it in before the module's init runs (do_init_module: the init's
// self-tests hit it), with exact counts;
// rmmod makes it pending again, its breakpoint dropped before the module's
// memory is freed (free_module), and the guest runs on without an oops;
// loaded again, the probe goes in again and counts exactly; removed, it
// counts nothing while the module stays loaded. KASLR on: the image's
// rendezvous functions move with the slide, the module's symbols are where
// its kallsyms says.
func TestGuestKernelModule(t *testing.T) {
	g := boot(t, true)
	ko := labModule(t, "crypto/rmd160.ko")
	g.attach(gdbtarget.Options{Options: linuxkernelOptions(g, ko)})
	if err := g.eng.Release(); err != nil { // the guest runs while nothing is probed yet
		t.Fatal(err)
	}
	guestRun := func(cmd string) string {
		t.Helper()
		out, rc, err := g.vm.Run(cmd, 5*time.Minute)
		if err != nil || rc != 0 {
			t.Fatalf("%s: rc %d, %v\n%s", cmd, rc, err, out)
		}
		return out
	}
	guestRun("modprobe algif_hash && ! grep -q rmd160 /proc/modules")

	infos, err := g.eng.Insert(compile(t, rmd160Probe), engine.InsertNew)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].State != engine.StatePending || !strings.Contains(infos[0].Reason, "kernel module rmd160 is not loaded") {
		t.Fatalf("inserted before the module loads: %+v", infos)
	}
	check := func(step string, state engine.ProbeState, hits uint64, reason string) {
		t.Helper()
		q := g.eng.Query()
		if len(q) != 1 || q[0].State != state || q[0].Hits != hits || q[0].Faults != 0 || !strings.Contains(q[0].Reason, reason) {
			t.Errorf("%s: query %+v; want %s, %d hits, reason %q", step, q, state, hits, reason)
		}
		lv, _, err := g.eng.Vars("rmd160", false)
		want := []uint64{hits, rmd160CtxSize, rmd160BufferOff}
		if err != nil || len(lv) != 3 || lv[0] != want[0] || lv[1] != want[1] || lv[2] != want[2] {
			t.Errorf("%s: lv %v %v, want %v", step, lv, err, want)
		}
	}
	hash := func(n int) int {
		t.Helper()
		pid, out := g.run(fmt.Sprintf("gpwork hash rmd160 %d", n))
		if !strings.Contains(out, fmt.Sprintf("GPWORK hash rmd160 %d 8eb208f7e05d987a9b044a8e98c6b087f15a0bfc\n", n)) {
			t.Errorf("gpwork hash:\n%s", out)
		}
		return pid
	}
	records := func(pid int) int { return len(g.of(pid, 1)) }

	// The probe goes in before the module's init runs: the crypto API's
	// self-tests of the algorithm, run when rmd160's init registers it,
	// call rmd160_final (the kernel target, placing after the load, sees
	// none of them). Their number is the same at every load.
	guestRun("modprobe rmd160")
	selfTests := g.eng.Query()[0].Hits
	t.Logf("rmd160_final hits during modprobe (the self-tests of its init): %d", selfTests)
	if selfTests == 0 {
		t.Errorf("no hit while rmd160's init ran: the probe went in after init")
	}
	check("loaded", engine.StateActive, selfTests, "")
	if pid := hash(20); records(pid) != 20 {
		t.Errorf("20 hashes: %d records of pid %d", records(pid), pid)
	}
	check("20 hashes", engine.StateActive, selfTests+20, "")

	guestRun("rmmod rmd160 && ! grep -q rmd160 /proc/modules")
	check("unloaded", engine.StatePending, selfTests+20, "kernel module rmd160 was unloaded; its probes go in again when it is loaded")
	// the guest goes on: other modules load and unload under the hidden
	// breakpoints
	guestRun("modprobe dummy && rmmod dummy && modprobe loop && rmmod loop")
	check("other modules", engine.StatePending, selfTests+20, "was unloaded")

	guestRun("modprobe rmd160")
	check("loaded again", engine.StateActive, 2*selfTests+20, "")
	if pid := hash(7); records(pid) != 7 {
		t.Errorf("7 hashes after the reload: %d records of pid %d", records(pid), pid)
	}
	check("loaded again, 7 hashes", engine.StateActive, 2*selfTests+27, "")

	if n, err := g.eng.Remove("rmd160", nil); err != nil || n != 1 {
		t.Fatalf("remove: %d %v", n, err)
	}
	if pid := hash(3); records(pid) != 0 {
		t.Errorf("after remove: %d records", records(pid))
	}
	guestRun("rmmod rmd160 && modprobe rmd160 && rmmod rmd160")
	if errs := g.vm.KernelErrors(); len(errs) > 0 {
		t.Errorf("the guest kernel's log:\n%s", strings.Join(errs, "\n"))
	}
	g.mu.Lock()
	warns := g.warn
	g.mu.Unlock()
	if len(warns) > 0 {
		t.Errorf("engine warnings: %q", warns)
	}
}

// A module's probe inserted while the module is loaded goes in at once;
// bound to a build, it goes in only for the build the guest loaded (read
// from the module's notes in guest memory); a probe in its init text
// (freed after init) is refused, the others work.
func TestGuestKernelModuleLoaded(t *testing.T) {
	g := boot(t, false)
	ko := labModule(t, "crypto/rmd160.ko")
	g.attach(gdbtarget.Options{Options: linuxkernelOptions(g, ko)})
	if err := g.eng.Release(); err != nil {
		t.Fatal(err)
	}
	if out, rc, err := g.vm.Run("modprobe algif_hash && modprobe rmd160", time.Minute); err != nil || rc != 0 {
		t.Fatalf("modprobe: %d %v\n%s", rc, err, out)
	}
	// bound to a build (a pack's): the module's build ID is read from its
	// notes in guest memory; the .ko's own ID goes in, another is refused
	// naming both
	tab, err := symbols.Open(ko)
	if err != nil || len(tab.BuildID()) == 0 {
		t.Fatalf("%s's build ID: %v", ko, err)
	}
	id := tab.BuildID()
	other := bytes.Clone(id)
	other[0] ^= 0xff
	for _, c := range []struct {
		id    []byte
		state engine.ProbeState
	}{{other, engine.StateRefused}, {id, engine.StateActive}} {
		m := compile(t, rmd160Probe)
		m.BuildID = c.id
		infos, err := g.eng.Insert(m, engine.InsertNew)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("bound to %x: %s %s", c.id, infos[0].State, infos[0].Reason)
		if len(infos) != 1 || infos[0].State != c.state {
			t.Errorf("bound to build %x: %+v, want %s", c.id, infos, c.state)
		}
		if c.state == engine.StateRefused && (!strings.Contains(infos[0].Reason, fmt.Sprintf("%x", id)) || !strings.Contains(infos[0].Reason, fmt.Sprintf("%x", other))) {
			t.Errorf("refused, but the reason does not name the loaded build %x and the module's %x: %s", id, other, infos[0].Reason)
		}
		if n, err := g.eng.Remove("rmd160", nil); err != nil || n != 1 {
			t.Fatalf("remove: %d %v", n, err)
		}
	}

	src := rmd160Probe + "offset = rmd160_mod_init\nminor = 2\nexit 0\n"
	infos, err := g.eng.Insert(compile(t, src), engine.InsertNew)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || infos[0].State != engine.StateActive || infos[1].State != engine.StateRefused {
		t.Fatalf("inserted while loaded: %+v", infos)
	}
	t.Logf("init probe: %s", infos[1].Reason)
	pid, _ := g.run("gpwork hash rmd160 5")
	if n := len(g.of(pid, 1)); n != 5 {
		t.Errorf("5 hashes: %d records", n)
	}
}

// linuxkernelOptions are the lab's symbols and more files.
func linuxkernelOptions(g *guest, more ...string) linuxkernel.Options {
	return linuxkernel.Options{Symbols: append([]string{filepath.Join(g.art, "System.map"), filepath.Join(g.art, "vmlinux")}, more...)}
}
