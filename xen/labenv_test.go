package xen_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	qemulab "github.com/gprobes/gprobes/lab/qemu"
	xenlab "github.com/gprobes/gprobes/lab/xen"
)

// labSetup is what a Xen lab test puts in dom0 and how it boots.
type labSetup struct {
	opts    xenlab.Options    // Extra gets everything below added
	timeout time.Duration     // of the test after the boot (which Boot bounds); default 20 minutes
	bins    map[string]string // more static binaries, dom0 path -> package (/bin/gprobes is always there)
	files   map[string]string // dom0 path -> contents, written to the test's folder on the host
	dump    string            // a dom0 command whose output is logged when the test fails
}

// labEnv is a booted Xen lab for one test: a static gprobes at
// /bin/gprobes in dom0, the domU kernel's System.map and vmlinux (the
// QEMU lab's, which carries BTF) at /guest, the test's files; the VM is
// killed when the test ends, and the dump command's output logged first if
// it failed.
type labEnv struct {
	t   *testing.T
	vm  *xenlab.VM
	dir string // the test's temporary folder on the host
	art string // the QEMU lab's artifacts: the domU kernel
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

func startLab(t *testing.T, s labSetup) *labEnv {
	t.Helper()
	xenlab.Require(t)
	l := &labEnv{t: t, dir: t.TempDir()}
	art, err := qemulab.Artifacts()
	if err != nil {
		t.Fatal(err)
	}
	l.art = art
	extra := map[string]string{
		"/guest/vmlinux":    filepath.Join(art, "vmlinux"),
		"/guest/System.map": filepath.Join(art, "System.map"),
	}
	bins := map[string]string{"/bin/gprobes": "cmd/gprobes"}
	for dst, pkg := range s.bins {
		bins[dst] = pkg
	}
	for dst, pkg := range bins {
		bin := filepath.Join(l.dir, filepath.Base(dst))
		build := exec.Command("go", "build", "-o", bin, "github.com/gprobes/gprobes/"+pkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
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
// within 3 minutes.
func (l *labEnv) domU(name, cmd string) string {
	l.t.Helper()
	out, rc, err := l.vm.RunDomU(name, cmd, 10*time.Minute)
	if err != nil || rc != 0 {
		l.t.Fatalf("%s: %s: rc %d %v\n%s", name, cmd, rc, err, out)
	}
	return out
}
