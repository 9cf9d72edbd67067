package gdbremote

import (
	"bufio"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/testkit"
)

// fixtureC is the program gdbserver runs: target_fn is called 3 times with
// 1, 2, 3, then main returns 7. With an argument it first spins until spin
// is 0.
const fixtureC = `
volatile long counter;
long data[4] = {0x1111111111111111, 0x2222222222222222, 0x3333333333333333, 0x4444444444444444};
__attribute__((noinline)) long target_fn(long x) { counter += x; return counter; }
volatile int spin = 1;
int main(int argc, char **argv) {
	if (argc > 1)
		while (spin)
			;
	for (long i = 1; i <= 3; i++)
		target_fn(i);
	return 7;
}
`

// needGdbserver skips without gdbserver or gcc, unless CI=true. As root
// with CI=true or GPROBES_LAB_INSTALL=1 it installs them first, as the QEMU
// lab does its packages.
func needGdbserver(t testing.TB) {
	t.Helper()
	installOnce.Do(func() {
		if os.Geteuid() != 0 || (os.Getenv("CI") != "true" && os.Getenv("GPROBES_LAB_INSTALL") != "1") {
			return
		}
		if _, err := exec.LookPath("gdbserver"); err == nil {
			return
		}
		out, err := exec.Command("apt-get", "install", "-y", "--no-install-recommends", "gdbserver", "gcc", "libc6-dev").CombinedOutput()
		if err != nil {
			t.Logf("apt-get install gdbserver: %v\n%s", err, out)
		}
	})
	testkit.Need(t, "gdbserver", "gcc")
}

var installOnce sync.Once

// buildFixture compiles fixtureC (non-PIE, so nm addresses are run-time
// addresses) and returns its path and symbols.
func buildFixture(t testing.TB) (string, map[string]uint64) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "prog.c")
	if err := os.WriteFile(src, []byte(fixtureC), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := testkit.CC(t, "prog", "-O1", "-fno-pie", "-no-pie", src)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]uint64{}
	for _, s := range syms {
		m[s.Name] = s.Value
	}
	for _, n := range []string{"target_fn", "data", "counter", "main", "spin"} {
		if m[n] == 0 {
			t.Fatalf("no symbol %s in %s", n, bin)
		}
	}
	return bin, m
}

var listenRe = regexp.MustCompile(`Listening on port (\d+)`)

// startGdbserver runs "gdbserver 127.0.0.1:0 prog" and returns its address.
func startGdbserver(t testing.TB, prog string, progArgs ...string) (string, *exec.Cmd) {
	t.Helper()
	args := append([]string{"127.0.0.1:0", prog}, progArgs...)
	if os.Getenv("GDBREMOTE_TRACE") == "1" {
		args = append([]string{"--debug"}, args...)
	}
	cmd := exec.Command("gdbserver", args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		if cmd.ProcessState == nil {
			cmd.Wait()
		}
	})
	sc := bufio.NewScanner(stderr)
	port := make(chan string, 1)
	go func() {
		for sc.Scan() {
			if os.Getenv("GDBREMOTE_TRACE") == "1" {
				t.Log("gdbserver: " + sc.Text())
			}
			if m := listenRe.FindStringSubmatch(sc.Text()); m != nil {
				port <- m[1]
			}
		}
		close(port)
	}()
	select {
	case p, ok := <-port:
		if !ok {
			t.Fatal("gdbserver ended before listening")
		}
		return "127.0.0.1:" + p, cmd
	case <-time.After(30 * time.Second):
		t.Fatal("gdbserver did not listen in 30s")
	}
	return "", nil
}

func TestGdbserver(t *testing.T) {
	needGdbserver(t)
	prog, syms := buildFixture(t)
	addr, _ := startGdbserver(t, prog)
	ctx := t.Context()
	c, err := Dial(ctx, addr, Options{Timeout: 20 * time.Second, Log: traceTo(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Logf("features %v, no-ack %v, arch %s, %d registers, initial stop %q",
		c.Features(), c.NoAck(), c.Arch(), len(c.Registers()), c.InitialStop().Raw)
	if !c.NoAck() {
		t.Error("gdbserver accepts QStartNoAckMode, the connection kept acks")
	}
	if c.Arch() != "i386:x86-64" {
		t.Errorf("arch %q", c.Arch())
	}
	for _, n := range []string{"rip", "rsp", "eflags", "fs_base", "orig_rax"} {
		if _, ok := c.Reg(n); !ok {
			t.Errorf("layout has no %s", n)
		}
	}
	init := c.InitialStop()
	if init.Thread.Pid == 0 || init.Thread.Num == 0 || init.Signal != 5 {
		t.Fatalf("initial stop %+v: want SIGTRAP with a p<pid>.<tid> thread", init)
	}
	th := init.Thread

	threads, err := c.Threads()
	if err != nil || len(threads) != 1 || threads[0] != th {
		t.Fatalf("threads %v %v, want [%v]", threads, err, th)
	}

	// Registers: g and p agree.
	g, err := c.ReadRegs(th)
	if err != nil {
		t.Fatal(err)
	}
	rip, err := c.ReadReg(th, "rip")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := c.RegValue(g, "rip"); v != rip || rip == 0 {
		t.Fatalf("rip: g says %#x, p says %#x", v, rip)
	}
	rsp, _ := c.ReadReg(th, "rsp")
	t.Logf("at entry: rip %#x rsp %#x, g block %d bytes", rip, rsp, len(g))

	// Memory: read data[], write it, read it back.
	var buf [32]byte
	if err := c.ReadMem(syms["data"], buf[:]); err != nil {
		t.Fatal(err)
	}
	if v := binary.LittleEndian.Uint64(buf[8:]); v != 0x2222222222222222 {
		t.Fatalf("data[1] = %#x", v)
	}
	// Bytes that need escaping in binary writes: # $ } * and 0x03.
	want := []byte{'#', '$', '}', '*', 0x03, 0, 0xff, 'x'}
	if err := c.WriteMem(syms["data"]+8, want); err != nil {
		t.Fatal(err)
	}
	if err := c.ReadMem(syms["data"], buf[:]); err != nil {
		t.Fatal(err)
	}
	if string(buf[8:16]) != string(want) {
		t.Fatalf("after write: % x, want % x", buf[8:16], want)
	}
	// An unmapped address fails with a MemError naming it.
	err = c.ReadMem(0x10, buf[:4])
	var me *MemError
	if !errors.As(err, &me) || me.Addr != 0x10 {
		t.Fatalf("read at 0x10: %v", err)
	}
	t.Logf("read at 0x10: %v", err)

	// Register write: rax, read back.
	old, _ := c.ReadReg(th, "rax")
	if err := c.WriteReg(th, "rax", 0x1234567890); err != nil {
		t.Fatal(err)
	}
	if v, _ := c.ReadReg(th, "rax"); v != 0x1234567890 {
		t.Fatalf("rax after write %#x", v)
	}
	c.WriteReg(th, "rax", old)

	// A breakpoint at target_fn, hit three times with rdi = 1, 2, 3.
	fn := syms["target_fn"]
	if err := c.SetBreakpoint(Software, fn, 1); err != nil {
		t.Fatal(err)
	}
	resume := func(what string, step bool, wantRIP, wantRDI uint64) Stop {
		t.Helper()
		var err error
		if step {
			err = c.Step(th)
		} else {
			err = c.Continue(nil, 0)
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		st, err := c.Wait(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if st.Exited || st.Signal != 5 || st.Thread != th {
			t.Fatalf("%s: stop %+v, want SIGTRAP in %v", what, st, th)
		}
		g, err := c.ReadRegs(st.Thread)
		if err != nil {
			t.Fatal(err)
		}
		rip, _ := c.RegValue(g, "rip")
		rdi, _ := c.RegValue(g, "rdi")
		ripOK := rip == wantRIP
		if wantRIP == 0 { // a step off the breakpoint: the next instruction
			ripOK = rip > fn && rip <= fn+15
		}
		if !ripOK || (wantRDI != 0 && rdi != wantRDI) {
			t.Fatalf("%s: %s: rip %#x rdi %d, want %#x %d", what, st.Raw, rip, rdi, wantRIP, wantRDI)
		}
		// gdbserver expedites rbp, rsp and rip (regnums 6, 7, 0x10).
		if st.Regs[16] != rip {
			t.Errorf("%s: expedited rip %#x, g says %#x", what, st.Regs[16], rip)
		}
		t.Logf("%s: %s", what, st.Raw)
		return st
	}
	stepOff := func(i int) {
		t.Helper()
		if err := c.ClearBreakpoint(Software, fn, 1); err != nil {
			t.Fatal(err)
		}
		st := resume(fmt.Sprintf("hit %d: step off", i), true, 0, 0)
		if st.Reason != "" {
			t.Errorf("a step reported as %q", st.Reason)
		}
		if err := c.SetBreakpoint(Software, fn, 1); err != nil {
			t.Fatal(err)
		}
	}
	st := resume("hit 1", false, fn, 1)
	if st.Reason != "swbreak" {
		t.Errorf("hit 1: reason %q, want swbreak", st.Reason)
	}
	// A step with the breakpoint in place traps again, in place: gdbserver
	// steps over its own breakpoints, not the client's ("found GDB
	// breakpoint ... skipping step over").
	resume("hit 1: step with the breakpoint in", true, fn, 1)
	stepOff(1)
	resume("hit 2", false, fn, 2)
	// So does a continue.
	resume("hit 2: continue with the breakpoint in", false, fn, 2)
	stepOff(2)
	resume("hit 3", false, fn, 3)
	if err := c.ClearBreakpoint(Software, fn, 1); err != nil {
		t.Fatal(err)
	}
	var cnt [8]byte
	if err := c.ReadMem(syms["counter"], cnt[:]); err != nil {
		t.Fatal(err)
	}
	if v := binary.LittleEndian.Uint64(cnt[:]); v != 3 {
		t.Fatalf("counter %d after two full calls, want 3", v)
	}

	// Run to the end: W07.
	if err := c.Continue(nil, 0); err != nil {
		t.Fatal(err)
	}
	st, err = c.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Exited || st.ExitCode != 7 || st.Thread.Pid != th.Pid {
		t.Fatalf("exit: %+v", st)
	}
	t.Logf("exit: %s", st.Raw)
	// gdbserver stays connected with no process: requests fail.
	_, err = c.Threads()
	var pe *PacketError
	if !errors.As(err, &pe) || pe.Errno() != 1 {
		t.Fatalf("after the exit: %v, want E01", err)
	}
	t.Logf("after the exit: %v", err)
	if err := c.Continue(nil, 0); err != nil {
		t.Fatal(err)
	}
	_, err = c.Wait(ctx)
	t.Logf("continue after the exit: %v", err)
	if !errors.As(err, &pe) {
		t.Fatalf("continue after the exit: %v, want a PacketError", err)
	}
}

// TestGdbserverInterrupt interrupts a spinning process from another
// goroutine while Wait blocks, then detaches and lets it finish.
func TestGdbserverInterrupt(t *testing.T) {
	needGdbserver(t)
	prog, syms := buildFixture(t)
	addr, cmd := startGdbserver(t, prog, "spin")
	ctx := t.Context()
	c, err := Dial(ctx, addr, Options{Timeout: 20 * time.Second, Log: traceTo(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Interrupt(); err != nil { // stopped: nothing to do
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Wait while stopped: %v", err)
	}
	if err := c.Continue(nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Threads(); !errors.Is(err, ErrRunning) {
		t.Fatalf("a request while running: %v, want ErrRunning", err)
	}
	// Wait with a context that ends: the target keeps running.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = c.Wait(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !c.Running() {
		t.Fatalf("Wait cut short: %v, running %v", err, c.Running())
	}
	go func() {
		// most likely while Wait blocks (not a wait: the stop comes
		// whichever is first)
		time.Sleep(100 * time.Millisecond)
		if err := c.Interrupt(); err != nil {
			t.Error(err)
		}
	}()
	st, err := c.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Signal != 2 || st.Exited {
		t.Fatalf("stop after interrupt: %+v", st)
	}
	rip, _ := c.ReadReg(st.Thread, "rip")
	t.Logf("interrupted: %s at %#x", st.Raw, rip)
	if rip < syms["main"] || rip > syms["main"]+0x40 {
		t.Errorf("rip %#x not in main (%#x)", rip, syms["main"])
	}
	// A 0x03 that reaches gdbserver while the process is stopped is not
	// lost: it becomes a SIGINT stop at the next resume. (It reaches it
	// before the resume: one stream, read in order.)
	c.writeRaw([]byte{0x03})
	if err := c.Continue(nil, 0); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	st, err = c.Wait(wctx)
	cancel()
	if err != nil || st.Signal != 2 {
		t.Fatalf("continue after a 0x03 sent while stopped: %+v %v, want a SIGINT stop", st, err)
	}
	t.Logf("continue after a 0x03 sent while stopped: %s", st.Raw)
	// Let it finish on its own: spin = 0, detach.
	if err := c.WriteMem(syms["spin"], []byte{0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if err := c.Detach(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Logf("gdbserver after detach: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("gdbserver still running 30 s after the detach")
	}
}

// BenchmarkGdbserver measures the same round trips against gdbserver, for
// comparison with QEMU's.
func BenchmarkGdbserver(b *testing.B) {
	needGdbserver(b)
	prog, syms := buildFixture(b)
	addr, _ := startGdbserver(b, prog, "spin")
	c, err := Dial(b.Context(), addr, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 8)
	b.Run("m8", func(b *testing.B) {
		for b.Loop() {
			if err := c.ReadMem(syms["data"], buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("g", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.ReadRegs(Thread{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("step", func(b *testing.B) {
		for b.Loop() {
			if err := c.Step(Thread{}); err != nil {
				b.Fatal(err)
			}
			if _, err := c.Wait(b.Context()); err != nil {
				b.Fatal(err)
			}
		}
	})
}
