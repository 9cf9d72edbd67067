package xen_test

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/lab/qemulab"
	"github.com/gprobes/gprobes/lab/xenlab"
)

// TestMain powers off the shared PV lab once every test has run.
func TestMain(m *testing.M) {
	code := m.Run()
	pv.kill()
	pv.cleanup()
	testkit.Cleanup()
	os.Exit(code)
}

// labSetup is what a Xen lab test puts in dom0 and how it boots.
type labSetup struct {
	opts    xenlab.Options    // Extra gets everything below added (startLab only)
	timeout time.Duration     // of the test after the boot (which Boot bounds); default 20 minutes
	bins    map[string]string // more static binaries, dom0 path -> package (/bin/gprobes is always there; startLab only)
	files   map[string]string // dom0 path -> contents
	dump    string            // a dom0 command whose output is logged when the test fails
}

// labEnv is a booted Xen lab for one test: a static gprobes at
// /bin/gprobes in dom0, the domU kernel's System.map and vmlinux (the
// QEMU lab's, which carries BTF) at /guest, the test's files. startLab
// boots one for the test alone, pvLab lends the shared PV lab. When the
// test fails, the dump command's output is logged, then the VM killed.
type labEnv struct {
	t   *testing.T
	vm  *xenlab.VM
	dir string // the test's temporary folder on the host
}

// dumpOf is the usual failure dump: the daemon logs named (without the
// page walks' trace), the domains, Xen's last lines, domu1's console.
func dumpOf(logs ...string) string {
	cmd := ""
	for _, l := range logs {
		cmd += "echo == " + l + "; grep -v 'xen: walk' " + l + " | tail -c 3000; "
	}
	// the probes' hits, twice 10 s apart: a slow test from a stuck one
	q := "timeout 30 gprobes query --socket /tmp/g.sock --all 2>&1 | head -12; "
	return cmd + "xl list; " + q + "sleep 10; " + q + "xl dmesg | tail -15; tail -30 /var/log/xen/console/guest-domu1.log"
}

// guestSyms is the --symbols of the domU kernel, as dom0 has them.
const guestSyms = "--symbols /guest/System.map --symbols /guest/vmlinux"

// goBins builds static binaries of gprobes' packages once per test
// binary (dom0 path -> host file).
var goBins struct {
	mu    sync.Mutex
	dir   string
	built map[string]string
}

func buildBin(pkg string) (string, error) {
	goBins.mu.Lock()
	defer goBins.mu.Unlock()
	if p, ok := goBins.built[pkg]; ok {
		return p, nil
	}
	if goBins.dir == "" {
		d, err := os.MkdirTemp("", "xentest-bins-")
		if err != nil {
			return "", err
		}
		goBins.dir, goBins.built = d, map[string]string{}
	}
	bin := filepath.Join(goBins.dir, strings.ReplaceAll(pkg, "/", "_"))
	build := exec.Command("go", "build", "-o", bin, "github.com/gprobes/gprobes/"+pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %v\n%s", pkg, err, out)
	}
	goBins.built[pkg] = bin
	return bin, nil
}

// startLab boots a Xen lab for this test alone (a set-up the PV lab does
// not have: another QEMU, another hypervisor). The shared PV lab is
// powered off first: one TCG lab at a time.
func startLab(t *testing.T, s labSetup) *labEnv {
	t.Helper()
	xenlab.Require(t)
	if pv.running() {
		t.Logf("the shared PV lab is powered off: this test boots its own (one lab at a time)")
		pv.kill()
	}
	l := &labEnv{t: t, dir: t.TempDir()}
	art, err := qemulab.Artifacts()
	if err != nil {
		t.Fatal(err)
	}
	extra := map[string]string{
		"/guest/vmlinux":    filepath.Join(art, "vmlinux"),
		"/guest/System.map": filepath.Join(art, "System.map"),
	}
	bins := map[string]string{"/bin/gprobes": "cmd/gprobes"}
	for dst, pkg := range s.bins {
		bins[dst] = pkg
	}
	for dst, pkg := range bins {
		bin, err := buildBin(pkg)
		if err != nil {
			t.Fatal(err)
		}
		extra[dst] = bin
	}
	for dst, src := range s.files {
		p := filepath.Join(l.dir, "files", dst)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		extra[dst] = p
	}
	opts := s.opts
	for dst, src := range opts.Extra {
		extra[dst] = src
	}
	opts.Extra = extra
	if s.timeout == 0 {
		s.timeout = 20 * time.Minute
	}
	// the VM dies when the test has run s.timeout past its boot: a test
	// that hangs ends (the boot's own steps are bounded by Boot)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l.vm, err = xenlab.Boot(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("booted: %+v", l.vm.Timings())
	timer := time.AfterFunc(s.timeout, func() { t.Errorf("the test ran %v past the boot: the VM is killed", s.timeout); cancel() })
	t.Cleanup(func() { timer.Stop() })
	t.Cleanup(l.vm.Kill)
	if s.dump != "" {
		t.Cleanup(func() { // before Kill: cleanups run last first
			if t.Failed() {
				out, _, _ := l.vm.Run(s.dump, 3*time.Minute)
				t.Logf("dom0, after the failure:\n%s", out)
			}
		})
	}
	return l
}

// The shared PV lab: one boot of Xen (the lab's hypervisor, the system's
// QEMU), dom0 and domu1 (PV, 1 vCPU, 128 MiB), lent to every test whose
// set-up it fits, one after the other. Booted by the first test that asks
// for it, powered off in TestMain, or before a test that boots a lab of
// its own, or when a test fails (reboot on doubt: the next test gets a
// fresh boot, so one failure does not cascade). dom0 holds everything
// those tests need that is not a small text file: gprobes, xenrecord,
// the domU kernel's vmlinux and System.map, gdb, rmd160.ko and a copy of
// it with another build ID. A test's own files are written into dom0
// when it starts.
//
// The lab as booted is its state (labState): the domains and their
// domids, none paused or crashed; no gprobes, gdbsx, gdb, xen-access or
// domu-run in dom0; no gprobes journal of a live domain (no probe left
// in); the domU config template as built; domu1 runs a probed workload
// (gpwork's calls: ksys_write, openat, getppid; a leftover probe would
// pause it), its kernel log has no oops, its modules are those it booted
// with. A test leaves the lab so: what it created (a domU, a module, a
// daemon) it takes away. After each test that passed, the state is
// compared with the boot's; a difference fails that test (it left
// something behind) and powers the lab off. Before each test, the state
// is compared again; a difference (or a QEMU gone) powers it off and the
// test boots a fresh one. Then dom0's scratch is wiped (/tmp but the
// toolstack's logs, /etc/gprobes, gprobes' state and journals): each
// test starts with the files and logs of no other.
type sharedLab struct {
	mu     sync.Mutex
	vm     *xenlab.VM
	cancel context.CancelFunc
	dir    string   // the boot's files on the host
	by     string   // the test that booted it
	users  []string // the tests that ran on it since, in order
	base   string   // its state after the boot
}

var pv sharedLab

func (s *sharedLab) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vm != nil
}

// kill powers the lab off (SIGKILL to QEMU); the next pvLab boots again.
func (s *sharedLab) kill() {
	s.mu.Lock()
	vm, cancel := s.vm, s.cancel
	s.vm, s.cancel, s.users, s.base, s.by = nil, nil, nil, "", ""
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if vm != nil {
		vm.Kill()
	}
}

func (s *sharedLab) cleanup() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dir != "" {
		os.RemoveAll(s.dir)
		s.dir = ""
	}
	goBins.mu.Lock()
	defer goBins.mu.Unlock()
	if goBins.dir != "" {
		os.RemoveAll(goBins.dir)
		goBins.dir, goBins.built = "", nil
	}
}

// extra is what the PV lab's dom0 gets at boot.
func (s *sharedLab) extra() (map[string]string, error) {
	if s.dir == "" {
		d, err := os.MkdirTemp("", "xentest-pvlab-")
		if err != nil {
			return nil, err
		}
		s.dir = d
	}
	art, err := qemulab.Artifacts() // the domU kernel's vmlinux (BTF) and System.map
	if err != nil {
		return nil, err
	}
	xart, err := xenlab.Artifacts()
	if err != nil {
		return nil, err
	}
	script := filepath.Join(s.dir, "xlab-shared")
	if err := os.WriteFile(script, []byte(labScript), 0o755); err != nil {
		return nil, err
	}
	extra := map[string]string{
		"/guest/vmlinux":    filepath.Join(art, "vmlinux"),
		"/guest/System.map": filepath.Join(art, "System.map"),
		"/bin/xlab-shared":  script,
	}
	for dst, pkg := range map[string]string{"/bin/gprobes": "cmd/gprobes", "/bin/xenrecord": "lab/xenlab/xenrecord"} {
		bin, err := buildBin(pkg)
		if err != nil {
			return nil, err
		}
		extra[dst] = bin
	}
	// gdb in dom0 (TestXenGuestExits): the lab's gdb-minimal and its
	// libraries, when the build made them (the test says when not)
	gdbDir := filepath.Join(xart, "gdb")
	if _, err := os.Stat(filepath.Join(gdbDir, "gdb")); err == nil {
		extra["/opt/gdb/gdb"] = filepath.Join(gdbDir, "gdb")
		libs, _ := os.ReadDir(filepath.Join(gdbDir, "lib"))
		for _, lib := range libs {
			extra["/opt/gdb/lib/"+lib.Name()] = filepath.Join(gdbDir, "lib", lib.Name())
		}
		wrapper := filepath.Join(s.dir, "gdb.sh")
		if err := os.WriteFile(wrapper, []byte("#!/bin/sh\nLD_LIBRARY_PATH=/opt/gdb/lib exec /opt/gdb/gdb \"$@\"\n"), 0o755); err != nil {
			return nil, err
		}
		extra["/bin/gdb"] = wrapper
	}
	// rmd160.ko and a copy with another build ID (TestXenKernelModule,
	// which says when the build has none)
	if kos, _ := filepath.Glob(filepath.Join(xart, "..", "kernel", "*", "domU-modules", "kernel", "crypto", "rmd160.ko")); len(kos) == 1 {
		other, _, _, err := qemulab.OtherBuild(kos[0])
		if err != nil {
			return nil, err
		}
		p := filepath.Join(s.dir, "rmd160-other.ko")
		if err := os.WriteFile(p, other, 0o644); err != nil {
			return nil, err
		}
		extra["/guest/rmd160.ko"] = kos[0]
		extra["/guest/rmd160-other.ko"] = p
	}
	return extra, nil
}

// labScript is /bin/xlab-shared in the PV lab's dom0 (the host types
// only its short command lines: a long line is garbled more often in
// Xen's serial ring).
//
//	xlab-shared state NAME:DOMID...  the lab's state (sharedLab), a fact a line:
//	                                 dom0's, then each running domU's
//	xlab-shared scratch              wipe a test's files and logs, gprobes'
//	                                 state and journals (not the toolstack's logs)
const labScript = `#!/bin/sh
set -u
case $1 in
state)
	shift
	xl list | awk 'NR > 1 { s = $5; gsub(/[-rb]/, "", s); print "domain " $1 " id " $2 " flags [" s "]" }'
	for p in gprobes gdbsx gdb xen-access domu-run; do
		pidof $p >/dev/null && echo "running: $p $(pidof $p)"
	done
	for j in /run/gprobes/xen/dom*.json; do
		[ -e "$j" ] || continue
		id=${j##*/dom}
		id=${id%.json}
		xl list "$id" >/dev/null 2>&1 && echo "journal of live domain $id: $j"
	done
	echo "domU template md5 $(md5sum </etc/xen/domU.cfg.in)"
	# in each domU that runs: a probed workload (a probe left in would
	# pause it: gpwork calls ksys_write, openat, getppid), the kernel
	# log's oopses, the modules
	for d in "$@"; do
		name=${d%%:*} id=${d#*:}
		xl list "$id" 2>/dev/null | awk 'NR == 2 { print $5 }' | grep -q '^[-rb]*$' || continue
		domu-run -t 180 "$id" 'gpwork counts 1 >/dev/null && echo "gpwork: ran"; echo "kernel log: $(dmesg | grep -c -e Oops -e int3: -e BUG -e "general protection") oopses"; echo "modules: $(cut -d" " -f1 /proc/modules | sort | tr "\n" " ")"' 2>&1 |
			sed "s/^/$name: /"
	done
	;;
scratch)
	rm -rf /etc/gprobes /var/lib/gprobes /run/gprobes
	for f in /tmp/*; do # (not /tmp/.xlab.out: the output of this command)
		[ -e "$f" ] || continue
		case ${f#/tmp/} in
		xl-create-*|create-*|xen-init-dom0.log) ;;
		*) rm -rf "$f" ;;
		esac
	done
	;;
*)
	echo "usage: xlab-shared state NAME:DOMID... | scratch" >&2
	exit 2
	;;
esac
`

// labState is the lab's state (see sharedLab), as lines.
func labState(vm *xenlab.VM) (string, error) {
	if vm.Exited() {
		return "", fmt.Errorf("QEMU has exited (%v)", vm.ExitErr())
	}
	cmd := "xlab-shared state"
	for _, d := range vm.DomUs() {
		cmd += fmt.Sprintf(" %s:%d", d, vm.DomID(d))
	}
	out, rc, err := vm.Run(cmd, 5*time.Minute)
	if err != nil || rc != 0 {
		return out, fmt.Errorf("dom0: %s: rc %d %v", cmd, rc, err)
	}
	return out, nil
}

// stateDiff lists the lines of got not in want and of want not in got.
func stateDiff(want, got string) string {
	w, g := map[string]bool{}, map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(want), "\n") {
		w[l] = true
	}
	for _, l := range strings.Split(strings.TrimSpace(got), "\n") {
		g[l] = true
	}
	var d []string
	for l := range w {
		if !g[l] {
			d = append(d, "  booted: "+l)
		}
	}
	for l := range g {
		if !w[l] {
			d = append(d, "  now:    "+l)
		}
	}
	sort.Strings(d)
	return strings.Join(d, "\n")
}

// acquire returns the running PV lab when its state is the boot's, or
// boots a fresh one.
func (s *sharedLab) acquire(t *testing.T) *xenlab.VM {
	t.Helper()
	s.mu.Lock()
	vm, by, users, base := s.vm, s.by, append([]string(nil), s.users...), s.base
	s.mu.Unlock()
	if vm != nil {
		t0 := time.Now()
		st, err := labState(vm)
		if err == nil && st == base {
			t.Logf("the shared PV lab, booted by %s and used since by %s: as booted (checked in %v)", by, strings.Join(users, ", "), time.Since(t0).Round(time.Millisecond))
			s.mu.Lock()
			s.users = append(s.users, t.Name())
			s.mu.Unlock()
			return vm
		}
		t.Logf("the shared PV lab, last used by %s, is not as booted (%v): powered off, this test boots a fresh one\n%s", users[len(users)-1], err, stateDiff(base, st))
		s.kill()
	}
	extra, err := s.extra()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	vm, err = xenlab.Boot(ctx, xenlab.Options{DomUs: 1, Extra: extra})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Logf("booted the shared PV lab: %+v", vm.Timings())
	st, err := labState(vm)
	if err != nil {
		cancel()
		vm.Kill()
		t.Fatalf("the shared PV lab's state after the boot: %v\n%s", err, st)
	}
	t.Logf("its state:\n%s", st)
	s.mu.Lock()
	s.vm, s.cancel, s.by, s.users, s.base = vm, cancel, t.Name(), []string{t.Name()}, st
	s.mu.Unlock()
	return vm
}

// release ends a test's use of the PV lab: after a failure, the dump, and
// the lab powered off; else the state checked, and a difference fails the
// test and powers the lab off.
func (s *sharedLab) release(t *testing.T, vm *xenlab.VM, dump string) {
	s.mu.Lock()
	ours, base := s.vm == vm, s.base
	s.mu.Unlock()
	if !ours { // killed meanwhile (the test's timeout)
		return
	}
	if !t.Failed() {
		st, err := labState(vm)
		if err == nil && st == base {
			return
		}
		t.Errorf("the test left the shared PV lab not as it found it (%v):\n%s", err, stateDiff(base, st))
	}
	if dump != "" {
		out, _, _ := vm.Run(dump, 3*time.Minute)
		t.Logf("dom0, after the failure:\n%s", out)
	}
	t.Logf("the shared PV lab is powered off after this failure: the next test boots a fresh one")
	s.kill()
}

// pvLab lends the shared PV lab (sharedLab) to the test: dom0 and domu1,
// s.files written into dom0 (s.opts and s.bins must be empty: the PV
// lab's set-up is fixed). The lab is the test's until it ends; it must
// leave it as it found it.
func pvLab(t *testing.T, s labSetup) *labEnv {
	t.Helper()
	xenlab.Require(t)
	if s.bins != nil || s.opts.Extra != nil || s.opts.DomUs != 0 || s.opts.DomUVCPUs != 0 || s.opts.QEMU != nil || s.opts.CR2Sync || s.opts.StockXen {
		t.Fatal("pvLab: the shared PV lab's set-up is fixed (sharedLab); boot your own with startLab")
	}
	l := &labEnv{t: t, dir: t.TempDir()}
	l.vm = pv.acquire(t)
	vm := l.vm
	if s.timeout == 0 {
		s.timeout = 20 * time.Minute
	}
	// the lab is powered off when the test has run s.timeout: a test
	// that hangs ends
	timer := time.AfterFunc(s.timeout, func() {
		t.Errorf("the test ran %v on the shared PV lab: the VM is killed", s.timeout)
		pv.kill()
	})
	t.Cleanup(func() {
		timer.Stop()
		pv.release(t, vm, s.dump)
	})
	l.runFor("xlab-shared scratch", time.Minute)
	paths := make([]string, 0, len(s.files))
	for p := range s.files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		l.put(p, []byte(s.files[p]))
	}
	return l
}

// put writes a file into dom0 through the serial line: base64 in short
// lines (a long one is garbled more often in Xen's serial ring), checked
// with md5sum.
func (l *labEnv) put(path string, data []byte) {
	l.t.Helper()
	if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, "'\" $`\\") {
		l.t.Fatalf("put: bad path %q", path)
	}
	b64 := base64.StdEncoding.EncodeToString(data)
	l.runFor(fmt.Sprintf("mkdir -p $(dirname %s) && : >%s.b64", path, path), time.Minute)
	for len(b64) > 0 {
		n := min(len(b64), 200)
		l.runFor(fmt.Sprintf("echo %s >>%s.b64", b64[:n], path), time.Minute)
		b64 = b64[n:]
	}
	out := l.runFor(fmt.Sprintf("base64 -d %s.b64 >%s && rm %s.b64 && md5sum <%s", path, path, path, path), time.Minute)
	if want := fmt.Sprintf("%x", md5sum(data)); !strings.HasPrefix(strings.TrimSpace(out), want) {
		l.t.Fatalf("put %s: md5 in dom0 %q, want %s", path, out, want)
	}
}

// createDomU creates one more domU on the lab, from the lab's domU config
// template changed for it alone by the sed expressions seds (the template
// is put back at once), and waits for its command loop. The domU is
// destroyed when the test ends, if still there (after a failure the lab
// is powered off anyway).
func (l *labEnv) createDomU(name string, seds ...string) int {
	l.t.Helper()
	cmd := "cp /etc/xen/domU.cfg.in /etc/xen/domU.cfg.keep"
	if len(seds) > 0 {
		cmd += " && sed -i"
		for _, e := range seds {
			cmd += " -e " + xenlab.ShellQuote(e)
		}
		cmd += " /etc/xen/domU.cfg.in"
	}
	l.runFor(cmd+" && grep -E '^(type|vcpus) ' /etc/xen/domU.cfg.in", time.Minute)
	d, err := l.vm.CreateDomU(name, 0)
	l.runFor("mv /etc/xen/domU.cfg.keep /etc/xen/domU.cfg.in", time.Minute)
	l.t.Cleanup(func() {
		if !l.t.Failed() && l.vm.DomID(name) >= 0 {
			if err := l.vm.DestroyDomU(name); err != nil {
				l.t.Errorf("destroy %s at the end: %v", name, err)
			}
		}
	})
	if err != nil {
		out, _, _ := l.vm.Run(fmt.Sprintf("xl list; xl dmesg | tail -30; cat /tmp/xl-create-%s.log /var/log/xen/xl-%s.log", name, name), time.Minute)
		l.t.Fatalf("domU %s: %v\n%s", name, err, out)
	}
	return d
}

// run runs a command in dom0 and fails the test unless it exits 0 within
// xenlab.RunBound (a wait of xlab-gp in it gives up before and says what
// it saw; gprobes' commands with the guest's vmlinux have taken over 3
// minutes in dom0 under TCG on a loaded host).
func (l *labEnv) run(cmd string) string {
	l.t.Helper()
	return l.runFor(cmd, xenlab.RunBound)
}

func (l *labEnv) runFor(cmd string, d time.Duration) string {
	l.t.Helper()
	out, rc, err := l.vm.Run(cmd, d)
	if err != nil || rc != 0 {
		l.t.Fatalf("dom0: %s: rc %d %v\n%s", cmd, rc, err, out)
	}
	return out
}

// domU runs a command in a domU and fails the test unless it exits 0
// within 10 minutes.
func (l *labEnv) domU(name, cmd string) string {
	l.t.Helper()
	out, rc, err := l.vm.RunDomU(name, cmd, 10*time.Minute)
	if err != nil || rc != 0 {
		l.t.Fatalf("%s: %s: rc %d %v\n%s", name, cmd, rc, err, out)
	}
	return out
}

func md5sum(b []byte) [16]byte { return md5.Sum(b) }
