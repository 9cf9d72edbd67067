// Package gdbtarget is the engine's target for a guest kernel seen through
// a GDB remote stub: QEMU/KVM's -gdb, Xen's gdbsx, or anything else that
// speaks the protocol. The whole guest is one address space; each vCPU is a
// thread.
//
// Design note. Stubs run all-stop: a stop of one vCPU stops them all, and
// resuming resumes them all. Breakpoints are the stub's (Z0, Z1 when Z0 is
// refused): under TCG they live in the translator, not in guest memory, and
// a vCPU stops before the instruction (TrapPC is rip). There is no room in
// a guest kernel for out-of-line slots, so a displaced instruction is
// emulated when the engine can, and otherwise stepped in place with the
// breakpoint out, which no other vCPU can race because all are stopped.
// Linux awareness (the KASLR slide, the current task, the user-mode
// registers) comes from the symbols and types given with --symbols:
// System.map or a kallsyms copy for addresses, a vmlinux's BTF (or DWARF)
// for struct layouts.
//
// The trap: the engine must be the only user of the connection, and the
// guest stays stopped from Open until the engine's Go.
package gdbtarget

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/gdbremote"
	"github.com/gprobes/gprobes/linuxkernel"
	"github.com/gprobes/gprobes/rpn"
)

// Options configure a guest target.
type Options struct {
	linuxkernel.Options
	// Timeout for one request to the stub.
	Timeout time.Duration
}

// Target is a guest kernel behind a GDB stub.
type Target struct {
	addr    string
	conn    *gdbremote.Conn
	opts    Options
	kern    *linuxkernel.Kernel
	os      *linuxkernel.Guest
	threads []gdbremote.Thread
	byNum   map[int]gdbremote.Thread // engine tid -> the stub's thread
	// tidBase is added to the stub's thread numbers to make the
	// engine's tids, which are never 0 (0 is "no thread": a kick that
	// stopped none). QEMU numbers its vCPUs from 1 (base 0); gdbsx from
	// 0 (base 1: vCPU 0 is tid 1, as on the native Xen target).
	tidBase int
	running bool
	gone    bool
	regs    map[int][]byte // last g block read per vCPU
	mu      sync.Mutex     // guards running for Kick
	kicked  bool
	detach  bool
	// memBP holds the breakpoints planted as int3 in guest memory, for a
	// stub that has neither Z0 nor Z1 (gdbsx); a vCPU stops past them.
	memBP map[uint64]bool
	// owner is the engine's record of what is ours, taken-out int3s
	// included (a vCPU may have stopped past one)
	owner engine.Owner
	noZ   bool
	io    bool // the stub's monitor is QEMU's: port IO through it
	// the stub's watchpoints by debug register, and the address of the
	// watchpoint each vCPU's last stop named (watch.go)
	watch     [engine.NumWatch]*engine.Watch
	watchStop map[int]watchStopOf
}

var (
	_ engine.Target     = (*Target)(nil)
	_ engine.Dumper     = (*Target)(nil)
	_ engine.OwnerAware = (*Target)(nil)
	_ engine.Handover   = (*Target)(nil)
	_ engine.PortIO     = (*Target)(nil)

	_ engine.BreakpointForgetter = (*Target)(nil)
)

// Open returns an opener for engine.Start that connects to a stub at
// host:port; the guest is stopped (held) when it returns.
func Open(addr string, opts Options) func() (engine.Target, error) {
	return func() (engine.Target, error) {
		if opts.Timeout == 0 {
			opts.Timeout = 30 * time.Second
		}
		ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
		defer cancel()
		gopts := gdbremote.Options{Timeout: opts.Timeout}
		if os.Getenv("GPROBES_GDB_TRACE") != "" {
			gopts.Log = os.Stderr // every packet, for support
		}
		conn, err := gdbremote.Dial(ctx, addr, gopts)
		if err != nil {
			return nil, fmt.Errorf("gdb:%s: %w", addr, err)
		}
		t := &Target{addr: addr, conn: conn, opts: opts, byNum: map[int]gdbremote.Thread{}, regs: map[int][]byte{}, watchStop: map[int]watchStopOf{}}
		if err := t.setup(); err != nil {
			conn.Close()
			return nil, fmt.Errorf("gdb:%s: %w", addr, err)
		}
		return t, nil
	}
}

// setup stops the guest, learns its vCPUs, loads the symbols and finds the
// KASLR slide.
func (t *Target) setup() error {
	if err := t.stopGuest(); err != nil {
		return err
	}
	ths, err := t.conn.Threads()
	if err != nil {
		return err
	}
	t.threads = ths
	for _, th := range ths {
		if th.Num <= 0 {
			t.tidBase = 1
		}
	}
	for _, th := range ths {
		t.byNum[t.tidOf(th)] = th
	}
	t.kern, err = linuxkernel.New(memory{t}, t.opts.Options)
	// the stub writes anywhere; the guest's page tables say more, but
	// reading them is beyond a probe's vfy_rw: readable kernel memory is
	// taken as writable (WritableAt nil)
	t.os = &linuxkernel.Guest{K: t.kern, Target: "gdb:", NoIO: "a GDB stub gives no access to the guest's IO space", VCPU: t.ThreadIndex}
	if err == nil && t.qemuMonitor() {
		t.io = true
		t.os.NoIO = ""
	}
	return err
}

// qemuMonitor reports whether the stub passes monitor commands to QEMU's
// HMP (which has the port IO commands i and o).
func (t *Target) qemuMonitor() bool {
	out, err := t.monitor("info version")
	if err != nil {
		return false
	}
	v := strings.TrimSpace(out)
	return v != "" && v[0] >= '0' && v[0] <= '9' // "7.2.22 (Debian ...)"
}

// PortIO reads or writes a port of the guest's IO space through QEMU's
// monitor: HMP's "i /FMT PORT" and "o /FMT PORT VALUE", as the vCPU
// would (the device models see the access; nothing else of the guest
// runs meanwhile: it is stopped at the hit).
func (t *Target) PortIO(port uint64, size uint8, write bool, v uint64) (uint64, error) {
	if !t.io {
		return 0, errors.New("no IO space through this stub")
	}
	f := map[uint8]string{1: "b", 2: "w", 4: "l"}[size]
	if f == "" || port > 0xffff {
		return 0, fmt.Errorf("port IO of size %d at %#x", size, port)
	}
	if write {
		out, err := t.monitor(fmt.Sprintf("o /%s %#x %#x", f, port, v))
		if err == nil && strings.TrimSpace(out) != "" {
			err = fmt.Errorf("o: %s", strings.TrimSpace(out))
		}
		return 0, err
	}
	out, err := t.monitor(fmt.Sprintf("i /%s %#x", f, port))
	if err != nil {
		return 0, err
	}
	// "portb[0x03ff] = 0x5a"
	_, val, ok := strings.Cut(out, "= ")
	if !ok {
		return 0, fmt.Errorf("i: %q", strings.TrimSpace(out))
	}
	return strconv.ParseUint(strings.TrimSpace(val), 0, 32)
}

// memory reads guest memory for the kernel awareness.
type memory struct{ t *Target }

func (m memory) ReadMem(addr uint64, p []byte) error  { return m.t.conn.ReadMem(addr, p) }
func (m memory) WriteMem(addr uint64, p []byte) error { return m.t.conn.WriteMem(addr, p) }

// stopGuest makes sure the guest is stopped: a stub stops it on connect
// (QEMU) or not (gdbsx on a running domain).
func (t *Target) stopGuest() error {
	if !t.conn.Running() {
		return nil // stopped by the connection (QEMU) already
	}
	if err := t.conn.Interrupt(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.opts.Timeout)
	defer cancel()
	_, err := t.conn.Wait(ctx)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

func (t *Target) thread(tid int) (gdbremote.Thread, error) {
	th, ok := t.byNum[tid]
	if !ok {
		return gdbremote.Thread{}, fmt.Errorf("vCPU %d: no such thread", tid)
	}
	return th, nil
}

func (t *Target) Wait() (engine.Event, error) {
	if t.gone {
		return engine.Event{}, engine.ErrNoTracees
	}
	st, err := t.conn.Wait(context.Background())
	t.mu.Lock()
	t.running = false
	kicked := t.kicked
	t.kicked = false
	t.mu.Unlock()
	if err != nil || st.Exited {
		t.gone = true
		how := "the guest powered off"
		if err != nil && !st.Exited {
			how = "the stub closed the connection: " + err.Error()
		}
		return engine.Event{Kind: engine.EvSpaceExit, Space: 0, Tid: t.firstTid(), Exit: how, Code: st.ExitCode}, nil
	}
	if st.Thread.ID == "" && len(t.threads) > 0 {
		// a stop reply that names no thread (S05): the first vCPU
		st.Thread = t.threads[0]
	}
	tid := t.tidOf(st.Thread)
	if _, ok := t.byNum[tid]; !ok {
		// a vCPU we have not listed (hotplug): learn it
		t.byNum[tid] = st.Thread
		t.threads = append(t.threads, st.Thread)
	}
	if kicked && t.noZ && t.pastMemBP(st.Thread) && st.Signal == gdbremote.SigTrap {
		// gdbsx ignores ^C: this stop is a hit of an int3 of ours, and
		// the vCPU is past it; the engine must take it as a trap. (The
		// register read comes first on purpose: gdbsx read our ^C where
		// it waited for the ack of this stop reply and sent the reply
		// again; a request absorbs the copy before anything resumes.)
		kicked = false
	}
	clear(t.watchStop)
	if isWatchStop(st) {
		// the access has happened: a trap even when a ^C crossed it
		// (the stub ignores a ^C that comes when it has stopped)
		t.watchStop[tid] = watchStopOf{reason: st.Reason, addr: st.Addr}
		return engine.Event{Kind: engine.EvTrap, Tid: tid}, nil
	}
	switch {
	case st.Signal == gdbremote.SigTrap && !kicked:
		return engine.Event{Kind: engine.EvTrap, Tid: tid}, nil
	case st.Signal == gdbremote.SigTrap || st.Signal == gdbremote.SigInt || kicked:
		return engine.Event{Kind: engine.EvKick, Tid: tid}, nil
	}
	return engine.Event{Kind: engine.EvKick, Tid: tid}, nil
}

// pastMemBP reports whether a stopped vCPU's rip is just past an int3 that
// gprobes wrote (or took out since).
func (t *Target) pastMemBP(th gdbremote.Thread) bool {
	block, err := t.conn.ReadRegs(th)
	if err != nil {
		return false
	}
	rip, err := t.conn.RegValue(block, "rip")
	return err == nil && (t.memBP[rip-1] || t.ours(rip-1))
}

func (t *Target) firstTid() int {
	if len(t.threads) > 0 {
		return t.tidOf(t.threads[0])
	}
	return 1
}

// tidOf is the engine's tid of one of the stub's threads.
func (t *Target) tidOf(th gdbremote.Thread) int { return th.Num + t.tidBase }

// Kick interrupts the running guest (from any goroutine).
func (t *Target) Kick() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.running || t.gone {
		return false
	}
	t.kicked = true
	return t.conn.Interrupt() == nil
}

func (t *Target) ReadMem(space int, addr uint64, p []byte) error  { return t.conn.ReadMem(addr, p) }
func (t *Target) WriteMem(space int, addr uint64, p []byte) error { return t.conn.WriteMem(addr, p) }

// GetRegs reads a vCPU's registers with one g packet.
func (t *Target) GetRegs(tid int, r *engine.Regs) error {
	th, err := t.thread(tid)
	if err != nil {
		return err
	}
	block, err := t.conn.ReadRegs(th)
	if err != nil {
		return err
	}
	t.regs[tid] = block
	*r = engine.Regs{}
	for i := rpn.Reg(0); i < rpn.NumRegs; i++ {
		if v, err := t.conn.RegValue(block, stubName(i)); err == nil {
			r[i] = v
		}
	}
	return nil
}

// stubName is the name a stub's target description gives a register.
func stubName(r rpn.Reg) string {
	switch r {
	case rpn.RegRFLAGS:
		return "eflags"
	}
	return r.String()
}

// SetRegs writes the registers that changed since GetRegs: one P packet
// each (rip alone, after most emulated instructions), or the whole block
// with G when several changed.
func (t *Target) SetRegs(tid int, r *engine.Regs) error {
	th, err := t.thread(tid)
	if err != nil {
		return err
	}
	block := t.regs[tid]
	if block == nil {
		var cur engine.Regs
		if err := t.GetRegs(tid, &cur); err != nil {
			return err
		}
		block = t.regs[tid]
	}
	var changed []rpn.Reg
	for i := rpn.Reg(0); i <= rpn.RegRFLAGS; i++ {
		old, err := t.conn.RegValue(block, stubName(i))
		if err == nil && old != r[i] {
			changed = append(changed, i)
		}
	}
	for _, i := range []rpn.Reg{rpn.RegFSBase, rpn.RegGSBase} {
		if old, err := t.conn.RegValue(block, stubName(i)); err == nil && old != r[i] {
			changed = append(changed, i)
		}
	}
	switch {
	case len(changed) == 0:
		return nil
	case len(changed) <= 2:
		for _, i := range changed {
			if err := t.conn.WriteReg(th, stubName(i), r[i]); err != nil {
				return err
			}
			// the stub has it: the cached block must say so too
			if err := t.conn.SetRegValue(block, stubName(i), r[i]); err != nil {
				return err
			}
		}
		return nil
	}
	for _, i := range changed {
		if err := t.conn.SetRegValue(block, stubName(i), r[i]); err != nil {
			return err
		}
	}
	return t.conn.WriteRegs(th, block)
}

func (t *Target) Step(tid int) error {
	th, err := t.thread(tid)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.running = true
	t.mu.Unlock()
	return t.conn.Step(th)
}

// Resume lets the whole guest run: all-stop stubs resume every vCPU.
func (t *Target) Resume(tid, sig int) error {
	t.mu.Lock()
	if t.running {
		// all-stop: another vCPU's resume let this one go too (the
		// engine releases each held vCPU of an SMP guest in turn)
		t.mu.Unlock()
		return nil
	}
	t.running = true
	t.mu.Unlock()
	return t.conn.Continue(nil, 0)
}

// StopThread stops the guest if it runs; the stop is returned as an event
// to handle when it is not the engine's own interrupt.
func (t *Target) StopThread(tid int) ([]engine.Event, error) {
	t.mu.Lock()
	running := t.running
	t.mu.Unlock()
	if !running {
		return nil, nil
	}
	t.mu.Lock()
	t.kicked = true
	t.mu.Unlock()
	if err := t.conn.Interrupt(); err != nil {
		return nil, err
	}
	ev, err := t.Wait()
	if err != nil {
		return nil, err
	}
	if ev.Kind == engine.EvKick {
		return nil, nil
	}
	return []engine.Event{ev}, nil
}

func (t *Target) DrainKick(tid int) ([]int, error) { return nil, nil }

// Detach lets the guest go (once, for the first vCPU the engine detaches):
// D resumes it; sig SIGSTOP (exit 4) instead leaves it stopped for a
// debugger by closing the connection without D.
func (t *Target) Detach(tid, sig int) error {
	if t.detach || t.gone {
		return nil
	}
	t.detach = true
	if sig == engine.SigStop {
		return t.conn.Close()
	}
	err := t.conn.Detach()
	t.conn.Close()
	return err
}

func (t *Target) Threads(space int) []int {
	if t.detach || t.gone {
		return nil
	}
	out := make([]int, len(t.threads))
	for i, th := range t.threads {
		out[i] = t.tidOf(th)
	}
	return out
}

func (t *Target) Spaces() []int {
	if t.gone {
		return nil
	}
	return []int{0}
}

func (t *Target) ThreadIndex(tid int) int {
	for i, th := range t.threads {
		if t.tidOf(th) == tid {
			return i
		}
	}
	return -1
}

func (t *Target) IsStopped(tid int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.running
}

// DebuggerCommand (exit 4): gdb on the same stub, with the kernel's
// symbols. The engine has taken its breakpoints out and closed the
// connection without detaching: the guest stays stopped where it hit.
func (t *Target) DebuggerCommand(space, tid int) string {
	return t.kern.GDBCommand(t.addr)
}

// Dump asks QEMU, through its monitor (qRcmd), for an ELF core of the
// guest's memory (dump-guest-memory -p: PT_LOADs at the guest's virtual
// addresses, as its page tables map them, which gdb reads with the
// vmlinux; notes with every vCPU's registers). QEMU writes the file on
// its own host, so dir is made absolute here and must be a folder QEMU
// can write. The guest is stopped while QEMU writes and stays so.
func (t *Target) Dump(space, tid int, dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	// unchecked: for a QEMU on this host; a remote one's folder is its
	// own, and a folder that cannot be made fails the dump by its path
	os.MkdirAll(abs, 0o700)
	path := filepath.Join(abs, fmt.Sprintf("guest-%s.core", time.Now().UTC().Format("20060102T150405.000000000")))
	if strings.ContainsAny(path, " \t\n\"'") {
		return "", fmt.Errorf("dump path %q: QEMU's monitor takes no spaces or quotes in a file name", path)
	}
	out, err := t.monitor("dump-guest-memory -p " + path)
	if err != nil {
		return "", fmt.Errorf("the stub cannot dump the guest (qRcmd dump-guest-memory): %v", err)
	}
	if strings.TrimSpace(out) != "" {
		return "", fmt.Errorf("dump-guest-memory: %s", strings.TrimSpace(out))
	}
	return path, nil
}

// InsertBreakpoint asks the stub (Z0, or Z1 when Z0 is refused); a stub
// with neither (gdbsx) gets an int3 written into guest memory.
func (t *Target) InsertBreakpoint(space int, addr uint64, orig []byte) error {
	if !t.noZ {
		err := t.conn.SetBreakpoint(gdbremote.Software, addr, 1)
		if !errors.Is(err, gdbremote.ErrUnsupported) {
			return err
		}
		t.noZ = true
	}
	if err := t.conn.WriteMem(addr, []byte{0xcc}); err != nil {
		return fmt.Errorf("the stub has no breakpoints (Z0, Z1) and int3 cannot be written at %#x: %w", addr, err)
	}
	if t.memBP == nil {
		t.memBP = map[uint64]bool{}
	}
	t.memBP[addr] = true
	return nil
}

func (t *Target) RemoveBreakpoint(space int, addr uint64, orig []byte) error {
	if !t.noZ {
		return t.conn.ClearBreakpoint(gdbremote.Software, addr, 1)
	}
	if !t.memBP[addr] {
		return fmt.Errorf("no breakpoint of gprobes at %#x", addr)
	}
	if len(orig) == 0 {
		return fmt.Errorf("no original byte for %#x", addr)
	}
	if err := t.conn.WriteMem(addr, orig[:1]); err != nil {
		return err
	}
	delete(t.memBP, addr)
	return nil
}

// ForgetBreakpoint: the guest unloaded the kernel module whose code held
// a breakpoint at addr. The stub's breakpoint is taken out of its list
// (z0 writes nothing into the guest); an int3 gprobes wrote itself (a
// stub without Z0) is forgotten, its original byte not written back into
// memory the guest frees.
func (t *Target) ForgetBreakpoint(space int, addr uint64) error {
	if !t.noZ {
		return t.conn.ClearBreakpoint(gdbremote.Software, addr, 1)
	}
	delete(t.memBP, addr)
	return nil
}

// TrapPC: a stub stops a vCPU before the instruction; past an int3 that
// gprobes wrote into memory itself.
func (t *Target) TrapPC(tid int, rip uint64) uint64 {
	if t.noZ && (t.memBP[rip-1] || t.ours(rip-1)) {
		return rip - 1
	}
	return rip
}

// SetOwner: the engine answers which taken-out int3s were ours.
func (t *Target) SetOwner(o engine.Owner) { t.owner = o }

// ours reports whether the engine planted a breakpoint at addr, or took
// one out that a vCPU may still have stopped past.
func (t *Target) ours(addr uint64) bool { return t.owner != nil && t.owner.Ours(0, addr) }

// OS: a Linux guest kernel (linuxkernel.Guest).
func (t *Target) OS() engine.OS { return t.os }

// monitor runs a command of the stub's monitor (qRcmd: QEMU's HMP).
func (t *Target) monitor(cmd string) (string, error) {
	return t.conn.Monitor(cmd)
}
