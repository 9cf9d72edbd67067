package gdbremote

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gprobes/gprobes/lab/qemulab"
)

func bootLab(t testing.TB, opts qemulab.Options) *qemulab.VM {
	t.Helper()
	qemulab.Require(t)
	vm, err := qemulab.Boot(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if e := vm.KernelErrors(); len(e) > 0 {
			t.Errorf("guest kernel trouble:\n%s", strings.Join(e, "\n"))
		}
		vm.Kill()
	})
	return vm
}

func labSym(t testing.TB, name string) uint64 {
	t.Helper()
	a, err := qemulab.Symbol(name)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func dialLab(t testing.TB, vm *qemulab.VM) *Conn {
	t.Helper()
	c, err := Dial(t.Context(), vm.GDBAddr(), Options{Timeout: time.Minute, Log: traceTo(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// stepProgressed reports whether a single-step from rip made progress: rip
// moved, or the instruction there is a rep-prefixed string instruction
// (TCG steps one iteration at a time, rip staying put) and rcx, its
// count, fell. CI once stopped the guest on one in user space, and two
// steps left rip in place.
func stepProgressed(c *Conn, th Thread, rip, after, rcxBefore uint64) bool {
	if after != rip {
		return true
	}
	var code [8]byte
	if c.ReadMem(rip, code[:]) != nil {
		return false
	}
	// legacy prefixes (operand and address size, rep), then a REX, then
	// the string opcode
	k, rep := 0, false
	for k < len(code) && (code[k] == 0x66 || code[k] == 0x67 || code[k] == 0xf2 || code[k] == 0xf3) {
		rep = rep || code[k] == 0xf2 || code[k] == 0xf3
		k++
	}
	if k < len(code) && code[k]&0xf0 == 0x40 {
		k++
	}
	if !rep || k >= len(code) {
		return false
	}
	switch code[k] {
	case 0xa4, 0xa5, 0xa6, 0xa7, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf, 0x6c, 0x6d, 0x6e, 0x6f:
		rcx, err := c.ReadReg(th, "rcx")
		return err == nil && rcx < rcxBefore
	}
	return false
}

func TestQEMU(t *testing.T) {
	t.Parallel()
	vm := bootLab(t, qemulab.Options{})
	c := dialLab(t, vm)
	ctx := t.Context()

	t.Run("handshake", func(t *testing.T) {
		// QEMU 7.2: a stop reported unasked, acks kept, multiprocess ids.
		t.Logf("features %v; connect stop %q; initial stop %q; no-ack %v",
			c.Features(), c.ConnectStop(), c.InitialStop().Raw, c.NoAck())
		if c.ConnectStop() == "" {
			t.Error("QEMU sent no stop at connection (quirk gone?)")
		}
		if c.NoAck() {
			t.Error("QEMU 7.2 accepted QStartNoAckMode (quirk gone?)")
		}
		if th := c.InitialStop().Thread; th.ID != "p01.01" || th.Pid != 1 || th.Num != 1 {
			t.Errorf("initial thread %+v", th)
		}
		if c.Arch() != "i386:x86-64" {
			t.Errorf("arch %q", c.Arch())
		}
		for name, off := range map[string]int{"rip": 128, "eflags": 136, "fs_base": 164, "gs_base": 172, "cr3": 204} {
			if r, ok := c.Reg(name); !ok || r.Offset != off || r.Bitsize != map[bool]int{true: 32, false: 64}[name == "eflags"] {
				t.Errorf("%s: %+v %v, want offset %d", name, r, ok, off)
			}
		}
		th, err := c.Threads()
		if err != nil || len(th) != 1 || th[0].ID != "p01.01" {
			t.Fatalf("threads %v %v", th, err)
		}
	})

	th := c.InitialStop().Thread
	t.Run("monitor", func(t *testing.T) {
		out, err := c.Monitor("info status")
		if err != nil || !strings.Contains(out, "VM status: paused") {
			t.Fatalf("monitor info status: %q %v", out, err)
		}
		t.Logf("monitor: %q", out)
	})

	t.Run("registers", func(t *testing.T) {
		g, err := c.ReadRegs(th)
		if err != nil {
			t.Fatal(err)
		}
		if len(g) != 608 {
			t.Errorf("g block %d bytes, want 608", len(g))
		}
		for _, name := range []string{"rip", "cr3", "gs_base", "eflags"} {
			p, err := c.ReadReg(th, name)
			if err != nil {
				t.Fatal(err)
			}
			fromG, _ := c.RegValue(g, name)
			if p != fromG {
				t.Errorf("%s: p %#x, g %#x", name, p, fromG)
			}
			t.Logf("%s %#x", name, p)
		}
		if cr3, _ := c.RegValue(g, "cr3"); cr3 == 0 || cr3&0xfff != 0 {
			t.Errorf("cr3 %#x", cr3)
		}
		if rip, _ := c.RegValue(g, "rip"); rip == 0 {
			t.Error("rip 0")
		}
		// P writes a register: rax, and back.
		rax, _ := c.RegValue(g, "rax")
		if err := c.WriteReg(th, "rax", 0x1122334455667788); err != nil {
			t.Fatal(err)
		}
		if v, _ := c.ReadReg(th, "rax"); v != 0x1122334455667788 {
			t.Errorf("rax after P: %#x", v)
		}
		if err := c.WriteReg(th, "rax", rax); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("memory", func(t *testing.T) {
		banner := labSym(t, "linux_banner")
		buf := make([]byte, 256)
		if err := c.ReadMem(banner, buf); err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(buf, []byte("Linux version 6.1")) {
			t.Fatalf("linux_banner: %q", buf[:64])
		}
		t.Logf("%s", buf[:bytes.IndexByte(buf, '\n')])
		// The same bytes as vmlinux's (a differential check of m).
		if want := elfBytes(t, banner, len(buf)); !bytes.Equal(buf, want) {
			t.Errorf("linux_banner differs from vmlinux:\n%q\n%q", buf, want)
		}
		// 64 KiB of .rodata from linux_banner's page: many packets (2 KiB
		// each), same as the file.
		start := banner &^ 0xfff
		big := make([]byte, 64<<10)
		if err := c.ReadMem(start, big); err != nil {
			t.Fatal(err)
		}
		if want := elfBytes(t, start, len(big)); !bytes.Equal(big, want) {
			n := 0
			for n < len(big) && big[n] == want[n] {
				n++
			}
			t.Errorf(".rodata from %#x differs from vmlinux at +%#x", start, n)
		}
		// Unmapped: a MemError naming the first address that failed.
		err := c.ReadMem(0xffffffff80fffff0, make([]byte, 32))
		var me *MemError
		if !errors.As(err, &me) || me.Addr != 0xffffffff80fffff0 || me.Err.(*PacketError).Errno() != 14 {
			t.Fatalf("unmapped read: %v", err)
		}
		t.Log(err)
		// Write and restore a byte of the banner (through M: QEMU has no X).
		if err := c.WriteMem(banner+6, []byte("V")); err != nil {
			t.Fatal(err)
		}
		var v [7]byte
		c.ReadMem(banner, v[:])
		c.WriteMem(banner+6, buf[6:7])
		if string(v[:]) != "Linux V" {
			t.Errorf("after write: %q", v)
		}
	})

	t.Run("step", func(t *testing.T) {
		// Stepping a vCPU moves rip (caught in user space or in the idle
		// loop alike).
		// QEMU may answer the first step after a stop that interrupted an
		// I/O exit (the guest writing its serial console) without running
		// an instruction: rip must move within two steps.
		before, _ := c.ReadReg(th, "rip")
		after := before
		var st Stop
		progressed := false
		for try := 0; try < 2 && !progressed; try++ {
			rcx, _ := c.ReadReg(th, "rcx")
			if err := c.Step(th); err != nil {
				t.Fatal(err)
			}
			var err error
			st, err = c.Wait(ctx)
			if err != nil || st.Signal != 5 || st.Thread != th {
				t.Fatalf("step: %+v %v", st, err)
			}
			after, _ = c.ReadReg(th, "rip")
			progressed = stepProgressed(c, th, before, after, rcx)
			if !progressed {
				t.Logf("step %d left rip at %#x", try+1, before)
			}
		}
		if !progressed {
			t.Errorf("rip %#x unchanged by two steps, and no rep instruction there went on", before)
		}
		t.Logf("step: %s, rip %#x -> %#x", st.Raw, before, after)
	})

	t.Run("breakpoint-at-pc", func(t *testing.T) {
		// A breakpoint where the vCPU stands: continuing stops again at
		// once, in place (TCG checks breakpoints before executing a
		// block); a step executes the instruction anyway (QEMU 7.2:
		// "singlestep overrides breakpoints").
		pc, _ := c.ReadReg(th, "rip")
		if err := c.SetBreakpoint(Software, pc, 1); err != nil {
			t.Fatal(err)
		}
		if err := c.Continue(nil, 0); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		st, err := c.Wait(wctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if again, _ := c.ReadReg(st.Thread, "rip"); again != pc || st.Signal != 5 {
			t.Errorf("continue from a breakpoint at %#x: %s at %#x, want an immediate stop in place", pc, st.Raw, again)
		}
		rcx, _ := c.ReadReg(th, "rcx")
		if err := c.Step(th); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if after, _ := c.ReadReg(th, "rip"); !stepProgressed(c, th, pc, after, rcx) {
			t.Errorf("a step at a breakpoint stayed at %#x", pc)
		} else {
			t.Logf("step with the breakpoint in: %#x -> %#x", pc, after)
		}
		if err := c.ClearBreakpoint(Software, pc, 1); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("stray-interrupt", func(t *testing.T) {
		// 0x03 while the VM is stopped is ignored: no stop follows.
		c.writeRaw([]byte{0x03})
		if err := c.Continue(nil, 0); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := c.Wait(wctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("continue after a 0x03 sent while stopped: %+v %v, want no stop", st, err)
		}
		if err := c.Interrupt(); err != nil {
			t.Fatal(err)
		}
		if st, err = c.Wait(ctx); err != nil || st.Signal != 2 {
			t.Fatalf("interrupt: %+v %v", st, err)
		}
	})

	t.Run("breakpoint", func(t *testing.T) {
		bp := labSym(t, "__x64_sys_getppid")
		commOff := commOffset(t, c)
		hits := serveGetppid(t, c, vm, bp, commOff)
		n := 0
		var pid int
		for _, h := range hits {
			if h.comm == "gpwork" {
				n++
				pid = h.pid
			}
		}
		t.Logf("%d hits in all: %v", len(hits), hits)
		if n != 3 {
			t.Errorf("%d hits by gpwork, want 3", n)
		}
		if pid == 0 {
			t.Errorf("gpwork's pid not found in its task_struct")
		}
	})

	t.Run("detach", func(t *testing.T) {
		if err := c.Detach(); err != nil {
			t.Fatal(err)
		}
		c.Close()
		out, rc, err := vm.Run("echo alive", 30*time.Second)
		if err != nil || rc != 0 || out != "alive\n" {
			t.Fatalf("after detach: %q %d %v", out, rc, err)
		}
	})

	t.Run("poweroff", func(t *testing.T) {
		c := dialLab(t, vm)
		if err := c.Continue(nil, 0); err != nil {
			t.Fatal(err)
		}
		off := make(chan error, 1)
		go func() { off <- vm.PowerOff(2 * time.Minute) }()
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		st, err := c.Wait(wctx)
		switch {
		case err == nil && st.Exited:
			t.Logf("poweroff: %s", st.Raw)
		case errors.Is(err, ErrClosed):
			t.Logf("poweroff: %v", err)
		default:
			t.Fatalf("poweroff: %+v %v", st, err)
		}
		if _, err := c.Threads(); !errors.Is(err, ErrClosed) {
			t.Errorf("after poweroff: %v", err)
		}
		if err := <-off; err != nil {
			t.Fatal(err)
		}
	})
}

// elfBytes reads n bytes at a virtual address from the lab's vmlinux.
func elfBytes(t testing.TB, addr uint64, n int) []byte {
	t.Helper()
	dir, err := qemulab.Artifacts()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(filepath.Join(dir, "vmlinux"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr+uint64(n) <= p.Vaddr+p.Filesz {
			b := make([]byte, n)
			if _, err := p.ReadAt(b, int64(addr-p.Vaddr)); err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	t.Fatalf("%#x+%d not in vmlinux", addr, n)
	return nil
}

// commOffset finds task_struct.comm: where init_task holds "swapper".
func commOffset(t testing.TB, c *Conn) uint64 {
	t.Helper()
	b := make([]byte, 0x3000)
	if err := c.ReadMem(labSym(t, "init_task"), b); err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte("swapper"))
	if i < 0 {
		t.Fatal("no \"swapper\" in init_task")
	}
	return uint64(i)
}

type hit struct {
	comm string
	pid  int
}

func (h hit) String() string { return fmt.Sprintf("%s[%d]", h.comm, h.pid) }

var (
	pidLine  = regexp.MustCompile(`^GPWORK pid (\d+)$`)
	doneLine = regexp.MustCompile(`^GPWORK done getppid 3 `)
)

// serveGetppid sets a breakpoint at bp, runs "gpwork counts 3" in the
// guest and services every hit (the current task's comm; step off with
// z0, vCont;s, Z0) until gpwork is done, then stops the guest and clears
// the breakpoint.
func serveGetppid(t *testing.T, c *Conn, vm *qemulab.VM, bp, commOff uint64) []hit {
	currentTask := labSym(t, "current_task") // a per-CPU offset
	if err := c.SetBreakpoint(Software, bp, 1); err != nil {
		t.Fatal(err)
	}
	// QEMU's breakpoints are not in guest memory.
	var b [1]byte
	if err := c.ReadMem(bp, b[:]); err != nil || b[0] == 0xcc {
		t.Errorf("byte at the breakpoint %#x %v", b[0], err)
	}
	type result struct {
		hits []hit
		task []byte // gpwork's task_struct, first hit
		err  error
	}
	ctx, stop := context.WithCancel(t.Context())
	res := make(chan result, 1)
	go func() {
		var r result
		r.err = func() error {
			if err := c.Continue(nil, 0); err != nil {
				return err
			}
			for {
				st, err := c.Wait(ctx)
				if err == context.Canceled {
					// Done: stop the guest.
					if err := c.Interrupt(); err != nil {
						return err
					}
					st, err = c.Wait(t.Context())
					if err != nil {
						return err
					}
					if st.Signal == 2 {
						return nil
					}
					// A hit came first; serve it, then stop again.
				} else if err != nil {
					return err
				}
				g, err := c.ReadRegs(st.Thread)
				if err != nil {
					return err
				}
				rip, _ := c.RegValue(g, "rip")
				if st.Signal != 5 || rip != bp {
					return fmt.Errorf("stop %s at %#x, not at the breakpoint %#x", st.Raw, rip, bp)
				}
				gs, _ := c.RegValue(g, "gs_base")
				var p [8]byte
				if err := c.ReadMem(gs+currentTask, p[:]); err != nil {
					return err
				}
				task := binary.LittleEndian.Uint64(p[:])
				var comm [16]byte
				if err := c.ReadMem(task+commOff, comm[:]); err != nil {
					return err
				}
				h := hit{comm: string(comm[:bytes.IndexByte(comm[:], 0)])}
				if h.comm == "gpwork" && r.task == nil {
					r.task = make([]byte, commOff)
					if err := c.ReadMem(task, r.task); err != nil {
						return err
					}
				}
				r.hits = append(r.hits, h)
				// Step off: QEMU would stop again in place otherwise.
				if err := c.ClearBreakpoint(Software, bp, 1); err != nil {
					return err
				}
				if err := c.Step(st.Thread); err != nil {
					return err
				}
				if st, err = c.Wait(t.Context()); err != nil {
					return err
				}
				if err := c.SetBreakpoint(Software, bp, 1); err != nil {
					return err
				}
				if err := c.Continue(nil, 0); err != nil {
					return err
				}
			}
		}()
		res <- r
	}()
	defer func() {
		stop()
	}()
	if err := vm.Start("gpwork counts 3"); err != nil {
		t.Fatal(err)
	}
	line, err := vm.WaitFor(pidLine, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(pidLine.FindStringSubmatch(line)[1])
	if _, err := vm.WaitFor(doneLine, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	stop()
	var r result
	select {
	case r = <-res:
	case <-time.After(2 * time.Minute):
		t.Fatal("the hit loop did not stop")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := c.ClearBreakpoint(Software, bp, 1); err != nil {
		t.Fatal(err)
	}
	// The pid: gpwork's task_struct holds pid and tgid side by side.
	for off := 0; off+8 <= len(r.task); off += 4 {
		if int(binary.LittleEndian.Uint32(r.task[off:])) == pid && int(binary.LittleEndian.Uint32(r.task[off+4:])) == pid {
			for i := range r.hits {
				if r.hits[i].comm == "gpwork" {
					r.hits[i].pid = pid
				}
			}
			t.Logf("gpwork pid %d at task_struct+%#x", pid, off)
			break
		}
	}
	return r.hits
}

// TestQEMUSMP: each vCPU is a thread; a step of one leaves the other where
// it is.
func TestQEMUSMP(t *testing.T) {
	t.Parallel()
	vm := bootLab(t, qemulab.Options{CPUs: 2})
	c := dialLab(t, vm)
	ths, err := c.Threads()
	if err != nil || len(ths) != 2 || ths[0].Num != 1 || ths[1].Num != 2 {
		t.Fatalf("threads %+v %v", ths, err)
	}
	rip := func(th Thread) uint64 {
		v, err := c.ReadReg(th, "rip")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	r1, r2 := rip(ths[0]), rip(ths[1])
	for i := 0; i < 3; i++ {
		if err := c.Step(ths[1]); err != nil {
			t.Fatal(err)
		}
		st, err := c.Wait(t.Context())
		if err != nil || st.Thread != ths[1] {
			t.Fatalf("step of vCPU 2: %+v %v", st, err)
		}
	}
	if got := rip(ths[0]); got != r1 {
		t.Errorf("vCPU 1 moved from %#x to %#x while vCPU 2 stepped", r1, got)
	}
	t.Logf("vCPU 1 at %#x; vCPU 2 stepped %#x -> %#x", r1, r2, rip(ths[1]))
	if err := c.Detach(); err != nil {
		t.Fatal(err)
	}
	if out, rc, err := vm.Run("echo alive", 30*time.Second); err != nil || rc != 0 || out != "alive\n" {
		t.Fatalf("after detach: %q %d %v", out, rc, err)
	}
}

// BenchmarkQEMU measures the raw stub: a request's round trip (m, g, p),
// a single step, and a breakpoint hit on getppid with "gpwork loop"
// running: continue until the stop, then step off.
func BenchmarkQEMU(b *testing.B) {
	vm := bootLab(b, qemulab.Options{})
	if err := vm.Start("gpwork loop 100 0"); err != nil {
		b.Fatal(err)
	}
	c := dialLab(b, vm)
	ctx := b.Context()
	banner := labSym(b, "linux_banner")
	var cur Thread // the stopped vCPU, without Hg
	buf := make([]byte, 4096)
	for _, n := range []int{8, 2048, 4096} {
		b.Run(fmt.Sprintf("m%d", n), func(b *testing.B) {
			for b.Loop() {
				if err := c.ReadMem(banner, buf[:n]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("g", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.ReadRegs(cur); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("p", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.ReadReg(cur, "rip"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("step", func(b *testing.B) {
		for b.Loop() {
			if err := c.Step(cur); err != nil {
				b.Fatal(err)
			}
			if _, err := c.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	bp := labSym(b, "__x64_sys_getppid")
	if err := c.SetBreakpoint(Software, bp, 1); err != nil {
		b.Fatal(err)
	}
	// hit: continue to the next getppid (back to back in gpwork's loop),
	// read the registers, step off with z0, vCont;s, Z0.
	b.Run("hit", func(b *testing.B) {
		var toStop, stepOff time.Duration
		for b.Loop() {
			t0 := time.Now()
			if err := c.Continue(nil, 0); err != nil {
				b.Fatal(err)
			}
			st, err := c.Wait(ctx)
			if err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if _, err := c.ReadRegs(cur); err != nil {
				b.Fatal(err)
			}
			t2 := time.Now()
			if err := c.ClearBreakpoint(Software, bp, 1); err != nil {
				b.Fatal(err)
			}
			if err := c.Step(st.Thread); err != nil {
				b.Fatal(err)
			}
			if _, err := c.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			if err := c.SetBreakpoint(Software, bp, 1); err != nil {
				b.Fatal(err)
			}
			toStop += t1.Sub(t0)
			stepOff += time.Since(t2)
		}
		b.ReportMetric(float64(toStop.Microseconds())/float64(b.N), "µs-to-stop/op")
		b.ReportMetric(float64(stepOff.Microseconds())/float64(b.N), "µs-step-off/op")
	})
	// hit-s: the same, stepping off with the breakpoint in (QEMU only).
	b.Run("hit-s", func(b *testing.B) {
		for b.Loop() {
			if err := c.Continue(nil, 0); err != nil {
				b.Fatal(err)
			}
			st, err := c.Wait(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.ReadRegs(cur); err != nil {
				b.Fatal(err)
			}
			if err := c.Step(st.Thread); err != nil {
				b.Fatal(err)
			}
			if _, err := c.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	// hit-skip: the same without a step: the first instruction of
	// __x64_sys_getppid is the 5-byte NOP ftrace leaves in place of its
	// fentry call, so "executing" it is rip += 5 (as an engine emulating
	// the displaced instruction would): no z0/Z0 and no step.
	var first [5]byte
	if err := c.ReadMem(bp, first[:]); err != nil {
		b.Fatal(err)
	}
	if first == [5]byte{0x0f, 0x1f, 0x44, 0x00, 0x00} {
		b.Run("hit-skip", func(b *testing.B) {
			var toStop []time.Duration
			for b.Loop() {
				t0 := time.Now()
				if err := c.Continue(nil, 0); err != nil {
					b.Fatal(err)
				}
				if _, err := c.Wait(ctx); err != nil {
					b.Fatal(err)
				}
				toStop = append(toStop, time.Since(t0))
				g, err := c.ReadRegs(cur)
				if err != nil {
					b.Fatal(err)
				}
				rip, _ := c.RegValue(g, "rip")
				if rip != bp {
					b.Fatalf("stopped at %#x", rip)
				}
				if err := c.WriteReg(cur, "rip", bp+5); err != nil {
					b.Fatal(err)
				}
			}
			slices.Sort(toStop)
			b.ReportMetric(float64(toStop[len(toStop)/2].Microseconds()), "µs-to-stop-p50")
			b.ReportMetric(float64(toStop[len(toStop)/10].Microseconds()), "µs-to-stop-p10")
		})
	} else {
		b.Logf("no hit-skip: __x64_sys_getppid starts with % x", first)
	}
	c.ClearBreakpoint(Software, bp, 1)
	c.Detach()
}
