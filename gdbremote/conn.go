package gdbremote

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a connection.
type Options struct {
	// Timeout bounds connecting and each reply to a request (not Wait,
	// which a context bounds). Default 30 s: a QEMU TCG guest on a loaded
	// host answers slowly.
	Timeout time.Duration
	// Log, when not nil, receives one line per packet sent ("->") and
	// received ("<-"), with the time since Dial, and notes on fallbacks.
	Log io.Writer
}

// DefaultTimeout is Options.Timeout when zero.
const DefaultTimeout = 30 * time.Second

// Conn is one connection to a stub. See the package documentation for the
// rules on goroutines.
type Conn struct {
	nc      net.Conn
	opts    Options
	started time.Time

	wmu  sync.Mutex // serializes writes: packets, acks, interrupts
	wbuf []byte     // frame buffer, under wmu
	lmu  sync.Mutex // keeps log lines whole

	mu      sync.Mutex // one request (or Wait) at a time
	pbuf    []byte     // packet data being built, under mu
	console []byte     // O output that came before the last reply, under mu

	in    chan frame    // packets from the reader
	acks  chan byte     // '+' and '-' from the reader
	done  chan struct{} // closed when the reader ends
	rerr  error         // why the reader ended; set before done is closed
	noAck atomic.Bool   // QStartNoAckMode accepted

	closeOnce sync.Once
	closing   chan struct{}

	running atomic.Bool // a resume was sent and its stop not yet read
	resume  string      // the resume packet sent, for errors

	intrMu     sync.Mutex // guards the three below, and running's changes to false
	resumeSent bool       // the resume packet is out
	heldIntr   bool       // an Interrupt came before it was
	intrSent   int        // ^C bytes written since the resume packet

	features     map[string]string
	packetSize   int
	multiprocess bool
	vcont        map[string]bool // vCont actions the stub supports; nil: no vCont
	arch         string          // from target.xml
	regs         []RegInfo
	regIdx       map[string]int // lower-case name -> index in regs
	initial      Stop           // the answer to "?" at connection
	connectStop  string         // a stop reported unasked at connection

	// What the stub turned out to support (0 unknown, 1 yes, -1 no).
	hasP, hasPW, hasX, hasBinRead, hasZ0 int8
	curG                                 string // thread selected by Hg; "" unknown
	lastStop                             Thread // thread of the last stop
	// stopEcho is the last stop reply, while in ack mode no other packet
	// has come after it: a stub that reads our ^C where it waited for
	// the '+' of that reply sends it again (gdbsx's putpkt), and the copy
	// must not be taken for the reply to the next request
	stopEcho []byte
	// echoRisk: ^C bytes went out while the target ran to the stop of
	// stopEcho, so copies of that reply may still be on their way; a
	// resume absorbs them with a request first (startResume)
	echoRisk bool
}

// Dial connects to a stub at addr: "host:port" (TCP), or a Unix socket path
// (anything with a '/' and no ':'), or "tcp:host:port" / "unix:path". It
// performs the handshake (see NewConn) and returns a Conn whose target is
// stopped.
func Dial(ctx context.Context, addr string, opts Options) (*Conn, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	network, address := "tcp", addr
	switch {
	case strings.HasPrefix(addr, "tcp:"):
		address = addr[4:]
	case strings.HasPrefix(addr, "unix:"):
		network, address = "unix", addr[5:]
	case strings.Contains(addr, "/") && !strings.Contains(addr, ":"):
		network = "unix"
	}
	// A stub that closes the connection during the handshake is asked
	// again for a while: QEMU accepts and drops a client while it has not
	// yet seen the previous one go (a detach followed at once by a new
	// connection).
	start := time.Now()
	for {
		c, err := dialOnce(ctx, network, address, opts)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, ErrClosed) || time.Since(start) > redialFor || ctx.Err() != nil {
			return nil, fmt.Errorf("gdbremote: %s: %w", addr, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("gdbremote: %s: %w", addr, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// redialFor is how long Dial retries a stub that drops the handshake.
const redialFor = 3 * time.Second

func dialOnce(ctx context.Context, network, address string, opts Options) (*Conn, error) {
	d := net.Dialer{Timeout: opts.Timeout}
	nc, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		// Every request is a small write waiting for a small reply: Nagle's
		// algorithm against delayed ACKs costs 40-200 ms per packet.
		tc.SetNoDelay(true)
	}
	return NewConn(ctx, nc, opts)
}

// NewConn speaks the protocol over an established connection (a socket, a
// pipe to "gdbserver -", net.Pipe in tests) and performs the handshake:
//
//   - "+" to acknowledge anything the stub sent before we came;
//   - qSupported with multiprocess+, swbreak+, hwbreak+, vContSupported+,
//     xmlRegisters=i386 and qRelocInsn-; stop replies that arrive before its
//     reply are the stop QEMU reports unasked when a client connects to a
//     running VM, and are dropped (ConnectStop has it);
//   - QStartNoAckMode, keeping acks when the stub refuses it or answers
//     with an empty reply (QEMU 7.2);
//   - vCont? for the resume actions the stub knows;
//   - "?" for the current stop (InitialStop), and Hg to its thread;
//   - the target description (qXfer:features:read, following xi:include)
//     for the register layout, or the amd64 layout of QEMU's stub without it.
//
// On failure nc is closed.
func NewConn(ctx context.Context, nc net.Conn, opts Options) (*Conn, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	c := &Conn{
		nc:         nc,
		opts:       opts,
		started:    time.Now(),
		in:         make(chan frame, 64),
		acks:       make(chan byte, 16),
		done:       make(chan struct{}),
		closing:    make(chan struct{}),
		packetSize: 400, // gdb's default when the stub says nothing
		features:   map[string]string{},
	}
	go c.readLoop()
	if err := c.handshake(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// qSupportedRequest is what this client says it understands.
const qSupportedRequest = "qSupported:multiprocess+;swbreak+;hwbreak+;vContSupported+;xmlRegisters=i386;qRelocInsn-"

func (c *Conn) handshake(ctx context.Context) error {
	c.writeRaw([]byte{'+'})

	// qSupported, skipping stop replies sent before its reply.
	if err := c.send([]byte(qSupportedRequest)); err != nil {
		return c.packetErr([]byte(qSupportedRequest), nil, err)
	}
	var reply []byte
	for {
		f, err := c.recv(ctx, c.opts.Timeout)
		if err != nil {
			return c.packetErr([]byte(qSupportedRequest), nil, err)
		}
		if isStopReply(f.data) {
			c.connectStop = string(f.data)
			c.logf("note: dropped the stop reported at connection: %s", f.data)
			continue
		}
		reply = f.data
		break
	}
	c.parseFeatures(string(reply))

	// No-ack mode, asked for even when qSupported does not list it. QEMU
	// 7.2 does not, and answers with an empty reply: acks stay on.
	if r, err := c.request(ctx, []byte("QStartNoAckMode")); err == nil && string(r) == "OK" {
		c.noAck.Store(true)
	} else if err != nil && !errors.Is(err, ErrUnsupported) && !isReplyErr(err) {
		return err
	} else {
		c.logf("note: the stub keeps acks (QStartNoAckMode: %v)", errOrReply(err, r))
	}

	if r, err := c.request(ctx, []byte("vCont?")); err == nil && strings.HasPrefix(string(r), "vCont") {
		c.vcont = map[string]bool{}
		for _, a := range strings.Split(string(r[5:]), ";") {
			if a != "" {
				c.vcont[a] = true
			}
		}
	} else if err != nil && !errors.Is(err, ErrUnsupported) && !isReplyErr(err) {
		return err
	}

	r, err := c.request(ctx, []byte("?"))
	if err != nil {
		return err
	}
	st, err := parseStop(r)
	if err != nil {
		return c.packetErr([]byte("?"), r, err)
	}
	c.initial = st
	c.lastStop = st.Thread
	if st.Thread.Pid > 0 {
		c.multiprocess = true
	}
	// gdbserver 13 fails an internal assertion and drops the connection
	// (killing the process) when asked for target.xml before a thread is
	// selected: select the stopped one, or any.
	sel := c.initial.Thread
	if sel.ID == "" {
		sel.ID = "0"
		if c.multiprocess {
			sel.ID = "p0.0"
		}
	}
	if err := c.selectThread(ctx, sel); err != nil {
		if errors.Is(err, ErrClosed) || errors.Is(err, ErrTimeout) {
			return err
		}
		c.logf("note: %v", err)
	}

	if c.features["qXfer:features:read"] == "+" {
		if err := c.readTargetDescription(ctx); err != nil {
			if errors.Is(err, ErrClosed) || errors.Is(err, ErrTimeout) {
				return err
			}
			c.logf("note: no usable target description (%v): amd64 layout assumed", err)
			c.setLayout(defaultAMD64(), "i386:x86-64")
		}
	} else {
		c.setLayout(defaultAMD64(), "i386:x86-64")
	}

	return nil
}

func isReplyErr(err error) bool {
	var re *ReplyError
	return errors.As(err, &re)
}

func errOrReply(err error, r []byte) string {
	if err != nil {
		return err.Error()
	}
	return strconv.Quote(string(r))
}

func (c *Conn) parseFeatures(reply string) {
	for _, f := range strings.Split(reply, ";") {
		if f == "" {
			continue
		}
		if k, v, ok := strings.Cut(f, "="); ok {
			c.features[k] = v
			continue
		}
		switch last := f[len(f)-1]; last {
		case '+', '-', '?':
			c.features[f[:len(f)-1]] = string(last)
		default:
			c.features[f] = ""
		}
	}
	if v, err := strconv.ParseUint(c.features["PacketSize"], 16, 32); err == nil && v >= 64 {
		c.packetSize = int(v)
	}
	c.multiprocess = c.features["multiprocess"] == "+"
	if c.features["binary-upload"] == "+" {
		c.hasBinRead = 1
	} else {
		c.hasBinRead = -1
	}
}

// Features returns the stub's qSupported answers: "PacketSize" -> "1000",
// "qXfer:features:read" -> "+", "QStartNoAckMode" -> "+" ... A feature
// written without a value or sign maps to "".
func (c *Conn) Features() map[string]string {
	m := make(map[string]string, len(c.features))
	for k, v := range c.features {
		m[k] = v
	}
	return m
}

// NoAck reports whether the connection runs without acks.
func (c *Conn) NoAck() bool { return c.noAck.Load() }

// Arch is the architecture the target description names ("i386:x86-64"),
// or "i386:x86-64" when the stub gave none.
func (c *Conn) Arch() string { return c.arch }

// InitialStop is the stop the target was in when the connection was made
// (the answer to "?").
func (c *Conn) InitialStop() Stop { return c.initial }

// ConnectStop is the stop reply the stub sent unasked when the client
// connected (QEMU 7.2 stops a running VM then), or "".
func (c *Conn) ConnectStop() string { return c.connectStop }

// PacketSize is the stub's PacketSize (400 when it gave none).
func (c *Conn) PacketSize() int { return c.packetSize }

// Close drops the connection without detaching: the target stays as the
// stub leaves it (QEMU 7.2 leaves the guest stopped for good). Call Detach
// first to let it run on.
func (c *Conn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		close(c.closing)
		err = c.nc.Close()
	})
	return err
}

// readLoop reads frames, acknowledges packets in ack mode and hands them on.
func (c *Conn) readLoop() {
	r := bufio.NewReaderSize(c.nc, 64<<10)
	var err error
	defer func() {
		c.rerr = err
		close(c.done)
	}()
	for {
		var f frame
		f, err = readFrame(r)
		if err != nil {
			return
		}
		switch f.kind {
		case '+', '-':
			select {
			case c.acks <- f.kind:
			default:
			}
			continue
		case '%':
			// Notifications come only after a feature asks for them; this
			// client asks for none. Ignore, without an ack.
			c.logf("<- %%%s (notification, ignored)", f.data)
			continue
		}
		if !c.noAck.Load() {
			if !f.sumOK {
				c.logf("<- $%s (bad checksum, asked again)", short(f.data))
				c.writeRaw([]byte{'-'})
				continue
			}
			c.writeRaw([]byte{'+'})
		}
		c.logRecv(f)
		select {
		case c.in <- f:
		case <-c.closing:
			err = ErrClosed
			return
		}
	}
}

// writeRaw writes bytes outside packets (acks, 0x03).
func (c *Conn) writeRaw(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(c.opts.Timeout))
	_, err := c.nc.Write(b)
	return err
}

// send writes one packet and, in ack mode, waits for its ack, sending it
// again on '-' (up to 5 times).
func (c *Conn) send(data []byte) error {
	if c.closed() {
		return c.closedErr()
	}
	for attempt := 0; ; attempt++ {
		if !c.noAck.Load() {
			for len(c.acks) > 0 { // stale acks
				<-c.acks
			}
		}
		c.logSend(data, attempt)
		c.wmu.Lock()
		c.wbuf = frameOf(c.wbuf, data)
		c.nc.SetWriteDeadline(time.Now().Add(c.opts.Timeout))
		_, err := c.nc.Write(c.wbuf)
		c.wmu.Unlock()
		if err != nil {
			if c.closed() {
				return c.closedErr()
			}
			return fmt.Errorf("%w: %v", ErrClosed, err)
		}
		if c.noAck.Load() {
			return nil
		}
		t := time.NewTimer(c.opts.Timeout)
		select {
		case a := <-c.acks:
			t.Stop()
			if a == '+' {
				return nil
			}
			if attempt >= 5 {
				return ErrNAK
			}
			c.logf("note: NAK, sending again")
		case <-c.done:
			t.Stop()
			return c.closedErr()
		case <-t.C:
			c.Close()
			return ErrTimeout
		}
	}
}

// recv returns the next packet. A zero timeout waits for ctx alone.
func (c *Conn) recv(ctx context.Context, timeout time.Duration) (frame, error) {
	select { // a packet already here wins over an ended context
	case f := <-c.in:
		return f, nil
	default:
	}
	var tc <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		tc = t.C
	}
	select {
	case f := <-c.in:
		return f, nil
	case <-c.done:
		select { // packets queued before the end come first (W00, then EOF)
		case f := <-c.in:
			return f, nil
		default:
		}
		return frame{}, c.closedErr()
	case <-tc:
		c.Close()
		return frame{}, ErrTimeout
	case <-ctx.Done():
		return frame{}, ctx.Err()
	}
}

func (c *Conn) closed() bool {
	select {
	case <-c.done:
		return true
	case <-c.closing:
		return true
	default:
		return false
	}
}

func (c *Conn) closedErr() error {
	select {
	case <-c.done:
		if c.rerr != nil && c.rerr != ErrClosed && !errors.Is(c.rerr, net.ErrClosed) {
			return fmt.Errorf("%w: %v", ErrClosed, c.rerr)
		}
	default:
	}
	return ErrClosed
}

// request sends a packet and returns its reply. Empty replies are
// ErrUnsupported and "E NN" replies *ReplyError, both in a *PacketError.
// The reply is valid until the next request.
func (c *Conn) request(ctx context.Context, data []byte) ([]byte, error) {
	if c.running.Load() {
		return nil, c.packetErr(data, nil, ErrRunning)
	}
	if err := c.send(data); err != nil {
		return nil, c.packetErr(data, nil, err)
	}
	c.console = c.console[:0]
	var f frame
	for {
		var err error
		f, err = c.recv(ctx, c.opts.Timeout)
		if err != nil {
			return nil, c.packetErr(data, nil, err)
		}
		if c.stopEcho != nil {
			// ("?" is answered with that very reply)
			echo := f.sumOK && string(f.data) == string(c.stopEcho) && string(data) != "?"
			if echo {
				c.logf("note: the stop reply again (the stub sent it once more): dropped")
				continue
			}
			c.stopEcho = nil
		}
		// Console output before the reply (qRcmd): kept for Monitor.
		if f.sumOK && isConsoleOutput(f.data) {
			n := len(c.console)
			c.console = append(c.console, make([]byte, (len(f.data)-1)/2)...)
			decodeHex(c.console[n:], f.data[1:])
			continue
		}
		break
	}
	if !f.sumOK {
		return nil, c.packetErr(data, f.data, ErrChecksum)
	}
	switch {
	case len(f.data) == 0:
		return nil, c.packetErr(data, nil, ErrUnsupported)
	case isErrorReply(f.data):
		return nil, c.packetErr(data, f.data, &ReplyError{Reply: string(f.data)})
	}
	return f.data, nil
}

// requestOK is request for packets whose reply is "OK".
func (c *Conn) requestOK(ctx context.Context, data []byte) error {
	r, err := c.request(ctx, data)
	if err != nil {
		return err
	}
	if string(r) != "OK" {
		return c.packetErr(data, r, fmt.Errorf("unexpected reply %q (want OK)", short(r)))
	}
	return nil
}

func (c *Conn) packetErr(data, reply []byte, err error) error {
	return &PacketError{Packet: short(data), Reply: short(reply), Err: err}
}

// Monitor runs a command of the stub's monitor (qRcmd, gdb's "monitor"
// command: QEMU's HMP, "info registers", "info status") and returns the
// text it printed.
func (c *Conn) Monitor(cmd string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pkt := appendHex([]byte("qRcmd,"), []byte(cmd))
	r, err := c.request(context.Background(), pkt)
	if err != nil {
		return string(c.console), err
	}
	if string(r) != "OK" {
		// Some stubs answer with the output itself, hex-encoded.
		if b := make([]byte, len(r)/2); len(r)%2 == 0 && isHex(r) {
			decodeHex(b, r)
			return string(append(c.console, b...)), nil
		}
		return string(c.console), c.packetErr(pkt, r, fmt.Errorf("unexpected reply %q", short(r)))
	}
	return string(c.console), nil
}

// Exec sends one packet as is (without framing) and returns the stub's
// reply, for packets this package has no method for ("qqemu.sstep=...").
// Errors as for every request: an empty reply is ErrUnsupported. Not for
// resume packets (c, s, vCont): use Continue and Step.
func (c *Conn) Exec(packet string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, err := c.request(context.Background(), []byte(packet))
	return string(r), err
}

func (c *Conn) logf(format string, args ...any) {
	if c.opts.Log == nil {
		return
	}
	c.logLine(fmt.Sprintf(format, args...))
}

func (c *Conn) logLine(s string) {
	d := time.Since(c.started)
	c.lmu.Lock()
	fmt.Fprintf(c.opts.Log, "%10.3fms %s\n", float64(d.Microseconds())/1000, s)
	c.lmu.Unlock()
}

func (c *Conn) logSend(data []byte, attempt int) {
	if c.opts.Log == nil {
		return
	}
	again := ""
	if attempt > 0 {
		again = " (again)"
	}
	c.logLine(fmt.Sprintf("-> %s%s", printable(data), again))
}

func (c *Conn) logRecv(f frame) {
	if c.opts.Log == nil {
		return
	}
	bad := ""
	if !f.sumOK {
		bad = " (bad checksum)"
	}
	c.logLine(fmt.Sprintf("<- %s%s", printable(f.data), bad))
}

// printable shortens a packet for the log and quotes it if it is binary.
func printable(b []byte) string {
	const max = 200
	tail := ""
	if len(b) > max {
		tail = fmt.Sprintf("… (%d bytes)", len(b))
		b = b[:max]
	}
	for _, c := range b {
		if c < 0x20 || c >= 0x7f {
			return strconv.Quote(string(b)) + tail
		}
	}
	return string(b) + tail
}
