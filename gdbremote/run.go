package gdbremote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Thread is a thread of the target as the stub names it: a vCPU for QEMU
// and gdbsx (numbered from 1), a thread (LWP) for gdbserver.
type Thread struct {
	ID  string // as the stub writes it: "p1.2", "p01.01", "1f3a"; sent back as is
	Pid int    // the process of a multiprocess id ("p1.2" -> 1); 0 without one
	Num int    // the thread number ("p1.2" -> 2; "1f3a" -> 0x1f3a); -1 for "all"
}

// String returns the ID.
func (t Thread) String() string { return t.ID }

// parseThread parses a thread id: "p<pid>.<tid>", "p<pid>", "<tid>", each
// number hex or -1.
func parseThread(s string) (Thread, error) {
	th := Thread{ID: s}
	num := s
	if rest, ok := strings.CutPrefix(s, "p"); ok {
		pid, tid, dot := strings.Cut(rest, ".")
		p, err := parseTid(pid)
		if err != nil {
			return Thread{}, fmt.Errorf("bad thread id %q", s)
		}
		th.Pid = p
		if !dot {
			th.Num = -1
			return th, nil
		}
		num = tid
	}
	n, err := parseTid(num)
	if err != nil {
		return Thread{}, fmt.Errorf("bad thread id %q", s)
	}
	th.Num = n
	return th, nil
}

func parseTid(s string) (int, error) {
	if s == "-1" {
		return -1, nil
	}
	v, err := strconv.ParseUint(s, 16, 31)
	return int(v), err
}

// Threads lists the target's threads (qfThreadInfo, qsThreadInfo...).
// gdbsx answers "m0,1l" (the end marker glued to the list) and nothing to
// qsThreadInfo; both end the list.
func (c *Conn) Threads() ([]Thread, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx := context.Background()
	var out []Thread
	pkt := []byte("qfThreadInfo")
	for {
		r, err := c.request(ctx, pkt)
		if err != nil {
			if len(out) > 0 && errors.Is(err, ErrUnsupported) {
				return out, nil
			}
			return nil, err
		}
		if r[0] == 'l' {
			return out, nil
		}
		if r[0] != 'm' {
			return nil, c.packetErr(pkt, r, fmt.Errorf("unexpected reply %q", short(r)))
		}
		last := false
		for _, id := range strings.Split(string(r[1:]), ",") {
			th, err := parseThread(id)
			if err != nil && strings.HasSuffix(id, "l") {
				if th, err = parseThread(strings.TrimSuffix(id, "l")); err == nil {
					last = true
				}
			}
			if err != nil {
				return nil, c.packetErr(pkt, r, err)
			}
			out = append(out, th)
		}
		if last {
			return out, nil
		}
		if len(out) > 1<<16 {
			return nil, c.packetErr(pkt, r, errors.New("more than 65536 threads"))
		}
		pkt = []byte("qsThreadInfo")
	}
}

// BPKind is a kind of breakpoint.
type BPKind int

const (
	Software BPKind = iota // Z0: an int3 in memory (gdbserver) or a TCG breakpoint (QEMU)
	Hardware               // Z1: a debug register (gdbserver) or the same TCG breakpoint (QEMU)
)

func (k BPKind) String() string {
	if k == Hardware {
		return "hardware"
	}
	return "software"
}

// SetBreakpoint inserts a breakpoint at addr. size is the breakpoint's
// "kind", the instruction length to replace: 1 on x86. A Software
// breakpoint the stub does not support (an empty reply to Z0) is set as a
// Hardware one (Z1), and so are all later ones.
func (c *Conn) SetBreakpoint(kind BPKind, addr uint64, size int) error {
	return c.breakpoint('Z', kind, addr, size)
}

// ClearBreakpoint removes a breakpoint set by SetBreakpoint with the same
// arguments.
func (c *Conn) ClearBreakpoint(kind BPKind, addr uint64, size int) error {
	return c.breakpoint('z', kind, addr, size)
}

func (c *Conn) breakpoint(op byte, kind BPKind, addr uint64, size int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx := context.Background()
	typ := byte('0')
	if kind == Hardware || c.hasZ0 < 0 {
		typ = '1'
	}
	build := func(typ byte) []byte {
		b := append(c.pbuf[:0], op, typ, ',')
		b = strconv.AppendUint(b, addr, 16)
		b = append(b, ',')
		b = strconv.AppendUint(b, uint64(size), 16)
		c.pbuf = b
		return b
	}
	err := c.requestOK(ctx, build(typ))
	if typ == '0' && c.hasZ0 == 0 {
		switch {
		case err == nil:
			c.hasZ0 = 1
		case errors.Is(err, ErrUnsupported):
			c.hasZ0 = -1
			c.logf("note: no Z0; software breakpoints are set with Z1")
			pkt := build('1')
			if err = c.requestOK(ctx, pkt); errors.Is(err, ErrUnsupported) {
				err = c.packetErr(pkt, nil, fmt.Errorf("%w, nor Z0: the stub sets no breakpoints; write an int3 with WriteMem", ErrUnsupported))
			}
		}
	}
	return err
}

// Continue resumes the target and returns at once; Wait returns the stop.
// With th nil every thread runs ("vCont;c"); sig, if not 0, goes to the
// thread of the last stop ("vCont;C<sig>:<thread>;c"). With th set only
// that thread runs ("vCont;c:<th>" or "vCont;C<sig>:<th>"), the others
// stay stopped. Without vCont: "c"/"C<sig>", after "Hc<th>" if th is set.
// sig is a GDB signal number (see GDBSignal).
func (c *Conn) Continue(th *Thread, sig int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running.Load() {
		return c.packetErr([]byte("vCont;c"), nil, ErrRunning)
	}
	if sig < 0 || sig > 255 {
		return fmt.Errorf("gdbremote: continue with signal %d: not in 0..255", sig)
	}
	b := c.pbuf[:0]
	if c.vcont["c"] && (sig == 0 || c.vcont["C"]) {
		b = append(b, "vCont"...)
		switch {
		case th != nil:
			b = appendAction(b, 'c', sig, th.ID)
		case sig != 0 && c.lastStop.ID != "":
			b = appendAction(b, 'c', sig, c.lastStop.ID)
			b = append(b, ";c"...)
		default:
			b = appendAction(b, 'c', sig, "")
		}
	} else {
		if th != nil {
			if err := c.requestOK(context.Background(), append([]byte("Hc"), th.ID...)); err != nil {
				return err
			}
		}
		b = appendLegacy(b, 'c', sig)
	}
	c.pbuf = b
	return c.startResume(b)
}

// Step single-steps one thread and returns at once; Wait returns the stop.
// The other threads stay stopped ("vCont;s:<th>"). Without vCont: "Hc<th>"
// then "s". The zero Thread steps the thread of the last stop. A thread at
// one of its breakpoints: QEMU 7.2 steps over it, gdbserver 13 traps again
// in place; clear it first to be portable (see the package documentation).
func (c *Conn) Step(th Thread) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running.Load() {
		return c.packetErr([]byte("vCont;s"), nil, ErrRunning)
	}
	if th.ID == "" {
		th = c.lastStop
	}
	b := c.pbuf[:0]
	if c.vcont["s"] {
		b = appendAction(append(b, "vCont"...), 's', 0, th.ID)
	} else {
		if th.ID != "" {
			if err := c.requestOK(context.Background(), append([]byte("Hc"), th.ID...)); err != nil {
				return err
			}
		}
		b = append(b, 's')
	}
	c.pbuf = b
	return c.startResume(b)
}

// appendAction appends ";c", ";C05", ";s:p1.2"...
func appendAction(b []byte, act byte, sig int, tid string) []byte {
	b = append(b, ';')
	if sig != 0 {
		b = append(b, act-'a'+'A', hexDigits[sig>>4&15], hexDigits[sig&15])
	} else {
		b = append(b, act)
	}
	if tid != "" {
		b = append(b, ':')
		b = append(b, tid...)
	}
	return b
}

func appendLegacy(b []byte, act byte, sig int) []byte {
	if sig != 0 {
		return append(b, act-'a'+'A', hexDigits[sig>>4&15], hexDigits[sig&15])
	}
	return append(b, act)
}

func (c *Conn) startResume(pkt []byte) error {
	if c.stopEcho != nil && c.echoRisk {
		// the stub may send the last stop reply again (it read our ^C
		// where it waited for the ack of that reply): nothing but a
		// request tells a copy from the stop of this resume, which
		// may read the same. A thread select is answered after every
		// copy; request drops them.
		th := c.lastStop
		if th.ID == "" {
			th.ID = "0" // any thread: the reply is what matters
		}
		if err := c.selectThread(context.Background(), th); err != nil && (errors.Is(err, ErrClosed) || errors.Is(err, ErrTimeout)) {
			return c.packetErr(pkt, nil, err)
		}
		c.stopEcho, c.echoRisk = nil, false
	}
	c.curG = "" // stubs select the thread of the next stop
	c.resume = string(pkt)
	// Running before the packet leaves, so that an Interrupt racing with
	// Continue is not dropped; it is held until the packet is out (QEMU
	// ignores a 0x03 that arrives while the VM is stopped).
	c.running.Store(true)
	if err := c.send(pkt); err != nil {
		c.intrMu.Lock()
		c.running.Store(false)
		c.heldIntr = false
		c.intrMu.Unlock()
		return c.packetErr(pkt, nil, err)
	}
	c.intrMu.Lock()
	c.resumeSent = true
	held := c.heldIntr
	c.heldIntr = false
	c.intrSent = 0
	if held {
		c.intrSent++
	}
	c.intrMu.Unlock()
	if held {
		c.logf("-> ^C (held until the resume was sent)")
		if err := c.writeRaw([]byte{0x03}); err != nil {
			return c.packetErr(pkt, nil, errors.Join(ErrClosed, err))
		}
	}
	return nil
}

// stopped records that the stop of the last resume has arrived.
func (c *Conn) stopped() {
	c.intrMu.Lock()
	c.running.Store(false)
	c.resumeSent = false
	c.heldIntr = false
	c.intrMu.Unlock()
}

// Running reports whether a resume was sent whose stop Wait has not yet
// returned.
func (c *Conn) Running() bool { return c.running.Load() }

// GDB signal numbers (gdb/signals.def) of the stop replies gprobes acts
// on; for these two GDB's numbering is Linux's.
const (
	SigInt  = 2 // GDB_SIGNAL_INT: the stop of Interrupt
	SigTrap = 5 // GDB_SIGNAL_TRAP: breakpoints and steps
)

// Stop is a stop reply.
type Stop struct {
	Signal   int    // GDB signal number: SigTrap for breakpoints and steps, SigInt for Interrupt
	Thread   Thread // the thread that stopped; zero when the stub does not say
	Reason   string // "swbreak", "hwbreak", "watch", "rwatch", "awatch", "library", "fork", "vfork", "vforkdone", "exec", "clone", "create", or ""
	Addr     uint64 // the data address of a watchpoint stop
	Core     int    // the CPU core, -1 when not given
	Regs     map[int]uint64
	Exited   bool // W or X: the process exited, or the guest powered off
	ExitCode int  // W: the exit status; X: 128 + the signal
	Raw      string
}

// isStopReply reports whether a packet looks like a stop reply: S or T with
// a two-digit hex signal, W or X with a hex status (gdbserver writes "W7").
func isStopReply(b []byte) bool {
	if len(b) < 2 {
		return false
	}
	switch b[0] {
	case 'S':
		return len(b) == 3 && isHex(b[1:3])
	case 'T':
		return len(b) >= 3 && isHex(b[1:3]) && (len(b) == 3 || bytes.IndexByte(b, ':') > 0)
	case 'W', 'X':
		n := bytes.IndexByte(b, ';')
		if n < 0 {
			n = len(b)
		}
		return n <= 3 && isHex(b[1:n])
	}
	return false
}

// parseStop parses a stop reply.
func parseStop(b []byte) (Stop, error) {
	st := Stop{Raw: string(b), Core: -1}
	if !isStopReply(b) {
		return st, fmt.Errorf("not a stop reply: %q", short(b))
	}
	switch b[0] {
	case 'W', 'X':
		n := bytes.IndexByte(b, ';')
		if n < 0 {
			n = len(b)
		}
		v, _ := strconv.ParseUint(string(b[1:n]), 16, 8)
		st.Exited = true
		if b[0] == 'W' {
			st.ExitCode = int(v)
		} else {
			st.Signal = int(v)
			st.ExitCode = 128 + LinuxSignal(int(v))
		}
		if rest, ok := bytes.CutPrefix(b[n:], []byte(";process:")); ok {
			if pid, err := strconv.ParseUint(string(rest), 16, 31); err == nil {
				st.Thread = Thread{ID: "p" + string(rest), Pid: int(pid), Num: -1}
			}
		}
		return st, nil
	}
	v, _ := strconv.ParseUint(string(b[1:3]), 16, 8)
	if b[0] == 'S' {
		st.Signal = int(v)
		return st, nil
	}
	st.Signal = int(v)
	for _, kv := range strings.Split(string(b[3:]), ";") {
		if kv == "" {
			continue
		}
		k, val, _ := strings.Cut(kv, ":")
		switch k {
		case "thread":
			th, err := parseThread(val)
			if err != nil {
				return st, err
			}
			st.Thread = th
		case "core":
			if n, err := strconv.ParseUint(val, 16, 16); err == nil {
				st.Core = int(n)
			}
		case "watch", "rwatch", "awatch":
			st.Reason = k
			st.Addr, _ = strconv.ParseUint(val, 16, 64)
		case "swbreak", "hwbreak", "library", "replaylog", "fork", "vfork", "vforkdone", "exec", "clone", "create":
			st.Reason = k
		default:
			// An expedited register: "NN:value" in target byte order.
			n, err := strconv.ParseUint(k, 16, 16)
			if err != nil || len(val) == 0 || len(val) > 16 || len(val)%2 != 0 {
				continue
			}
			var buf [8]byte
			if unavail, err := decodeHex(buf[:len(val)/2], []byte(val)); err != nil || unavail {
				continue
			}
			if st.Regs == nil {
				st.Regs = map[int]uint64{}
			}
			st.Regs[int(n)] = le(buf[:len(val)/2])
		}
	}
	return st, nil
}

// isConsoleOutput reports whether a packet is "O" console output (and not
// "OK").
func isConsoleOutput(b []byte) bool {
	return len(b) > 1 && b[0] == 'O' && len(b)%2 == 1 && isHex(b[1:])
}

// Wait returns the next stop of a running target: the reply to the last
// Continue or Step. Console output (O packets) met on the way goes to the
// log. W and X replies (the process exited, the guest powered off) are
// Stops with Exited set; the stub usually closes the connection after
// them, and later requests return ErrClosed. If ctx ends first, Wait
// returns ctx.Err() and the target keeps running: Interrupt, then Wait
// again.
func (c *Conn) Wait(ctx context.Context) (Stop, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running.Load() {
		return Stop{}, ErrNotRunning
	}
	pkt := []byte(c.resume)
	for {
		f, err := c.recv(ctx, 0)
		if err != nil {
			if errors.Is(err, ErrClosed) {
				c.stopped()
			}
			if err == ctx.Err() {
				return Stop{}, err
			}
			return Stop{}, c.packetErr(pkt, nil, err)
		}
		if !f.sumOK {
			c.stopped()
			return Stop{}, c.packetErr(pkt, f.data, ErrChecksum)
		}
		if isConsoleOutput(f.data) {
			continue // logged by the reader
		}
		c.stopped()
		if len(f.data) == 0 {
			return Stop{}, c.packetErr(pkt, nil, ErrUnsupported)
		}
		if isErrorReply(f.data) {
			return Stop{}, c.packetErr(pkt, f.data, &ReplyError{Reply: string(f.data)})
		}
		st, err := parseStop(f.data)
		if err != nil {
			return st, c.packetErr(pkt, f.data, err)
		}
		if st.Thread.ID != "" && !st.Exited {
			c.lastStop = st.Thread
		}
		c.stopEcho = nil
		if !c.noAck.Load() {
			c.stopEcho = append([]byte{}, f.data...)
			c.intrMu.Lock()
			c.echoRisk = c.intrSent > 0
			c.intrMu.Unlock()
		}
		return st, nil
	}
}

// Interrupt asks a running target to stop (the 0x03 byte); Wait then
// returns the stop, usually signal 2 (SIGINT). It may be called from any
// goroutine, in particular while another blocks in Wait or is in Continue
// (an interrupt that comes before the resume packet is out is held and
// sent right after it). If the target stopped on its own just before,
// that stop is the one Wait returns, and the interrupt is lost (QEMU) or
// delivered at the next resume as a SIGINT stop (gdbserver). It does
// nothing when the target is not running.
func (c *Conn) Interrupt() error {
	c.intrMu.Lock()
	if !c.running.Load() {
		c.intrMu.Unlock()
		return nil
	}
	if !c.resumeSent {
		c.heldIntr = true
		c.intrMu.Unlock()
		return nil
	}
	c.intrSent++
	c.intrMu.Unlock()
	c.logf("-> ^C")
	if err := c.writeRaw([]byte{0x03}); err != nil {
		return fmt.Errorf("gdbremote: interrupt: %w", errors.Join(ErrClosed, err))
	}
	return nil
}

// Detach lets the target go: breakpoints the stub holds are removed and it
// runs on (QEMU resumes the guest). In multiprocess mode the packet is
// "D;<pid>" (QEMU 7.2 answers E22 to a bare D once any client negotiated
// multiprocess); else "D". A running target is interrupted first. The
// connection stays open: Close it afterwards.
func (c *Conn) Detach() error {
	ctx := context.Background()
	if c.running.Load() {
		if err := c.Interrupt(); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
		st, err := c.Wait(wctx)
		cancel()
		if err != nil {
			return fmt.Errorf("gdbremote: detach: stopping the target: %w", err)
		}
		if st.Exited {
			return nil
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	pid := c.lastStop.Pid
	if pid == 0 {
		pid = c.initial.Thread.Pid
	}
	if c.multiprocess && pid > 0 {
		pkt := []byte("D;" + strconv.FormatUint(uint64(pid), 16))
		err := c.requestOK(ctx, pkt)
		if err == nil || !(errors.Is(err, ErrUnsupported) || isReplyErr(err)) {
			return err
		}
		c.logf("note: %v; trying a bare D", err)
	}
	if c.closed() {
		return c.packetErr([]byte("D"), nil, c.closedErr())
	}
	err := c.requestOK(ctx, []byte("D"))
	if errors.Is(err, ErrClosed) {
		// gdbsx lets the domain go and closes the connection without
		// answering D (gx_main.c ends its loop before the reply)
		c.logf("note: the stub closed the connection instead of answering D: taken as detached")
		return nil
	}
	return err
}

// LinuxSignal converts a GDB signal number to Linux's (x86), or returns it
// unchanged when the two agree or it has no Linux equivalent.
func LinuxSignal(gdb int) int {
	for l, g := range gdbOfLinux {
		if g == gdb && l > 0 {
			return l
		}
	}
	return gdb
}

// GDBSignal converts a Linux (x86) signal number to GDB's.
func GDBSignal(linux int) int {
	if linux > 0 && linux < len(gdbOfLinux) && gdbOfLinux[linux] != 0 {
		return gdbOfLinux[linux]
	}
	return linux
}

// gdbOfLinux maps Linux signal numbers 1-31 to gdb/signals.def numbers.
var gdbOfLinux = [32]int{
	1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6, 7: 10 /* BUS */, 8: 8, 9: 9,
	10: 30 /* USR1 */, 11: 11, 12: 31 /* USR2 */, 13: 13, 14: 14, 15: 15,
	17: 20 /* CHLD */, 18: 19 /* CONT */, 19: 17 /* STOP */, 20: 18, /* TSTP */
	21: 21, 22: 22, 23: 16 /* URG */, 24: 24, 25: 25, 26: 26, 27: 27,
	28: 28, 29: 23 /* IO */, 30: 32 /* PWR */, 31: 12, /* SYS */
}
