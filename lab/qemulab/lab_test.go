package qemulab

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/testkit"
)

func boot(t *testing.T, opts Options) *VM {
	t.Helper()
	Require(t)
	if opts.LogPath == "" {
		opts.LogPath = filepath.Join(t.TempDir(), "serial.log")
	}
	vm, err := Boot(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if e := vm.KernelErrors(); len(e) > 0 {
			t.Errorf("guest kernel trouble:\n%s", strings.Join(e, "\n"))
		}
		vm.Kill()
	})
	t.Logf("booted %s %s (%s) in %v, _stext %#x, gdb %s", vm.KernelRelease(), vm.Kernel(), vm.Cmdline(),
		vm.BootTime().Round(time.Millisecond), vm.Stext(), vm.GDBAddr())
	return vm
}

func run(t *testing.T, vm *VM, cmd string) string {
	t.Helper()
	out, rc, err := vm.Run(cmd, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rc != 0 {
		t.Fatalf("%s: status %d\n%s", cmd, rc, out)
	}
	return out
}

func sym(t *testing.T, name string) uint64 {
	t.Helper()
	a, err := Symbol(name)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestArtifacts(t *testing.T) {
	Require(t)
	dir, err := Artifacts()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(filepath.Join(dir, "vmlinux"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	btf := f.Section(".BTF")
	if btf == nil || btf.Size < 1<<20 {
		t.Fatalf("vmlinux: no .BTF section (or too small: %v)", btf)
	}
	data, err := btf.Data()
	if err != nil {
		t.Fatal(err)
	}
	if data[0] != 0x9f || data[1] != 0xeb { // BTF magic 0xeB9F, little endian
		t.Fatalf(".BTF magic % x", data[:2])
	}
	text := f.Section(".text")
	if text == nil || text.Addr != sym(t, "_stext") {
		t.Fatalf(".text %v, System.map _stext %#x", text, sym(t, "_stext"))
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "config"))
	if err != nil || !strings.Contains(string(cfg), "CONFIG_RANDOMIZE_BASE=y") {
		t.Fatalf("config: %v, no CONFIG_RANDOMIZE_BASE=y", err)
	}
	info, _ := os.ReadFile(filepath.Join(dir, "BUILDINFO"))
	t.Logf("%s: .BTF %d bytes\n%s", dir, btf.Size, info)
}

var (
	pidRe  = regexp.MustCompile(`(?m)^GPWORK pid (\d+)$`)
	doneRe = regexp.MustCompile(`(?m)^GPWORK done getppid (\d+) read (\d+) write (\d+) open (\d+)$`)
	latRe  = regexp.MustCompile(`(?m)^GPWORK lat (\w+) ([0-9.]+)$`)
)

// TestLab boots one nokaslr guest and checks the workload, the serial
// protocol, the GDB stub (registers, memory, a breakpoint in getppid),
// latency figures, a background loop and poweroff.
func TestLab(t *testing.T) {
	t.Parallel()
	vm := boot(t, Options{})
	if s, _ := vm.Slide(); s != 0 {
		t.Fatalf("nokaslr boot: _stext %#x, slide %#x", vm.Stext(), s)
	}

	t.Run("counts", func(t *testing.T) {
		out := run(t, vm, "gpwork counts 3")
		t.Logf("\n%s", out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4 || !pidRe.MatchString(lines[0]) {
			t.Fatalf("want pid, done and 2 opened lines, got:\n%s", out)
		}
		want := []string{"GPWORK done getppid 3 read 3 write 3 open 6",
			"GPWORK opened /etc/gp-a 3", "GPWORK opened /etc/gp-b 3"}
		for i, w := range want {
			if lines[i+1] != w {
				t.Errorf("line %d: %q, want %q", i+1, lines[i+1], w)
			}
		}
		out = run(t, vm, "gpwork counts 5 /etc/gp-b /etc/passwd /dev/null")
		if !strings.Contains(out, "GPWORK done getppid 5 read 5 write 5 open 15\n") ||
			!strings.Contains(out, "GPWORK opened /etc/passwd 5\n") {
			t.Errorf("gpwork counts 5 with paths:\n%s", out)
		}
		out, rc, err := vm.Run("gpwork counts 1 /nonexistent", 30*time.Second)
		if err != nil || rc != 1 || !strings.Contains(out, "GPWORK error open /nonexistent") {
			t.Errorf("open of a missing path: rc %d err %v\n%s", rc, err, out)
		}
	})

	t.Run("serial", func(t *testing.T) {
		out, rc, err := vm.Run("echo one; echo two >&2; echo; exit 7", 30*time.Second)
		if err != nil || rc != 7 || out != "one\ntwo\n\n" {
			t.Fatalf("rc %d err %v out %q", rc, err, out)
		}
		if out := run(t, vm, "cat /proc/cmdline"); !strings.Contains(out, "nokaslr") {
			t.Errorf("cmdline %q", out)
		}
		if _, _, err := vm.Run("echo a\necho b", time.Second); err == nil {
			t.Error("a two-line command was accepted")
		}
		st, err := vm.HMP("info status", 10*time.Second)
		if err != nil || !strings.Contains(st, "running") {
			t.Errorf("hmp info status: %q %v", st, err)
		}
	})

	t.Run("gdbstub", func(t *testing.T) {
		c, err := dialRSP(vm.GDBAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		stop, err := c.cmd("?", 10*time.Second) // QEMU stops the VM when a client connects
		if err != nil || !strings.HasPrefix(stop, "T05") && !strings.HasPrefix(stop, "S05") {
			t.Fatalf("stop reply %q %v", stop, err)
		}
		rip, err := c.stopInRange(sym(t, "_stext"), sym(t, "_etext"))
		if err != nil {
			t.Error(err)
		}
		banner, err := c.readMem(sym(t, "linux_banner"), 40)
		if err != nil || !strings.HasPrefix(string(banner), "Linux version 6.1") {
			t.Errorf("linux_banner: %q %v", banner, err)
		}
		t.Logf("on connect %q, qSupported %q, '?' %q, rip %#x, linux_banner %q", c.connectStop, c.supported, stop, rip, banner)
		if r, err := c.cmd("D;1", 10*time.Second); err != nil || r != "OK" {
			t.Fatalf("detach: %q %v", r, err)
		}
		run(t, vm, "true") // the guest runs again after detach
	})

	t.Run("breakpoint", func(t *testing.T) {
		// The lab's use case in miniature: count getppid entries through the
		// stub while the workload runs. QEMU TCG breakpoints do not change
		// guest memory; stepping off one is z0, s, Z0.
		addr := sym(t, "__x64_sys_getppid")
		c, err := dialRSP(vm.GDBAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.cmd("?", 10*time.Second); err != nil {
			t.Fatal(err)
		}
		before, _ := c.readMem(addr, 16)
		bp := fmt.Sprintf("Z0,%x,1", addr)
		if r, err := c.cmd(bp, 10*time.Second); r != "OK" {
			t.Fatalf("%s: %q %v", bp, r, err)
		}
		after, _ := c.readMem(addr, 16)
		if string(before) != string(after) {
			t.Errorf("memory under a TCG breakpoint changed: % x -> % x", before, after)
		}
		type result struct {
			out string
			rc  int
			err error
		}
		done := make(chan result, 1)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, rc, err := vm.Run("gpwork counts 3", 60*time.Second)
			done <- result{out, rc, err}
		}()
		defer wg.Wait()
		if err := c.send("c"); err != nil {
			t.Fatal(err)
		}
		hits := 0
		var res result
	loop:
		for {
			select {
			case p, ok := <-c.packets:
				if !ok {
					t.Fatal("stub closed the connection")
				}
				rip, err := c.rip()
				if err != nil {
					t.Fatal(err)
				}
				if rip != addr {
					t.Fatalf("stop %q at %#x, want the breakpoint %#x", p, rip, addr)
				}
				hits++
				for _, step := range []string{fmt.Sprintf("z0,%x,1", addr), "s", bp} {
					if r, err := c.cmd(step, 10*time.Second); err != nil || (step != "s" && r != "OK") {
						t.Fatalf("%s: %q %v", step, r, err)
					}
				}
				c.send("c")
			case res = <-done:
				break loop
			case <-time.After(90 * time.Second):
				t.Fatal("no stop and no end of the workload")
			}
		}
		if _, err := c.interrupt(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		c.cmd(fmt.Sprintf("z0,%x,1", addr), 10*time.Second)
		if r, err := c.cmd("D;1", 10*time.Second); err != nil || r != "OK" {
			t.Fatalf("detach: %q %v", r, err)
		}
		if res.err != nil || res.rc != 0 || !strings.Contains(res.out, "GPWORK done getppid 3 ") {
			t.Fatalf("workload under the breakpoint: rc %d err %v\n%s", res.rc, res.err, res.out)
		}
		// busybox ash calls getppid() once at start-up (for $PPID): the
		// `sh -c` that runs each command adds one hit system-wide.
		t.Logf("getppid breakpoint hits: %d (gpwork 3 + sh -c 1)", hits)
		if hits != 4 {
			t.Errorf("getppid hits %d, want 4", hits)
		}
	})

	t.Run("gdb", func(t *testing.T) {
		testkit.Need(t, "gdb")
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "gdb", "-nx", "-batch",
			"-ex", "set architecture i386:x86-64",
			"-ex", "target remote "+vm.GDBAddr(),
			"-ex", "info registers rip",
			"-ex", fmt.Sprintf("x/s %#x", sym(t, "linux_banner")),
			"-ex", "detach").CombinedOutput()
		t.Logf("gdb: %v\n%s", err, out)
		m := regexp.MustCompile(`rip\s+0x([0-9a-f]+)`).FindSubmatch(out)
		if m == nil {
			t.Fatal("no rip in gdb output")
		}
		// the guest is usually idle in the kernel, but may be caught in user
		// space on a loaded host; the RSP subtests check the range
		if rip, _ := strconv.ParseUint(string(m[1]), 16, 64); rip == 0 {
			t.Errorf("gdb rip 0")
		}
		if !strings.Contains(string(out), "Linux version 6.1") {
			t.Error("gdb did not read linux_banner")
		}
		run(t, vm, "true")
	})

	t.Run("latency", func(t *testing.T) {
		var figs []string
		for _, k := range []struct {
			kind string
			n    int
		}{{"null", 10000}, {"read", 10000}, {"write", 10000}, {"open", 2000}} {
			out := run(t, vm, fmt.Sprintf("gpwork lat %s %d", k.kind, k.n))
			m := latRe.FindStringSubmatch(out)
			if m == nil || m[1] != k.kind {
				t.Fatalf("lat %s: %q", k.kind, out)
			}
			ns, _ := strconv.ParseFloat(m[2], 64)
			if ns <= 0 {
				t.Errorf("lat %s: %v ns", k.kind, ns)
			}
			figs = append(figs, fmt.Sprintf("%s %s ns", k.kind, m[2]))
		}
		t.Logf("unprobed syscall latency (TCG, 1 vCPU): %s", strings.Join(figs, ", "))
	})

	t.Run("loop-probed-poweroff", func(t *testing.T) {
		// The lab side of "probe removed mid-run" and "guest powers off while
		// probed": a breakpoint serviced through the stub while gpwork loops.
		if err := vm.Start("gpwork loop 200"); err != nil {
			t.Fatal(err)
		}
		if _, err := vm.WaitFor(regexp.MustCompile(`^GPWORK pid \d+$`), 30*time.Second); err != nil {
			t.Fatal(err)
		}
		round := func(r int) {
			t.Helper()
			want := fmt.Sprintf("GPWORK round %d getppid 200 read 200 write 200 open 400", r)
			l, err := vm.WaitFor(regexp.MustCompile("^GPWORK (round "+strconv.Itoa(r)+" |error)"), 60*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if l != want {
				t.Fatalf("%q, want %q", l, want)
			}
		}
		round(1)
		addr := sym(t, "__x64_sys_getppid")
		c, err := dialRSP(vm.GDBAddr())
		if err != nil {
			t.Fatal(err)
		}
		hits, _, err := c.serveBreakpoint(addr, func(h int) bool { return h == 50 })
		if err != nil {
			t.Fatalf("%v (connected with %q)\n%s", err, c.connectStop, vm.QEMU.LogTail(30))
		}
		// remove it mid-run, stopped at a hit, and let the guest go
		c.cmd(fmt.Sprintf("z0,%x,1", addr), 10*time.Second)
		if r, err := c.cmd("D;1", 10*time.Second); err != nil || r != "OK" {
			t.Fatalf("detach: %q %v", r, err)
		}
		c.Close()
		t.Logf("%d getppid hits, breakpoint removed mid-run", hits)
		// the rounds go on, every result checked by gpwork
		l, err := vm.WaitFor(regexp.MustCompile(`^GPWORK (round|error)`), 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := strconv.Atoi(strings.Fields(l)[2])
		round(r + 1)
		round(r + 2)
		if out := run(t, vm, "echo alive"); out != "alive\n" {
			t.Errorf("Run during the loop: %q", out)
		}

		// probe again and power off while the breakpoint is being hit
		c, err = dialRSP(vm.GDBAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		type served struct {
			hits int
			last string
			err  error
		}
		res := make(chan served, 1)
		hit := make(chan struct{})
		go func() {
			h, last, err := c.serveBreakpoint(addr, func(n int) bool {
				if n == 1 {
					close(hit)
				}
				return false
			})
			res <- served{h, last, err}
		}()
		// the breakpoint is being hit once its first hit is served
		select {
		case <-hit:
		case s := <-res:
			t.Fatalf("the stub connection ended before a hit: %d hits, last %q: %v", s.hits, s.last, s.err)
		case <-time.After(3 * time.Minute):
			t.Fatalf("no hit of the breakpoint in 3 minutes\n%s", vm.QEMU.LogTail(30))
		}
		t0 := time.Now()
		// every getppid of the loop is a stub round trip now: on a loaded host
		// the guest needs a while to read "poweroff"
		if err := vm.PowerOff(120 * time.Second); err != nil {
			t.Fatal(err)
		}
		t.Logf("powered off while probed and looping in %v", time.Since(t0).Round(time.Millisecond))
		select {
		case s := <-res:
			if s.err != nil {
				t.Error(s.err)
			}
			t.Logf("stub: %d hits, then %q and connection closed", s.hits, s.last)
		case <-time.After(10 * time.Second):
			t.Error("stub connection still open after QEMU exited")
		}
		if _, _, err := vm.Run("true", time.Second); err == nil {
			t.Error("Run after poweroff succeeded")
		}
	})
}

// TestKASLR boots with KASLR on and shows the kernel text moved: the guest's
// /proc/kallsyms, the GDB stub's rip and a read of linux_banner all agree on
// a non-zero, 2 MiB-aligned slide.
func TestKASLR(t *testing.T) {
	t.Parallel()
	var vm *VM
	var slide int64
	for try := 0; ; try++ {
		vm = boot(t, Options{KASLR: true})
		var err error
		if slide, err = vm.Slide(); err != nil {
			t.Fatal(err)
		}
		if slide != 0 || try == 2 {
			break
		}
		t.Logf("KASLR chose slide 0 (about 1 boot in 500); booting again")
		vm.Kill()
	}
	if slide == 0 {
		t.Fatal("three KASLR boots, kernel text never moved")
	}
	if slide%(2<<20) != 0 {
		t.Errorf("slide %#x not 2 MiB aligned", slide)
	}
	t.Logf("KASLR slide %#x", slide)
	out := run(t, vm, "grep ' _stext$' /proc/kallsyms; cat /proc/cmdline")
	if !strings.HasPrefix(out, fmt.Sprintf("%016x T _stext\n", vm.Stext())) || strings.Contains(out, "nokaslr") {
		t.Errorf("guest says:\n%s", out)
	}

	c, err := dialRSP(vm.GDBAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.cmd("?", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	rip, err := c.stopInRange(sym(t, "_stext")+uint64(slide), sym(t, "_etext")+uint64(slide))
	if err != nil {
		t.Errorf("slid kernel text: %v", err)
	}
	banner := sym(t, "linux_banner")
	b, err := c.readMem(banner+uint64(slide), 20)
	if err != nil || !strings.HasPrefix(string(b), "Linux version 6.1") {
		t.Errorf("linux_banner+slide: %q %v", b, err)
	}
	b2, err2 := c.readMem(banner, 20)
	if err2 == nil && strings.HasPrefix(string(b2), "Linux version") {
		t.Errorf("linux_banner still readable at its link address %#x", banner)
	}
	t.Logf("rip %#x; at linux_banner+slide %q; at the link address: %q %v", rip, b, b2, err2)
	if r, err := c.cmd("D;1", 10*time.Second); err != nil || r != "OK" {
		t.Fatalf("detach: %q %v", r, err)
	}
	if err := vm.PowerOff(30 * time.Second); err != nil {
		t.Fatal(err)
	}
}
