package gdbremote

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// pageSize is where reads are split, so that an unreadable page is named
// exactly: QEMU fails a whole m packet (E14) when any byte of it is
// unmapped.
const pageSize = 4096

// MemError is a memory access that failed at Addr, after Done of the
// Len bytes asked for had been transferred.
type MemError struct {
	Write bool
	Addr  uint64 // the first address that could not be read or written
	Start uint64 // the start of the access
	Len   int
	Done  int
	Err   error // the *PacketError
}

func (e *MemError) Error() string {
	op := "read"
	if e.Write {
		op = "write"
	}
	if e.Done == 0 {
		return fmt.Sprintf("gdbremote: %s %d bytes at %#x: %v", op, e.Len, e.Addr, e.Err)
	}
	return fmt.Sprintf("gdbremote: %s memory at %#x (%d of %d bytes from %#x done): %v",
		op, e.Addr, e.Done, e.Len, e.Start, e.Err)
}

func (e *MemError) Unwrap() error { return e.Err }

// readChunk and writeChunk are the most bytes of memory one packet
// carries, rounded down to a power of two so that the packets of an aligned
// access stay within pages. A read reply holds twice as many hex digits as
// bytes: half the stub's PacketSize, as gdb asks for (QEMU 7.2, PacketSize
// 4096, refuses m longer than 2048 bytes with E22). A write request must
// fit in PacketSize itself, with its "Maddr,len:" header, and escaped
// binary data may take two bytes per byte as hex does.
func (c *Conn) readChunk() int  { return pow2floor(c.packetSize / 2) }
func (c *Conn) writeChunk() int { return pow2floor((c.packetSize - 32) / 2) }

func pow2floor(n int) int {
	p := 16
	for p*2 <= n {
		p *= 2
	}
	return p
}

// ReadMem fills p from target memory at addr, with m packets (hex) or, when
// the stub offers binary-upload, x packets. A read is split into packets of
// at most readChunk bytes that do not cross a page; a short reply is continued
// where it stopped. A failure is a *MemError naming the first address that
// could not be read.
func (c *Conn) ReadMem(addr uint64, p []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running.Load() {
		return &MemError{Addr: addr, Start: addr, Len: len(p), Err: c.packetErr([]byte("m"), nil, ErrRunning)}
	}
	ctx := context.Background()
	max := c.readChunk()
	done := 0
	for done < len(p) {
		a := addr + uint64(done)
		n := len(p) - done
		if n > max {
			n = max
		}
		if toPage := pageSize - int(a%pageSize); n > toPage {
			n = toPage
		}
		got, err := c.readPart(ctx, a, p[done:done+n])
		if err != nil {
			return &MemError{Addr: a, Start: addr, Len: len(p), Done: done, Err: err}
		}
		done += got
	}
	return nil
}

func (c *Conn) readPart(ctx context.Context, a uint64, p []byte) (int, error) {
	if c.hasBinRead > 0 {
		pkt := c.memPacket('x', a, len(p))
		r, err := c.request(ctx, pkt)
		if err != nil {
			return 0, err
		}
		if r[0] != 'b' {
			return 0, c.packetErr(pkt, r, fmt.Errorf("unexpected reply %q (want b...)", short(r)))
		}
		data, err := unescape(r[1:])
		if err != nil {
			return 0, c.packetErr(pkt, r, err)
		}
		if len(data) == 0 || len(data) > len(p) {
			return 0, c.packetErr(pkt, r, fmt.Errorf("%d bytes for %d asked", len(data), len(p)))
		}
		return copy(p, data), nil
	}
	pkt := c.memPacket('m', a, len(p))
	r, err := c.request(ctx, pkt)
	if err != nil {
		return 0, err
	}
	if len(r)%2 != 0 || len(r)/2 > len(p) {
		return 0, c.packetErr(pkt, r, fmt.Errorf("%d hex digits for %d bytes asked", len(r), len(p)))
	}
	if _, err := decodeHex(p[:len(r)/2], r); err != nil {
		return 0, c.packetErr(pkt, r, err)
	}
	return len(r) / 2, nil
}

// memPacket builds "<op>addr,len" in c.pbuf.
func (c *Conn) memPacket(op byte, a uint64, n int) []byte {
	b := append(c.pbuf[:0], op)
	b = strconv.AppendUint(b, a, 16)
	b = append(b, ',')
	b = strconv.AppendUint(b, uint64(n), 16)
	c.pbuf = b
	return b
}

// WriteMem writes p to target memory at addr: with X (binary) when the stub
// accepts it, else M (hex). QEMU's and gdbserver's breakpoints are not in
// memory as far as m and M are concerned (QEMU's TCG breakpoints never are;
// gdbserver shadows its int3s), so writing over one is safe.
func (c *Conn) WriteMem(addr uint64, p []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running.Load() {
		return &MemError{Write: true, Addr: addr, Start: addr, Len: len(p), Err: c.packetErr([]byte("M"), nil, ErrRunning)}
	}
	ctx := context.Background()
	max := c.writeChunk()
	done := 0
	for done < len(p) {
		a := addr + uint64(done)
		n := len(p) - done
		if n > max {
			n = max
		}
		if toPage := pageSize - int(a%pageSize); n > toPage {
			n = toPage
		}
		if err := c.writePart(ctx, a, p[done:done+n]); err != nil {
			return &MemError{Write: true, Addr: a, Start: addr, Len: len(p), Done: done, Err: err}
		}
		done += n
	}
	return nil
}

func (c *Conn) writePart(ctx context.Context, a uint64, p []byte) error {
	if c.hasX >= 0 {
		pkt := append(c.memPacket('X', a, len(p)), ':')
		pkt = appendEscaped(pkt, p)
		c.pbuf = pkt
		err := c.requestOK(ctx, pkt)
		switch {
		case err == nil:
			c.hasX = 1
			return nil
		case (errors.Is(err, ErrUnsupported) || errors.Is(err, ErrNAK)) && c.hasX == 0:
			// not implemented, or not readable by the stub (gdbsx NAKs
			// binary data): M from now on
			c.hasX = -1
			c.logf("note: no usable X packet (%v); memory is written with M", err)
		default:
			return err
		}
	}
	pkt := append(c.memPacket('M', a, len(p)), ':')
	pkt = appendHex(pkt, p)
	c.pbuf = pkt
	return c.requestOK(ctx, pkt)
}
