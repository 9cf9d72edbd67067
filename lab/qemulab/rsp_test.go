package qemulab

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"time"
)

// rsp is a minimal GDB remote serial protocol client, enough for the lab's
// own tests (the project's real client lives elsewhere).
type rsp struct {
	conn    net.Conn
	r       *bufio.Reader
	packets chan string
	errc    chan error

	connectStop string // the stop packet QEMU sent on connection
	supported   string // the qSupported reply
}

func dialRSP(addr string) (*rsp, error) {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c := &rsp{conn: conn, r: bufio.NewReader(conn), packets: make(chan string, 16), errc: make(chan error, 1)}
	go c.readLoop()
	// QEMU 7.2 quirks: (1) when a client connects to a running VM, QEMU
	// stops it and reports that stop unasked ("T02thread:01;") before any
	// request; (2) once any client has negotiated multiprocess+, every later
	// connection is in multiprocess mode ("thread:p01.01", and a bare "D"
	// answers E22). So always negotiate multiprocess+ (and detach with
	// "D;1"), and drop stop packets that come before the qSupported reply.
	if err := c.send("qSupported:multiprocess+;swbreak+;hwbreak+"); err != nil {
		conn.Close()
		return nil, err
	}
	for {
		p, err := c.recv(10 * time.Second)
		if err != nil {
			conn.Close()
			return nil, err
		}
		if strings.HasPrefix(p, "T") || strings.HasPrefix(p, "S") {
			c.connectStop = p
			continue
		}
		c.supported = p
		break
	}
	return c, nil
}

func (c *rsp) Close() { c.conn.Close() }

// readLoop acknowledges and queues every packet the stub sends.
func (c *rsp) readLoop() {
	for {
		b, err := c.r.ReadByte()
		if err != nil {
			c.errc <- err
			close(c.packets)
			return
		}
		switch b {
		case '+', '-':
			continue
		case '$':
			data, err := c.r.ReadString('#')
			if err != nil {
				c.errc <- err
				close(c.packets)
				return
			}
			if _, err := c.r.Discard(2); err != nil {
				c.errc <- err
				close(c.packets)
				return
			}
			c.conn.Write([]byte{'+'})
			c.packets <- strings.TrimSuffix(data, "#")
		}
	}
}

func (c *rsp) send(data string) error {
	var sum byte
	for i := 0; i < len(data); i++ {
		sum += data[i]
	}
	_, err := fmt.Fprintf(c.conn, "$%s#%02x", data, sum)
	return err
}

func (c *rsp) recv(timeout time.Duration) (string, error) {
	select {
	case p, ok := <-c.packets:
		if !ok {
			return "", fmt.Errorf("rsp: connection closed: %v", <-c.errc)
		}
		return p, nil
	case <-time.After(timeout):
		return "", fmt.Errorf("rsp: no reply in %v", timeout)
	}
}

func (c *rsp) cmd(data string, timeout time.Duration) (string, error) {
	if err := c.send(data); err != nil {
		return "", err
	}
	return c.recv(timeout)
}

// interrupt stops a running target (^C) and returns the stop reply.
func (c *rsp) interrupt(timeout time.Duration) (string, error) {
	if _, err := c.conn.Write([]byte{0x03}); err != nil {
		return "", err
	}
	return c.recv(timeout)
}

// rip reads the registers with 'g'; QEMU's x86_64 layout without target
// description: rax..r15 (16 x 8 bytes), then rip.
func (c *rsp) rip() (uint64, error) {
	g, err := c.cmd("g", 10*time.Second)
	if err != nil {
		return 0, err
	}
	b, err := hex.DecodeString(g)
	if err != nil || len(b) < 136 {
		return 0, fmt.Errorf("rsp: bad g reply %.40q", g)
	}
	return binary.LittleEndian.Uint64(b[128:136]), nil
}

func (c *rsp) readMem(addr uint64, n int) ([]byte, error) {
	r, err := c.cmd(fmt.Sprintf("m%x,%x", addr, n), 10*time.Second)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(r, "E") && len(r) == 3 {
		return nil, fmt.Errorf("rsp: read %#x: %s", addr, r)
	}
	return hex.DecodeString(r)
}

// serveBreakpoint runs the target with a breakpoint at addr, stepping over
// every hit (z0, s, Z0, c), until stop returns true for the hit count (the
// target is then left stopped at the breakpoint, still inserted) or the
// connection ends. It returns the hits and the last packet that was not a
// breakpoint stop (e.g. QEMU's "W00" when the guest powers off).
func (c *rsp) serveBreakpoint(addr uint64, stop func(hits int) bool) (hits int, last string, err error) {
	bp := fmt.Sprintf("Z0,%x,1", addr)
	unbp := fmt.Sprintf("z0,%x,1", addr)
	if r, err := c.cmd(bp, 10*time.Second); err != nil || r != "OK" {
		return 0, "", fmt.Errorf("%s: %q %v", bp, r, err)
	}
	if err := c.send("c"); err != nil {
		return 0, "", err
	}
	for {
		var p string
		var ok bool
		select {
		case p, ok = <-c.packets:
		case <-time.After(60 * time.Second):
			return hits, last, fmt.Errorf("no stop in 60s after %d hits (last packet %q)", hits, last)
		}
		if !ok {
			return hits, last, nil // connection closed
		}
		if !strings.HasPrefix(p, "T05") {
			last = p
			continue
		}
		rip, err := c.rip()
		if err != nil {
			return hits, last, err
		}
		if rip != addr {
			return hits, last, fmt.Errorf("stop %q at %#x, not at the breakpoint %#x", p, rip, addr)
		}
		hits++
		if stop(hits) {
			return hits, last, nil
		}
		for _, step := range []string{unbp, "s", bp} {
			if r, err := c.cmd(step, 10*time.Second); err != nil || (step != "s" && r != "OK") {
				if err != nil && strings.Contains(err.Error(), "closed") {
					return hits, last, nil
				}
				return hits, last, fmt.Errorf("%s: %q %v", step, r, err)
			}
		}
		if err := c.send("c"); err != nil {
			return hits, last, nil
		}
	}
}

// stopInRange returns a stopped rip within [lo, hi): a guest caught in user
// space (its init between commands, on a loaded host) is let run for a
// moment and stopped again, up to 20 times.
func (c *rsp) stopInRange(lo, hi uint64) (uint64, error) {
	var rip uint64
	var err error
	for try := 0; try < 20; try++ {
		if try > 0 {
			if err := c.send("c"); err != nil {
				return 0, err
			}
			time.Sleep(50 * time.Millisecond)
			if _, err := c.interrupt(10 * time.Second); err != nil {
				return 0, err
			}
		}
		if rip, err = c.rip(); err != nil {
			return 0, err
		}
		if rip >= lo && rip < hi {
			return rip, nil
		}
	}
	return rip, fmt.Errorf("rip %#x never within %#x..%#x", rip, lo, hi)
}
