package gdbremote

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeStub is a GDB stub written for the tests, independently of the
// client's code: a QEMU-like target (threads p01.01 and p01.02, the amd64
// g layout, memory from a map) whose quirks the tests switch on.
type fakeStub struct {
	t    testing.TB
	conn net.Conn

	// Configuration, set before serve.
	features     string              // qSupported reply
	acceptNoAck  bool                // "OK" to QStartNoAckMode (else empty)
	connectStop  string              // sent as soon as the client connects
	rle          bool                // compress runs in replies
	corrupt      map[string]int      // packet prefix -> replies to send with a bad checksum first
	nak          map[string]int      // packet prefix -> times to NAK the client's packet
	override     map[string]string   // packet (exact) -> reply
	noZ0, noP    bool                // empty replies to Z0 / p and P
	noZ          bool                // empty replies to every Z and z
	gLen         int                 // bytes of the g block (default 608)
	thread       string              // the thread of "?" and steps (default p01.01)
	noX          bool                // empty reply to X
	targetXML    map[string]string   // annex -> document (qXfer:features:read)
	mem          map[uint64]byte     // readable memory; other addresses E14
	shortReads   bool                // m replies at most 5 bytes
	mMax         int                 // m longer than this: E22 (0: no limit)
	silent       map[string]bool     // packets never answered
	beforeStop   []string            // packets sent before a stop reply (O, %)
	beforeReply  map[string][]string // packet prefix -> packets sent before its reply
	resumeReply  map[string]string   // resume packet -> immediate stop reply
	closeOnPkt   string              // close the connection on this packet
	ackGate      chan struct{}       // if set, a resume packet is acked once it is closed
	regs         [608]byte
	threads      []string
	binaryUpload bool
	// ignoreIntr: ^C does not stop the target, and the 0x03 byte stays
	// unread until the stub waits for the ack of its next packet, which
	// it then sends again (gdbsx: putpkt loops until it reads '+')
	ignoreIntr bool
	unreadIntr bool

	mu      sync.Mutex
	got     []string // packets received, in order
	naks    int      // '-' received from the client
	intr    int      // 0x03 received
	noAck   bool
	running bool
	stopNow chan string
	done    chan struct{}
}

func newFakeStub(t testing.TB) *fakeStub {
	s := &fakeStub{
		t:           t,
		features:    "PacketSize=1000;vContSupported+;multiprocess+",
		corrupt:     map[string]int{},
		nak:         map[string]int{},
		override:    map[string]string{},
		mem:         map[uint64]byte{},
		silent:      map[string]bool{},
		resumeReply: map[string]string{},
		threads:     []string{"p01.01", "p01.02"},
		gLen:        608,
		thread:      "p01.01",
		stopNow:     make(chan string, 4),
		done:        make(chan struct{}),
	}
	binary.LittleEndian.PutUint64(s.regs[128:], 0xffffffff81000010) // rip
	binary.LittleEndian.PutUint32(s.regs[136:], 0x246)              // eflags
	binary.LittleEndian.PutUint64(s.regs[204:], 0x1234000)          // cr3
	return s
}

// start connects a client to the stub over net.Pipe.
func (s *fakeStub) start(opts Options) (*Conn, error) {
	cc, sc := net.Pipe()
	s.conn = sc
	go s.serve()
	s.t.Cleanup(func() { sc.Close(); <-s.done })
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Log == nil {
		opts.Log = traceTo(s.t)
	}
	return NewConn(s.t.Context(), cc, opts)
}

type stubEvent struct {
	kind byte // '$' packet, '+', '-', 3
	data string
	bad  bool
}

func (s *fakeStub) readEvents(ev chan<- stubEvent) {
	defer close(ev)
	r := bufio.NewReader(s.conn)
	for {
		b, err := r.ReadByte()
		if err != nil {
			return
		}
		switch b {
		case '+', '-', 3:
			ev <- stubEvent{kind: b}
		case '$':
			data, err := r.ReadString('#')
			if err != nil {
				return
			}
			data = data[:len(data)-1]
			var cs [2]byte
			if _, err := r.Read(cs[:1]); err != nil {
				return
			}
			if _, err := r.Read(cs[1:]); err != nil {
				return
			}
			sum := 0
			for i := 0; i < len(data); i++ {
				sum += int(data[i])
			}
			want, _ := strconv.ParseUint(string(cs[:]), 16, 8)
			ev <- stubEvent{kind: '$', data: data, bad: uint64(sum&255) != want}
		}
	}
}

// encode frames a reply, with runs compressed when s.rle.
func (s *fakeStub) encode(reply string, corrupt bool) string {
	body := reply
	if s.rle {
		var b strings.Builder
		for i := 0; i < len(reply); {
			j := i
			for j < len(reply) && reply[j] == reply[i] {
				j++
			}
			for n := j - i; n > 0; {
				b.WriteByte(reply[i]) // one, then its repeats
				n--
				if n < 3 {
					b.WriteString(reply[i : i+n])
					break
				}
				rep := min(n, 97)
				for c := byte(rep + 29); c == '#' || c == '$' || c == '+' || c == '-'; c = byte(rep + 29) {
					rep--
				}
				b.WriteByte('*')
				b.WriteByte(byte(rep + 29))
				n -= rep
			}
			i = j
		}
		body = b.String()
	}
	sum := 0
	for i := 0; i < len(body); i++ {
		sum += int(body[i])
	}
	if corrupt {
		sum++
	}
	return fmt.Sprintf("$%s#%02x", body, sum&255)
}

func (s *fakeStub) serve() {
	defer close(s.done)
	ev := make(chan stubEvent, 16)
	go s.readEvents(ev)
	if s.connectStop != "" {
		s.conn.Write([]byte(s.encode(s.connectStop, false)))
		// The client acks it (it starts in ack mode).
	}
	// send writes a reply; in ack mode it waits for the ack and sends
	// again on '-'.
	send := func(reply string, corrupt bool) bool {
		for {
			s.conn.Write([]byte(s.encode(reply, corrupt)))
			if s.noAck {
				return true
			}
			if s.unreadIntr {
				// the first byte read back is the ^C, not '+'
				s.unreadIntr = false
				continue
			}
			for {
				e, ok := <-ev
				if !ok {
					return false
				}
				if e.kind == '-' {
					s.mu.Lock()
					s.naks++
					s.mu.Unlock()
					corrupt = false
					break
				}
				if e.kind == '+' {
					return true
				}
			}
		}
	}
	for {
		var e stubEvent
		var ok bool
		select {
		case e, ok = <-ev:
			if !ok {
				return
			}
		case r := <-s.stopNow:
			s.mu.Lock()
			s.running = false
			s.mu.Unlock()
			for _, p := range s.beforeStop {
				if p[0] == '%' {
					s.conn.Write([]byte("%" + s.encode(p[1:], false)[1:]))
					continue
				}
				send(p, false)
			}
			if !send(r, false) {
				return
			}
			continue
		}
		switch e.kind {
		case '+':
			continue
		case '-':
			s.mu.Lock()
			s.naks++
			s.mu.Unlock()
			continue
		case 3:
			s.mu.Lock()
			s.intr++
			running := s.running
			s.mu.Unlock()
			if s.ignoreIntr {
				s.unreadIntr = true
				continue
			}
			if running {
				s.stopNow <- "T02thread:p01.01;"
			}
			continue
		}
		if e.bad {
			if !s.noAck {
				s.conn.Write([]byte("-"))
			}
			continue
		}
		s.mu.Lock()
		s.got = append(s.got, e.data)
		s.mu.Unlock()
		if !s.noAck {
			if n := s.prefixCount(s.nak, e.data); n > 0 {
				s.conn.Write([]byte("-"))
				continue
			}
			if strings.HasPrefix(e.data, "vCont;") && s.ackGate != nil {
				<-s.ackGate
			}
			s.conn.Write([]byte("+"))
		}
		if e.data == s.closeOnPkt {
			s.conn.Close()
			return
		}
		if s.silent[e.data] {
			continue
		}
		reply, ok := s.handle(e.data)
		if !ok {
			continue // a resume: the stop comes later
		}
		for prefix, pre := range s.beforeReply {
			if strings.HasPrefix(e.data, prefix) {
				for _, p := range pre {
					send(p, false)
				}
			}
		}
		corrupt := s.prefixCount(s.corrupt, e.data) > 0
		if !send(reply, corrupt) {
			return
		}
		if e.data == "QStartNoAckMode" && reply == "OK" {
			s.noAck = true
		}
	}
}

// prefixCount decrements and returns the count of the first prefix of
// data in m.
func (s *fakeStub) prefixCount(m map[string]int, data string) int {
	for p, n := range m {
		if n > 0 && strings.HasPrefix(data, p) {
			m[p] = n - 1
			return n
		}
	}
	return 0
}

// handle answers one packet; ok false for a resume without an immediate
// reply.
func (s *fakeStub) handle(p string) (string, bool) {
	if r, ok := s.override[p]; ok {
		return r, true
	}
	switch {
	case strings.HasPrefix(p, "qSupported"):
		return s.features, true
	case p == "QStartNoAckMode":
		if s.acceptNoAck {
			return "OK", true
		}
		return "", true
	case p == "vCont?":
		return "vCont;c;C;s;S", true
	case p == "?":
		return "T05thread:" + s.thread + ";", true
	case strings.HasPrefix(p, "Hg"), strings.HasPrefix(p, "Hc"):
		return "OK", true
	case p == "qfThreadInfo":
		return "m" + strings.Join(s.threads, ","), true
	case p == "qsThreadInfo":
		return "l", true
	case strings.HasPrefix(p, "qXfer:features:read:"):
		rest := strings.TrimPrefix(p, "qXfer:features:read:")
		annex, rng, _ := strings.Cut(rest, ":")
		doc, ok := s.targetXML[annex]
		if !ok {
			return "E00", true
		}
		o, l, _ := strings.Cut(rng, ",")
		off, _ := strconv.ParseUint(o, 16, 32)
		n, _ := strconv.ParseUint(l, 16, 32)
		if int(off) >= len(doc) {
			return "l", true
		}
		end := int(off + n)
		kind := "m"
		if end >= len(doc) {
			end, kind = len(doc), "l"
		}
		return kind + escapeBinary(doc[off:end]), true
	case p == "g":
		return hex.EncodeToString(s.regs[:s.gLen]), true
	case strings.HasPrefix(p, "G"):
		b, err := hex.DecodeString(p[1:])
		if err != nil || len(b) != s.gLen {
			return "E22", true
		}
		copy(s.regs[:], b)
		return "OK", true
	case strings.HasPrefix(p, "p"):
		if s.noP {
			return "", true
		}
		n, _ := strconv.ParseUint(p[1:], 16, 16)
		switch n {
		case 16:
			return hex.EncodeToString(s.regs[128:136]), true
		case 17:
			return hex.EncodeToString(s.regs[136:140]), true
		case 29:
			return hex.EncodeToString(s.regs[204:212]), true
		}
		return "E14", true
	case strings.HasPrefix(p, "P"):
		if s.noP {
			return "", true
		}
		n, v, _ := strings.Cut(p[1:], "=")
		b, _ := hex.DecodeString(v)
		if n == "10" && len(b) == 8 {
			copy(s.regs[128:], b)
			return "OK", true
		}
		return "E22", true
	case strings.HasPrefix(p, "m"), strings.HasPrefix(p, "x"):
		a, l, _ := strings.Cut(p[1:], ",")
		addr, _ := strconv.ParseUint(a, 16, 64)
		n, _ := strconv.ParseUint(l, 16, 32)
		if p[0] == 'x' && !s.binaryUpload {
			return "", true
		}
		if s.mMax > 0 && int(n) > s.mMax {
			return "E22", true
		}
		if s.shortReads && n > 5 {
			n = 5
		}
		var out []byte
		for i := uint64(0); i < n; i++ {
			b, ok := s.mem[addr+i]
			if !ok {
				return "E14", true
			}
			out = append(out, b)
		}
		if p[0] == 'x' {
			return "b" + escapeBinary(string(out)), true
		}
		return hex.EncodeToString(out), true
	case strings.HasPrefix(p, "M"), strings.HasPrefix(p, "X"):
		if p[0] == 'X' && s.noX {
			return "", true
		}
		hdr, data, _ := strings.Cut(p[1:], ":")
		a, l, _ := strings.Cut(hdr, ",")
		addr, _ := strconv.ParseUint(a, 16, 64)
		n, _ := strconv.ParseUint(l, 16, 32)
		var b []byte
		if p[0] == 'M' {
			b, _ = hex.DecodeString(data)
		} else {
			b = unescapeBinary(data)
		}
		if uint64(len(b)) != n {
			return "E22", true
		}
		for i, c := range b {
			if _, ok := s.mem[addr+uint64(i)]; !ok {
				return "E14", true
			}
			s.mem[addr+uint64(i)] = c
		}
		return "OK", true
	case s.noZ && (p[0] == 'Z' || p[0] == 'z'):
		return "", true
	case strings.HasPrefix(p, "Z0"), strings.HasPrefix(p, "z0"):
		if s.noZ0 {
			return "", true
		}
		return "OK", true
	case strings.HasPrefix(p, "Z1"), strings.HasPrefix(p, "z1"):
		return "OK", true
	case strings.HasPrefix(p, "vCont;"), p == "c", p == "s":
		if r, ok := s.resumeReply[p]; ok {
			return r, true
		}
		s.mu.Lock()
		s.running = true
		s.mu.Unlock()
		if strings.HasPrefix(p, "vCont;s") || p == "s" {
			tid := s.thread
			if _, t, ok := strings.Cut(p, ":"); ok {
				tid = t
			}
			s.stopNow <- "T05thread:" + tid + ";"
		}
		return "", false
	case p == "D":
		return "E22", true
	case strings.HasPrefix(p, "D;"):
		return "OK", true
	}
	return "", true
}

func escapeBinary(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '#' || c == '$' || c == '}' || c == '*' {
			b.WriteByte('}')
			c ^= 0x20
		}
		b.WriteByte(c)
	}
	return b.String()
}

func unescapeBinary(s string) []byte {
	var b []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '}' && i+1 < len(s) {
			i++
			c = s[i] ^ 0x20
		}
		b = append(b, c)
	}
	return b
}

func (s *fakeStub) packets() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

func (s *fakeStub) count(prefix string) int {
	n := 0
	for _, p := range s.packets() {
		if strings.HasPrefix(p, prefix) {
			n++
		}
	}
	return n
}
