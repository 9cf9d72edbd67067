package gdbtarget_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/gdbremote"
	"github.com/gprobes/gprobes/gdbtarget"
	"github.com/gprobes/gprobes/lab/qemulab"
	"github.com/gprobes/gprobes/linuxkernel"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/symbols"
)

// These tests probe a real Debian 6.1 kernel booted in QEMU (the lab of
// lab/qemulab) through QEMU's GDB stub.

// syscalls counts the workload's system calls, each record saying which
// process made it: push pid against the pid the guest prints.
const syscalls = `name = vmlinux
modtype = kernel
major = 4
vars = 4
offset = __x64_sys_getppid
minor = 1
inc lv,0
push pid
log 1
push d,16
push task
push d,offsetof(struct task_struct, comm)
add
log str
exit 1
offset = ksys_read
minor = 2
inc lv,1
push pid
push r,rdi
log 2
exit 1
offset = ksys_write
minor = 3
inc lv,2
push pid
push r,rdi
log 2
exit 1
offset = do_sys_openat2
minor = 4
inc lv,3
push pid
log 1
push d,255
push r,rsi
log str
exit 1
`

func compile(t *testing.T, src string, syms ...string) *rpn.Module {
	t.Helper()
	f, err := dpdf.ParseSource("guest.dpdf", []byte(src), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatal(err)
	}
	var opts rpn.CompileOptions
	if len(syms) > 0 {
		set := symbols.NewSet()
		for _, p := range syms {
			tab, err := symbols.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			set.Add(tab)
		}
		opts.Symbols = probe.Symbols{Set: set}
	}
	m, err := compiler.Compile(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

type guest struct {
	t    *testing.T
	vm   *qemulab.VM
	eng  *engine.Engine
	mu   sync.Mutex
	recs []engine.Record
	warn []string
	art  string
}

func boot(t *testing.T, kaslr bool) *guest {
	t.Helper()
	qemulab.Require(t)
	art, err := qemulab.Artifacts()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	vm, err := qemulab.Boot(ctx, qemulab.Options{KASLR: kaslr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vm.Kill)
	return &guest{t: t, vm: vm, art: art}
}

// attach starts an engine on the guest's stub with the lab's symbols.
func (g *guest) attach(opts gdbtarget.Options) {
	g.t.Helper()
	if opts.Symbols == nil {
		opts.Symbols = []string{filepath.Join(g.art, "System.map"), filepath.Join(g.art, "vmlinux")}
	}
	eng, err := engine.Start(gdbtarget.Open(g.vm.GDBAddr(), opts), engine.Options{
		Sink: engine.SinkFunc(func(r *engine.Record) {
			g.mu.Lock()
			g.recs = append(g.recs, *r)
			g.mu.Unlock()
		}),
		DumpDir: g.t.TempDir(),
		Warn: func(msg string) {
			g.t.Log("engine:", msg)
			g.mu.Lock()
			g.warn = append(g.warn, msg)
			g.mu.Unlock()
		},
	})
	if err != nil {
		g.t.Fatal(err)
	}
	g.eng = eng
	g.t.Cleanup(func() { eng.Close() })
}

func (g *guest) insert(m *rpn.Module) []engine.ProbeInfo {
	g.t.Helper()
	infos, err := g.eng.Insert(m, engine.InsertNew)
	if err != nil {
		g.t.Fatal(err)
	}
	for _, p := range infos {
		if p.State != engine.StateActive {
			g.t.Fatalf("probe %s: %s %s", p.Location, p.State, p.Reason)
		}
	}
	if err := g.eng.Release(); err != nil {
		g.t.Fatal(err)
	}
	return infos
}

var pidLine = regexp.MustCompile(`GPWORK pid (\d+)`)

// run runs gpwork in the guest and returns its pid and output.
func (g *guest) run(cmd string) (int, string) {
	g.t.Helper()
	out, rc, err := g.vm.Run(cmd, 5*time.Minute)
	if err != nil || rc != 0 {
		g.t.Fatalf("%s: rc %d, %v\n%s", cmd, rc, err, out)
	}
	m := pidLine.FindStringSubmatch(out)
	if m == nil {
		g.t.Fatalf("%s printed no pid:\n%s", cmd, out)
	}
	var pid int
	fmt.Sscan(m[1], &pid)
	return pid, out
}

// of returns the records of a process for one probe.
func (g *guest) of(pid int, minor uint16) []engine.Record {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []engine.Record
	for _, r := range g.recs {
		if r.Minor == minor && len(r.Data) >= 8 && int(binary.LittleEndian.Uint64(r.Data)) == pid {
			out = append(out, r)
		}
	}
	return out
}

func word(r engine.Record, i int) uint64 {
	return binary.LittleEndian.Uint64(r.Data[8*i:])
}

// Exact hit counts for a process the guest names, the paths of its
// openat calls read from user memory, and the probe's variables.
func TestGuestSyscalls(t *testing.T) {
	g := boot(t, false)
	g.attach(gdbtarget.Options{})
	g.insert(compile(t, syscalls))
	const n = 5
	pid, out := g.run(fmt.Sprintf("gpwork counts %d /etc/gp-a /etc/gp-b", n))
	if !strings.Contains(out, fmt.Sprintf("GPWORK done getppid %d read %d write %d open %d", n, n, n, 2*n)) {
		t.Fatalf("the workload did not finish correctly:\n%s", out)
	}
	// the shell that runs the command calls getppid once before it execs
	// gpwork in the same process: count by the task's name too, read
	// with offsetof(struct task_struct, comm) from the kernel's BTF
	comms := map[string]int{}
	for _, r := range g.of(pid, 1) {
		comms[string(r.Data[8:])]++
	}
	if comms["gpwork"] != n {
		t.Errorf("getppid: pid %d made these calls by name: %v, want %d by gpwork", pid, comms, n)
	}
	reads := 0
	for _, r := range g.of(pid, 2) {
		if word(r, 1) == 3 { // the fd of /dev/zero under the lab's init
			reads++
		}
	}
	if reads != n {
		t.Errorf("read: %d hits on fd 3, want %d", reads, n)
	}
	writes := 0
	for _, r := range g.of(pid, 3) {
		if word(r, 1) == 4 {
			writes++
		}
	}
	if writes != n {
		t.Errorf("write: %d hits on fd 4, want %d", writes, n)
	}
	paths := map[string]int{}
	for _, r := range g.of(pid, 4) {
		paths[string(r.Data[8:])]++
	}
	if paths["/etc/gp-a"] != n || paths["/etc/gp-b"] != n || paths["/dev/zero"] != 1 || paths["/dev/null"] != 1 {
		t.Errorf("openat paths of pid %d: %v", pid, paths)
	}
	// the variables counted every process's calls, the workload's among them
	lv, _, err := g.eng.Vars("vmlinux", false)
	if err != nil || lv[0] < n || lv[3] < 2*n+2 {
		t.Errorf("variables %v %v", lv, err)
	}
	for _, p := range g.eng.Query() {
		if p.State != engine.StateActive || p.Hits == 0 {
			t.Errorf("query: %+v", p)
		}
	}
}

// A kernel booted with KASLR on: the slide is found from linux_banner and
// the probes land on the moved code.
func TestGuestKASLR(t *testing.T) {
	g := boot(t, true)
	g.attach(gdbtarget.Options{})
	var slide uint64
	g.eng.WithTarget(func(tg engine.Target) error {
		slide, _ = tg.OS().(*linuxkernel.Guest).K.Slide()
		return nil
	})
	want, err := g.vm.Slide()
	if err != nil {
		t.Fatal(err)
	}
	if int64(slide) != want || slide == 0 {
		t.Fatalf("slide %#x, the guest says %#x", slide, want)
	}
	g.insert(compile(t, syscalls))
	pid, _ := g.run("gpwork counts 3")
	n := 0
	for _, r := range g.of(pid, 1) {
		if string(r.Data[8:]) == "gpwork" {
			n++
		}
	}
	if n != 3 {
		t.Errorf("getppid under KASLR: %d hits, want 3", n)
	}
}

// Probes removed while the workload loops: it goes on and finishes right.
func TestGuestRemoveMidRun(t *testing.T) {
	g := boot(t, false)
	g.attach(gdbtarget.Options{})
	g.insert(compile(t, syscalls))
	if err := g.vm.Start("gpwork loop 20 6"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.vm.WaitFor(regexp.MustCompile(`GPWORK round 2 `), 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	if n, err := g.eng.Remove("vmlinux", nil); err != nil || n != 4 {
		t.Fatalf("remove: %d %v", n, err)
	}
	line, err := g.vm.WaitFor(regexp.MustCompile(`GPWORK (loop done|error)`), 3*time.Minute)
	if err != nil || !strings.Contains(line, "loop done rounds 6") {
		t.Fatalf("after remove: %q %v\n%s", line, err, g.vm.Log())
	}
	if _, rc, err := g.vm.Run("true", time.Minute); err != nil || rc != 0 {
		t.Errorf("the guest after remove: %v", err)
	}
}

// Breakpoints the engine did not put in the stub. One left by a client
// that went away without detaching (a killed gdb or daemon) is dropped by
// QEMU when the engine connects and asks "?". One the engine meets while
// attached (made here behind its back) is taken out at its first stop,
// with a warning, instead of stopping the vCPU forever. Either way the
// probed workload runs through with the right hits.
func TestGuestForeignBreakpoint(t *testing.T) {
	g := boot(t, false)
	getppid, err := qemulab.Symbol("__x64_sys_getppid")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	raw, err := gdbremote.Dial(ctx, g.vm.GDBAddr(), gdbremote.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.SetBreakpoint(gdbremote.Software, getppid, 1); err != nil {
		t.Fatal(err)
	}
	if err := raw.Continue(nil, 0); err != nil {
		t.Fatal(err)
	}
	raw.Close() // no detach: QEMU keeps the breakpoint
	g.attach(gdbtarget.Options{})
	g.insert(compile(t, `name = vmlinux
modtype = kernel
offset = ksys_read
push pid
push r,rdi
log 2
exit 1
`))
	reads := func(pid int) int {
		n := 0
		for _, r := range g.of(pid, 0) {
			if word(r, 1) == 3 {
				n++
			}
		}
		return n
	}
	warned := func() []string {
		g.mu.Lock()
		defer g.mu.Unlock()
		var out []string
		for _, w := range g.warn {
			if strings.Contains(w, "no probe") {
				out = append(out, w)
			}
		}
		return out
	}
	pid, _ := g.run("gpwork counts 2")
	if n := reads(pid); n != 2 {
		t.Errorf("read hits on fd 3: %d, want 2", n)
	}
	if w := warned(); len(w) != 0 {
		t.Errorf("the dead client's breakpoint was still in: %q", w)
	}
	g.eng.WithTarget(func(tg engine.Target) error {
		return tg.InsertBreakpoint(0, getppid, nil)
	})
	pid, _ = g.run("gpwork counts 3")
	if n := reads(pid); n != 3 {
		t.Errorf("read hits on fd 3: %d, want 3", n)
	}
	if w := warned(); len(w) != 1 || !strings.Contains(w[0], fmt.Sprintf("%#x", getppid)) {
		t.Errorf("warnings about the foreign breakpoint: %q, want one", w)
	}
}

// The guest powers off while probed: the probes are gone, the engine
// still answers.
func TestGuestPowersOff(t *testing.T) {
	g := boot(t, false)
	g.attach(gdbtarget.Options{})
	g.insert(compile(t, syscalls))
	off := make(chan error, 1)
	go func() { off <- g.vm.PowerOff(3 * time.Minute) }()
	done := make(chan struct{})
	go func() { <-g.eng.Ended(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the engine did not notice the power-off; the guest's log ends:\n%s", tailLines(g.vm.Log(), 30))
	}
	for _, p := range g.eng.Query() {
		if p.State != engine.StateGone {
			t.Errorf("%s: %s", p.Location, p.State)
		}
	}
	if err := <-off; err != nil {
		t.Errorf("power-off: %v", err)
	}
}

func tailLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
