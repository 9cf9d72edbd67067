package gdbtarget_test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/gdbtarget"
)

// gdbsxStub plays Xen's gdbsx as its source (tools/debugger/gdbsx) and the
// lab show it behaving, written for this test without gprobes' client
// code: one vCPU numbered 0 ("m0l", "thread:0"), acks kept (no
// QStartNoAckMode), no Z packets, a 164-byte g block, ^C ignored. A ^C
// read while the stub waits for the ack of a packet makes it send that
// packet again. A continue returns only when the domain pauses (a hit or
// xl pause), which the test decides (pause). D ends the session without
// a reply: gdbsx unpauses the domain and closes the connection.
type gdbsxStub struct {
	t     *testing.T
	ln    net.Listener
	pause chan string // the stop reply a paused domain gives
	mu    sync.Mutex
	got   []string // packets received, in order
	intr  int      // ^C bytes read
	cont  int      // continues received
	gotD  chan struct{}
}

func newGdbsxStub(t *testing.T) *gdbsxStub {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &gdbsxStub{t: t, ln: ln, pause: make(chan string, 1), gotD: make(chan struct{})}
	t.Cleanup(func() { ln.Close() })
	go s.serve()
	return s
}

func (s *gdbsxStub) addr() string { return s.ln.Addr().String() }

func (s *gdbsxStub) counts() (intr, cont int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.intr, s.cont
}

func (s *gdbsxStub) serve() {
	c, err := s.ln.Accept()
	if err != nil {
		return
	}
	defer c.Close()
	r := bufio.NewReader(c)
	// readPacket returns the next packet's data, counting ^C bytes
	readPacket := func() (string, bool) {
		for {
			b, err := r.ReadByte()
			if err != nil {
				return "", false
			}
			switch b {
			case 0x03:
				s.mu.Lock()
				s.intr++
				s.mu.Unlock()
				continue
			case '$':
			default:
				continue // acks of ours
			}
			data, err := r.ReadString('#')
			if err != nil {
				return "", false
			}
			if _, err := r.Discard(2); err != nil {
				return "", false
			}
			if _, err := c.Write([]byte("+")); err != nil {
				return "", false
			}
			return strings.TrimSuffix(data, "#"), true
		}
	}
	// putPacket sends a reply and waits for its ack; each ^C read
	// meanwhile sends it again (gdbsx's putpkt)
	putPacket := func(data string) bool {
		sum := 0
		for i := 0; i < len(data); i++ {
			sum += int(data[i])
		}
		frame := fmt.Sprintf("$%s#%02x", data, sum&0xff)
		for {
			if _, err := c.Write([]byte(frame)); err != nil {
				return false
			}
			b, err := r.ReadByte()
			if err != nil {
				return false
			}
			if b == '+' {
				return true
			}
			if b == 0x03 {
				s.mu.Lock()
				s.intr++
				s.mu.Unlock()
			}
		}
	}
	regs := strings.Repeat("00", 164)
	for {
		pkt, ok := readPacket()
		if !ok {
			return
		}
		s.mu.Lock()
		s.got = append(s.got, pkt)
		s.mu.Unlock()
		var reply string
		switch {
		case pkt == "D":
			close(s.gotD)
			return // no reply: gdbsx detaches and closes
		case pkt == "?":
			reply = "T05thread:0;"
		case pkt == "qfThreadInfo":
			reply = "m0l"
		case strings.HasPrefix(pkt, "H"), strings.HasPrefix(pkt, "M"), strings.HasPrefix(pkt, "G"):
			reply = "OK"
		case pkt == "g":
			reply = regs
		case strings.HasPrefix(pkt, "m"):
			reply = "E03"
		case pkt == "c":
			s.mu.Lock()
			s.cont++
			s.mu.Unlock()
			reply = <-s.pause // blocks, as xg_resume_n_wait does
		default:
			reply = "" // not supported
		}
		if !putPacket(reply) {
			return
		}
	}
}

// waitFor polls cond until it holds, or fails saying what it saw.
func waitFor(t *testing.T, what string, cond func() bool, seen func() string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %s", what, seen())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestGdbsxVCPUZero: gdbsx numbers its vCPUs from 0, and ignores ^C. A
// command to the engine (here Modules, as the daemon's remove asks for
// after taking the probes out) is served at the next stop, which is the
// domain paused (xl pause, reported as T02thread:0;). The engine must
// then let the guest go on (a continue), and close through a D at the
// stop after that. It once took vCPU 0's stop for "a kick that stopped
// no thread": it did not resume, its next wait found nothing running, the
// target was taken for gone, and the daemon's close sent no D: gdbsx held
// the domain paused for good.
func TestGdbsxVCPUZero(t *testing.T) {
	stub := newGdbsxStub(t)
	eng, err := engine.Start(gdbtarget.Open(stub.addr(), gdbtarget.Options{Timeout: 10 * time.Second}), engine.Options{Warn: func(m string) { t.Log("engine:", m) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Release(); err != nil {
		t.Fatal(err)
	}
	seen := func() string {
		stub.mu.Lock()
		defer stub.mu.Unlock()
		return fmt.Sprintf("packets %q, %d ^C, engine end %q", stub.got, stub.intr, eng.EndReason())
	}
	waitFor(t, "the guest to run", func() bool { _, c := stub.counts(); return c == 1 }, seen)

	// a command: its kick (^C) is ignored (gdbsx does not read while the
	// domain runs); a pause serves it. A pause before the command was
	// queued only stops the guest, which the engine lets go on: pause
	// again until it is served
	mods := make(chan []string, 1)
	go func() { mods <- eng.Modules() }()
	served := false
	c0 := 0 // continues before the pause that served the command
	for i := 0; i < 20 && !served; i++ {
		_, c0 = stub.counts()
		stub.pause <- "T02thread:0;"
		waitFor(t, "the command served or the guest resumed", func() bool {
			select {
			case m := <-mods:
				if len(m) != 0 {
					t.Errorf("modules %q, want none", m)
				}
				served = true
				return true
			default:
			}
			_, c := stub.counts()
			return c > c0
		}, seen)
	}
	if !served {
		t.Fatalf("the command was not served in 20 pauses: %s", seen())
	}
	// the guest goes on after the command
	waitFor(t, "the engine to resume the guest after the command", func() bool { _, c := stub.counts(); return c > c0 }, seen)
	if r := eng.EndReason(); r != "" {
		t.Fatalf("the target ended: %s", r)
	}

	// the close: served at the next pause, through D
	closed := make(chan error, 1)
	go func() { _, err := eng.Close(); closed <- err }()
	for i := 0; ; i++ {
		stub.pause <- "T02thread:0;"
		_, c1 := stub.counts()
		select {
		case <-stub.gotD:
		case <-time.After(30 * time.Second):
			_, c := stub.counts()
			if c > c1 && i < 20 {
				continue // a pause before the close was queued
			}
			t.Fatalf("no D after the pause: the domain would stay paused: %s", seen())
		}
		break
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("close did not return: %s", seen())
	}
}
