package gdbremote

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gprobes/gprobes/internal/testkit"
)

// A QEMU 7.2-like stub: a stop reported unasked at connection, an empty
// reply to QStartNoAckMode, no target description.
func TestHandshakeQEMULike(t *testing.T) {
	s := newFakeStub(t)
	s.connectStop = "T02thread:01;"
	c, err := s.start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.NoAck() {
		t.Error("no-ack mode after an empty reply to QStartNoAckMode")
	}
	if c.ConnectStop() != "T02thread:01;" {
		t.Errorf("ConnectStop %q", c.ConnectStop())
	}
	if st := c.InitialStop(); st.Thread.ID != "p01.01" || st.Signal != 5 {
		t.Errorf("initial stop %+v", st)
	}
	if c.Features()["PacketSize"] != "1000" || c.PacketSize() != 0x1000 {
		t.Errorf("features %v", c.Features())
	}
	// Without target.xml: the amd64 layout, rip at 128, cr3 at 204.
	for name, off := range map[string]int{"rip": 128, "eflags": 136, "rflags": 136, "fs_base": 164, "gs_base": 172, "cr3": 204, "xmm0": 348} {
		if r, ok := c.Reg(name); !ok || r.Offset != off {
			t.Errorf("%s: %+v %v, want offset %d", name, r, ok, off)
		}
	}
	if len(c.Registers()) != 66 {
		t.Errorf("%d registers", len(c.Registers()))
	}
	want := []string{qSupportedRequest, "QStartNoAckMode", "vCont?", "?", "Hgp01.01"}
	if got := s.packets(); !slices.Equal(got, want) {
		t.Errorf("handshake packets\n got  %q\n want %q", got, want)
	}
	th, err := c.Threads()
	if err != nil || len(th) != 2 || th[1] != (Thread{ID: "p01.02", Pid: 1, Num: 2}) {
		t.Fatalf("threads %+v %v", th, err)
	}
	rip, err := c.ReadReg(th[0], "rip")
	if err != nil || rip != 0xffffffff81000010 {
		t.Fatalf("rip %#x %v", rip, err)
	}
	cr3, err := c.ReadReg(th[0], "cr3")
	if err != nil || cr3 != 0x1234000 {
		t.Fatalf("cr3 %#x %v", cr3, err)
	}
	// Hg only when the thread changes.
	c.ReadReg(th[1], "rip")
	c.ReadReg(th[1], "rip")
	if n := s.count("Hg"); n != 2 {
		t.Errorf("%d Hg packets, want 2 (handshake, thread 2)", n)
	}
	if err := c.Detach(); err != nil {
		t.Fatal(err)
	}
	if p := s.packets(); p[len(p)-1] != "D;1" {
		t.Errorf("detach sent %q, want D;1", p[len(p)-1])
	}
}

// gdbserver-like: no-ack mode accepted, a target description split across
// replies with an xi:include, run-length encoded replies.
func TestHandshakeTargetXML(t *testing.T) {
	s := newFakeStub(t)
	s.features = "PacketSize=100;QStartNoAckMode+;qXfer:features:read+;multiprocess+"
	s.acceptNoAck = true
	s.rle = true
	var regs strings.Builder
	for i, n := range []string{"rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip"} {
		fmt.Fprintf(&regs, `<reg name="%s" bitsize="64" type="int64"/>`, n)
		_ = i
	}
	s.targetXML = map[string]string{
		"target.xml": `<?xml version="1.0"?><!DOCTYPE target SYSTEM "gdb-target.dtd"><target><architecture>i386:x86-64</architecture>` +
			`<xi:include href="core.xml"/><feature name="extra"><reg name="orig_rax" bitsize="64" regnum="57"/><reg name="fs_base" bitsize="64"/></feature></target>`,
		"core.xml": `<?xml version="1.0"?><feature name="org.gnu.gdb.i386.core">` + regs.String() +
			`<reg name="eflags" bitsize="32" type="i386_eflags"/></feature>`,
	}
	c, err := s.start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !c.NoAck() {
		t.Error("acks still on")
	}
	if c.Arch() != "i386:x86-64" {
		t.Errorf("arch %q", c.Arch())
	}
	regsOut := c.Registers()
	if len(regsOut) != 20 {
		t.Fatalf("%d registers: %+v", len(regsOut), regsOut)
	}
	for name, want := range map[string]RegInfo{
		"rip":      {Name: "rip", Bitsize: 64, Regnum: 16, Offset: 128, Type: "int64", Feature: "org.gnu.gdb.i386.core"},
		"eflags":   {Name: "eflags", Bitsize: 32, Regnum: 17, Offset: 136, Type: "i386_eflags", Feature: "org.gnu.gdb.i386.core"},
		"orig_rax": {Name: "orig_rax", Bitsize: 64, Regnum: 57, Offset: 140, Feature: "extra"},
		"fs_base":  {Name: "fs_base", Bitsize: 64, Regnum: 58, Offset: 148, Feature: "extra"},
	} {
		if r, _ := c.Reg(name); r != want {
			t.Errorf("%s: %+v, want %+v", name, r, want)
		}
	}
	// The document took several qXfer packets (PacketSize 0x100).
	if n := s.count("qXfer:features:read:target.xml"); n < 2 {
		t.Errorf("target.xml read in %d packets", n)
	}
	// Runs: the g block has long runs of zeros, compressed by the stub.
	g, err := c.ReadRegs(Thread{})
	if err != nil || !bytes.Equal(g, s.regs[:]) {
		t.Fatalf("g through RLE: %v\n% x", err, g)
	}
}

// Ack mode: a reply with a bad checksum is NAKed and sent again; a packet
// the stub NAKs is sent again.
func TestAckRetransmit(t *testing.T) {
	s := newFakeStub(t)
	s.corrupt["qfThreadInfo"] = 1
	s.nak["m"] = 2
	s.mem[0x1000] = 0xaa
	c, err := s.start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	th, err := c.Threads()
	if err != nil || len(th) != 2 {
		t.Fatalf("threads after a corrupted reply: %v %v", th, err)
	}
	s.mu.Lock()
	naks := s.naks
	s.mu.Unlock()
	if naks != 1 {
		t.Errorf("stub received %d NAKs, want 1", naks)
	}
	var b [1]byte
	if err := c.ReadMem(0x1000, b[:]); err != nil || b[0] != 0xaa {
		t.Fatalf("read after 2 NAKs: %v %x", err, b)
	}
	s.nak["m"] = 10
	err = c.ReadMem(0x1000, b[:])
	if err == nil || !strings.Contains(err.Error(), "NAK") {
		t.Fatalf("read with the stub NAKing forever: %v", err)
	}
}

// Error replies, empty replies and the fallbacks they trigger.
func TestErrorsAndFallbacks(t *testing.T) {
	s := newFakeStub(t)
	s.noZ0, s.noP, s.noX = true, true, true
	s.override["Z1,ffffffff81234567,1"] = "E22"
	for a := uint64(0x2000); a < 0x2010; a++ {
		s.mem[a] = byte(a)
	}
	c, err := s.start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = c.SetBreakpoint(Software, 0xffffffff81234567, 1)
	if got, want := fmt.Sprint(err), `gdb packet "Z1,ffffffff81234567,1": E22: invalid argument`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	var pe *PacketError
	if !errors.As(err, &pe) || pe.Errno() != 22 || pe.Reply != "E22" {
		t.Errorf("PacketError %+v", pe)
	}
	// Z0 unsupported: Z1 from then on, for set and clear.
	if err := c.SetBreakpoint(Software, 0x1000, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.ClearBreakpoint(Software, 0x1000, 1); err != nil {
		t.Fatal(err)
	}
	if n0, n1 := s.count("Z0"), s.count("Z1"); n0 != 1 || n1 != 2 || s.count("z0") != 0 || s.count("z1") != 1 {
		t.Errorf("Z0 %d, Z1 %d, z0 %d, z1 %d: want Z0 asked once", n0, n1, s.count("z0"), s.count("z1"))
	}
	// No p: the g block; no P: G.
	th := Thread{ID: "p01.01"}
	if v, err := c.ReadReg(th, "rip"); err != nil || v != 0xffffffff81000010 {
		t.Fatalf("rip via g: %#x %v", v, err)
	}
	if err := c.WriteReg(th, "rip", 0xffffffff81000020); err != nil {
		t.Fatal(err)
	}
	if v, _ := c.ReadReg(th, "rip"); v != 0xffffffff81000020 {
		t.Fatalf("rip after G: %#x", v)
	}
	if s.count("p") != 1 || s.count("P") != 1 || s.count("G") != 1 {
		t.Errorf("p %d P %d G %d: unsupported packets asked more than once", s.count("p"), s.count("P"), s.count("G"))
	}
	if err := c.WriteReg(th, "eflags", 1<<40); err == nil {
		t.Error("a 41-bit value written to eflags")
	}
	if _, err := c.ReadReg(th, "xmm0"); err == nil {
		t.Error("xmm0 read as a uint64")
	}
	if _, err := c.ReadReg(th, "nosuch"); err == nil {
		t.Error("unknown register read")
	}
	// No X: M, and the data arrives.
	if err := c.WriteMem(0x2004, []byte{'#', '$', '}', '*'}); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteMem(0x2008, []byte{1, 2}); err != nil {
		t.Fatal(err)
	}
	if s.count("X") != 1 || s.count("M") != 2 {
		t.Errorf("X %d M %d", s.count("X"), s.count("M"))
	}
	var b [6]byte
	if err := c.ReadMem(0x2004, b[:]); err != nil || string(b[:]) != "#$}*\x01\x02" {
		t.Fatalf("read back %q %v", b, err)
	}
	// Console output before a reply: Monitor collects it.
	s.override["qRcmd,"+fmt.Sprintf("%x", "info status")] = "OK"
	s.beforeReply = map[string][]string{"qRcmd,": {"O564d2073", "O7461747573"}}
	if out, err := c.Monitor("info status"); err != nil || out != "VM status" {
		t.Errorf("monitor: %q %v", out, err)
	}
	// An unsupported packet through Exec.
	if _, err := c.Exec("qNothing"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("qNothing: %v", err)
	}
	if got := fmt.Sprint(func() error { _, err := c.Exec("qNothing"); return err }()); got != `gdb packet "qNothing": not supported by the stub (empty reply)` {
		t.Errorf("empty reply reads %q", got)
	}
}

// Memory reads are split across packets: by the packet size, at pages, and
// where a stub returns less than asked.
func TestMemorySplit(t *testing.T) {
	s := newFakeStub(t)
	s.features = "PacketSize=100;multiprocess+"
	s.mMax = 0x80
	for a := uint64(0x10000 - 0x300); a < 0x10000; a++ {
		s.mem[a] = byte(a * 7)
	}
	c, err := s.start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0x300)
	if err := c.ReadMem(0x10000-0x300, buf); err != nil {
		t.Fatal(err)
	}
	for i, b := range buf {
		if b != byte((0x10000-0x300+i)*7) {
			t.Fatalf("byte %d: %#x", i, b)
		}
	}
	if n := s.count("m"); n != 6 {
		t.Errorf("%d m packets for 0x300 bytes at 0x80 a packet, want 6", n)
	}
	// Across into an unmapped page: the error names the page.
	err = c.ReadMem(0x10000-0x10, make([]byte, 0x20))
	var me *MemError
	if !errors.As(err, &me) || me.Addr != 0x10000 || me.Done != 0x10 {
		t.Fatalf("read across the end: %v", err)
	}
	if want := "gdbremote: read memory at 0x10000 (16 of 32 bytes from 0xfff0 done): gdb packet \"m10000,10\": E14: bad address"; err.Error() != want {
		t.Errorf("got  %s\nwant %s", err, want)
	}
	// A stub answering with 5 bytes at a time.
	s.shortReads = true
	before := s.count("m")
	if err := c.ReadMem(0x10000-0x20, buf[:0x20]); err != nil {
		t.Fatal(err)
	}
	if n := s.count("m") - before; n != 7 {
		t.Errorf("%d packets for 32 bytes 5 at a time, want 7", n)
	}
	for i, b := range buf[:0x20] {
		if b != byte((0x10000-0x20+i)*7) {
			t.Fatalf("short reads: byte %d: %#x", i, b)
		}
	}
	// Writes split too, and stop at the first unwritable address.
	s.shortReads = false
	err = c.WriteMem(0x10000-0x100, make([]byte, 0x180))
	if !errors.As(err, &me) || me.Addr != 0x10000 || !me.Write {
		t.Fatalf("write across the end: %v", err)
	}
	if c.writeChunk() != 0x40 || c.readChunk() != 0x80 {
		t.Errorf("chunks: read %#x write %#x", c.readChunk(), c.writeChunk())
	}
}

// Binary reads (x) when the stub offers binary-upload.
func TestBinaryRead(t *testing.T) {
	s := newFakeStub(t)
	s.features = "PacketSize=1000;multiprocess+;binary-upload+"
	s.binaryUpload = true
	for a := uint64(0x3000); a < 0x3100; a++ {
		s.mem[a] = byte(a)
	}
	c, err := s.start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0x100)
	if err := c.ReadMem(0x3000, buf); err != nil {
		t.Fatal(err)
	}
	for i, b := range buf {
		if b != byte(i) {
			t.Fatalf("byte %d: %#x", i, b)
		}
	}
	if s.count("x") != 1 || s.count("m") != 0 {
		t.Errorf("x %d m %d", s.count("x"), s.count("m"))
	}
}

// Continue, Wait, Step, Interrupt; console output and notifications
// skipped; the exit; the connection dropping.
func TestRunAndWait(t *testing.T) {
	s := newFakeStub(t)
	s.beforeStop = []string{"O48656c6c6f0a", "%Stop:T05thread:p01.02;"}
	c, err := s.start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := c.Continue(nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadRegs(Thread{}); !errors.Is(err, ErrRunning) {
		t.Fatalf("ReadRegs while running: %v", err)
	}
	if err := c.Continue(nil, 0); !errors.Is(err, ErrRunning) {
		t.Fatalf("Continue while running: %v", err)
	}
	s.stopNow <- "T05thread:p01.02;"
	st, err := c.Wait(ctx)
	if err != nil || st.Thread.ID != "p01.02" || st.Signal != 5 {
		t.Fatalf("stop %+v %v", st, err)
	}
	// Step that thread: vCont;s:p01.02, the others stay stopped.
	if err := c.Step(st.Thread); err != nil {
		t.Fatal(err)
	}
	if st, err = c.Wait(ctx); err != nil || st.Thread.ID != "p01.02" {
		t.Fatalf("step stop %+v %v", st, err)
	}
	// Continue one thread with a signal; all with a signal.
	if err := c.Continue(&Thread{ID: "p01.01"}, 0); err != nil {
		t.Fatal(err)
	}
	s.stopNow <- "T05thread:p01.01;"
	c.Wait(ctx)
	if err := c.Continue(nil, 11); err != nil {
		t.Fatal(err)
	}
	// Interrupt from another goroutine, most likely while Wait blocks
	// (not a wait: the stop comes whichever is first)
	go func() {
		time.Sleep(20 * time.Millisecond)
		c.Interrupt()
	}()
	st, err = c.Wait(ctx)
	if err != nil || st.Signal != 2 {
		t.Fatalf("interrupted: %+v %v", st, err)
	}
	p := s.packets()
	var resumes []string
	for _, x := range p {
		if strings.HasPrefix(x, "vCont;") {
			resumes = append(resumes, x)
		}
	}
	want := []string{"vCont;c", "vCont;s:p01.02", "vCont;c:p01.01", "vCont;C0b:p01.01;c"}
	if !slices.Equal(resumes, want) {
		t.Errorf("resumes %q, want %q", resumes, want)
	}
	// Wait cut short by its context; the target is still running.
	if err := c.Continue(nil, 0); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err = c.Wait(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !c.Running() {
		t.Fatalf("short wait: %v running %v", err, c.Running())
	}
	// The guest powers off: W00, then the connection drops.
	s.stopNow <- "W00"
	st, err = c.Wait(ctx)
	if err != nil || !st.Exited || st.ExitCode != 0 {
		t.Fatalf("exit %+v %v", st, err)
	}
	s.conn.Close()
	<-s.done
	if _, err := c.Threads(); !errors.Is(err, ErrClosed) {
		t.Fatalf("after the close: %v", err)
	}
	if err := c.Continue(nil, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("continue after the close: %v", err)
	}
}

// The connection drops while Wait blocks.
func TestWaitClosed(t *testing.T) {
	s := newFakeStub(t)
	c, err := s.start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Continue(nil, 0); err != nil {
		t.Fatal(err)
	}
	go func() {
		// most likely while Wait blocks (not a wait: Wait on a closed
		// connection says so whichever is first)
		time.Sleep(20 * time.Millisecond)
		s.conn.Close()
	}()
	_, err = c.Wait(t.Context())
	if !errors.Is(err, ErrClosed) || c.Running() {
		t.Fatalf("Wait on a dropped connection: %v", err)
	}
	t.Log(err)
}

// A stub that stops answering: ErrTimeout, and the connection is closed.
func TestTimeout(t *testing.T) {
	s := newFakeStub(t)
	s.silent["qfThreadInfo"] = true
	c, err := s.start(Options{Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Threads()
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("silent stub: %v", err)
	}
	if _, err := c.ReadRegs(Thread{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after a timeout: %v", err)
	}
}

// A stub that closes the connection during the handshake.
func TestHandshakeClosed(t *testing.T) {
	s := newFakeStub(t)
	s.closeOnPkt = "vCont?"
	_, err := s.start(Options{})
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("handshake: %v", err)
	}
	t.Log(err)
}

// The legacy resume packets without vCont.
func TestNoVCont(t *testing.T) {
	s := newFakeStub(t)
	s.override["vCont?"] = ""
	c, err := s.start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Step(Thread{ID: "p01.02"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := c.Continue(nil, 0); err != nil {
		t.Fatal(err)
	}
	s.stopNow <- "S05"
	if st, err := c.Wait(t.Context()); err != nil || st.Signal != 5 {
		t.Fatalf("%+v %v", st, err)
	}
	p := s.packets()
	if i := slices.Index(p, "Hcp01.02"); i < 0 || p[i+1] != "s" || !slices.Contains(p, "c") {
		t.Errorf("packets %q", p)
	}
}

// An error reply to a resume comes back from Wait, naming the packet.
func TestResumeError(t *testing.T) {
	s := newFakeStub(t)
	s.resumeReply["vCont;s:p09.09"] = "E22"
	c, err := s.start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Step(Thread{ID: "p09.09"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Wait(t.Context())
	if got := fmt.Sprint(err); got != `gdb packet "vCont;s:p09.09": E22: invalid argument` {
		t.Fatalf("got %s", got)
	}
	if c.Running() {
		t.Error("running after an error reply")
	}
}

// A gdbsx-like stub (from Xen's tools/debugger/gdbsx sources): nothing in
// qSupported, acks, no vCont, no target description, vCPUs from 0, the
// thread list's end glued to it, no Z packets, a 164-byte g block.
func TestGdbsxLike(t *testing.T) {
	s := newFakeStub(t)
	s.override[qSupportedRequest] = ""
	s.override["vCont?"] = ""
	s.override["qfThreadInfo"] = "m0,1l"
	s.override["qsThreadInfo"] = ""
	s.noZ = true
	s.noP = true
	s.gLen = 164
	s.thread = "0"
	c, err := s.start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.NoAck() || c.PacketSize() != 400 || len(c.Features()) != 0 {
		t.Errorf("no-ack %v, packet size %d, features %v", c.NoAck(), c.PacketSize(), c.Features())
	}
	th, err := c.Threads()
	if err != nil || len(th) != 2 || th[0] != (Thread{ID: "0"}) || th[1] != (Thread{ID: "1", Num: 1}) {
		t.Fatalf("threads %+v %v", th, err)
	}
	if s.count("qsThreadInfo") != 0 {
		t.Error("asked for more threads after the end marker")
	}
	g, err := c.ReadRegs(th[0])
	if err != nil || len(g) != 164 {
		t.Fatalf("g: %d bytes, %v", len(g), err)
	}
	if v, err := c.ReadReg(th[0], "rip"); err != nil || v != 0xffffffff81000010 {
		t.Errorf("rip %#x %v", v, err)
	}
	if _, err := c.RegValue(g, "cr3"); err == nil {
		t.Error("cr3 read from a block that ends at gs")
	}
	if err := c.WriteReg(th[0], "rip", 0xffffffff81000000); err != nil {
		t.Fatal(err)
	}
	err = c.SetBreakpoint(Software, 0xffffffff81000000, 1)
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("breakpoint on a stub without Z: %v", err)
	}
	t.Log(err)
	if err := c.Step(th[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	p := s.packets()
	if i := slices.Index(p, "Hc1"); i < 0 || p[i+1] != "s" {
		t.Errorf("step of vCPU 1: %q", p)
	}
}

// An Interrupt that comes while the resume packet is still on its way (in
// ack mode, before its ack) is held and sent after it: QEMU would ignore a
// 0x03 that reaches it while the VM is stopped.
func TestInterruptDuringResume(t *testing.T) {
	s := newFakeStub(t)
	gate := make(chan struct{})
	s.ackGate = gate // no ack until the interrupt is in
	c, err := s.start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Continue(nil, 0) }()
	testkit.WaitTrue(t, time.Minute, "the resume to be on its way", c.Running)
	if err := c.Interrupt(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("the resume ended before its ack: %v", err)
	default:
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	st, err := c.Wait(wctx)
	if err != nil || st.Signal != 2 {
		t.Fatalf("stop after an interrupt during the resume: %+v %v", st, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.intr != 1 {
		t.Errorf("stub got %d interrupts", s.intr)
	}
}

// A stub that drops the first connection during the handshake (QEMU does
// while it has not yet seen the previous client go) is dialled again.
func TestDialRetriesDroppedHandshake(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := newFakeStub(t)
	var accepted atomic.Int32
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			if accepted.Add(1) == 1 {
				nc.Close() // busy: dropped unanswered
				continue
			}
			s.conn = nc
			go s.serve()
			t.Cleanup(func() { nc.Close(); <-s.done })
			return
		}
	}()
	c, err := Dial(t.Context(), ln.Addr().String(), Options{Timeout: 5 * time.Second, Log: traceTo(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := accepted.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
	if _, err := c.Threads(); err != nil {
		t.Error(err)
	}
}

// A stub that keeps dropping the handshake gives a clear error in the end.
func TestDialGivesUpOnDroppedHandshakes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			nc.Close()
		}
	}()
	_, err = Dial(t.Context(), ln.Addr().String(), Options{Timeout: 5 * time.Second})
	if !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Fatalf("got %v", err)
	}
}

// gdbsx ignores ^C, and reads the 0x03 where it waits for the ack of its
// next stop reply: it sends that reply again. The copy is dropped, and the
// requests after the stop get their own replies.
func TestStopReplySentAgainAfterIgnoredInterrupt(t *testing.T) {
	s := newFakeStub(t)
	s.ignoreIntr = true
	s.mem[0x1000] = 0xab
	c, err := s.start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := stopAfterIgnoredInterrupt(t, s, c, "T05thread:p01.01;") // a breakpoint, later
	if st.Signal != 5 {
		t.Fatalf("stop: %+v", st)
	}
	regs, err := c.ReadRegs(st.Thread)
	if err != nil || len(regs) != 608 || binary.LittleEndian.Uint64(regs[128:]) != 0xffffffff81000010 {
		t.Fatalf("registers after the stop: %d bytes %v", len(regs), err)
	}
	b := make([]byte, 1)
	if err := c.ReadMem(0x1000, b); err != nil || b[0] != 0xab {
		t.Fatalf("memory after the stop: %x %v", b, err)
	}
}

// The same copy, when the stop is followed by a resume and no request:
// the copy is still to come (or queued) when the resume goes out, and must
// not be taken for the stop of that resume. It was: the engine resumed a
// gdbsx guest at once after a kick's stop, its Wait returned the copy, and
// its next resume found the stub deaf (it waited for the domain to pause).
func TestStopReplySentAgainThenResume(t *testing.T) {
	s := newFakeStub(t)
	s.ignoreIntr = true
	c, err := s.start(Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	st := stopAfterIgnoredInterrupt(t, s, c, "T02thread:p01.01;") // the domain paused (xl pause)
	if st.Signal != 2 {
		t.Fatalf("stop: %+v", st)
	}
	if err := c.Continue(nil, 0); err != nil {
		t.Fatalf("resume after the stop: %v", err)
	}
	testkit.Wait(t, time.Minute, "the stub to run again", func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.running, fmt.Sprintf("packets %q", s.got)
	})
	s.stopNow <- "T05thread:p01.02;" // a breakpoint on the other vCPU
	wctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	st, err = c.Wait(wctx)
	if err != nil || st.Signal != 5 || st.Thread.ID != "p01.02" {
		t.Fatalf("the stop of the second resume: %+v %v (packets %q)", st, err, s.packets())
	}
}

// stopAfterIgnoredInterrupt runs the target, sends a ^C the stub (ignoreIntr)
// leaves unread, then has the stub stop with reply, and returns that stop.
func stopAfterIgnoredInterrupt(t *testing.T, s *fakeStub, c *Conn, reply string) Stop {
	t.Helper()
	if err := c.Continue(nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Interrupt(); err != nil {
		t.Fatal(err)
	}
	testkit.Wait(t, time.Minute, "the stub to read the 0x03", func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.intr == 1, fmt.Sprintf("%d interrupts read", s.intr)
	})
	s.stopNow <- reply
	wctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	st, err := c.Wait(wctx)
	if err != nil {
		t.Fatalf("stop: %+v %v", st, err)
	}
	return st
}

// gdbsx answers D by closing the connection: that is a detach.
func TestDetachAnsweredByClose(t *testing.T) {
	s := newFakeStub(t)
	s.acceptNoAck = false
	s.closeOnPkt = "D"
	s.features = "PacketSize=1000"
	s.thread, s.threads = "0", []string{"0"} // no multiprocess: a bare D
	c, err := s.start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Detach(); err != nil {
		t.Fatalf("detach: %v", err)
	}
	if s.count("D") != 1 {
		t.Errorf("packets: %q", s.packets())
	}
	if err := c.Detach(); err == nil {
		t.Error("a second detach on the closed connection succeeded")
	}
}
