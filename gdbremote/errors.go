package gdbremote

import (
	"errors"
	"fmt"
	"strconv"
	"syscall"
)

// Sentinels, matched with errors.Is. A *PacketError wraps one of them when
// the packet failed for that reason.
var (
	// ErrClosed: the connection is gone. The stub closed it (a guest that
	// powered off, a gdbserver whose process exited), or Close was called.
	ErrClosed = errors.New("connection closed")

	// ErrUnsupported: the stub answered a packet with an empty reply, the
	// protocol's way of saying it does not implement it.
	ErrUnsupported = errors.New("not supported by the stub (empty reply)")

	// ErrNAK: the stub refused the packet six times ('-'): it cannot read
	// it (gdbsx miscounts the checksum of binary X packets).
	ErrNAK = errors.New("the stub rejected the packet 6 times (NAK)")

	// ErrTimeout: no reply within Options.Timeout. The connection is closed
	// with it, since a late reply would be taken for the next packet's.
	ErrTimeout = errors.New("no reply in time; connection closed")

	// ErrRunning: a request that needs a stopped target was made while the
	// target runs (after Continue or Step, before Wait returned the stop).
	// Interrupt it and Wait first.
	ErrRunning = errors.New("the target is running: Interrupt and Wait for the stop first")

	// ErrNotRunning: Wait without a Continue or Step before it.
	ErrNotRunning = errors.New("the target is stopped: nothing to wait for")

	// ErrChecksum: a reply arrived with a bad checksum in no-ack mode (in
	// ack mode it is asked for again).
	ErrChecksum = errors.New("reply with a bad checksum")
)

// PacketError is a packet that failed: the packet as sent (without the
// framing), the stub's reply, and why. It reads
//
//	gdb packet "Z0,ffffffff81234567,1": E22: invalid argument
//	gdb packet "qXfer:features:read:target.xml:0,ffb": not supported by the stub (empty reply)
//	gdb packet "m ffffffff81000000,800": connection closed: EOF
type PacketError struct {
	Packet string // the packet's data; long packets are shortened
	Reply  string // the stub's reply, shortened; "" for none or empty
	Err    error  // a sentinel above, or a description of the reply
}

func (e *PacketError) Error() string {
	return fmt.Sprintf("gdb packet %q: %v", e.Packet, e.Err)
}

func (e *PacketError) Unwrap() error { return e.Err }

// Errno is the number of an "E NN" reply, or -1 when the reply was not one.
func (e *PacketError) Errno() int {
	if n, ok := errnoOf(e.Reply); ok {
		return n
	}
	return -1
}

// ReplyError describes an error reply ("E NN" or "E.message").
type ReplyError struct {
	Reply string
}

func (e *ReplyError) Error() string {
	r := e.Reply
	if len(r) > 2 && r[1] == '.' {
		return "error: " + r[2:] // "E.message", gdbserver's newer form
	}
	n, ok := errnoOf(r)
	if !ok {
		return "error reply " + strconv.Quote(r)
	}
	// Stubs fill NN with an errno written in decimal digits (QEMU: E14
	// for a bad address, E22 for a bad argument) or with a code of their
	// own (gdbserver: E01 for "failed"); 1 is not read as EPERM.
	switch n {
	case 0:
		return r + ": error"
	case 1:
		return r + ": failed"
	}
	return r + ": " + syscall.Errno(n).Error()
}

// errnoOf parses "ENN".
func errnoOf(r string) (int, bool) {
	if len(r) != 3 || r[0] != 'E' {
		return 0, false
	}
	n, err := strconv.Atoi(r[1:])
	if err != nil {
		// Not decimal: a hex code such as "E1a".
		v, err := strconv.ParseUint(r[1:], 16, 8)
		if err != nil {
			return 0, false
		}
		return int(v), true
	}
	return n, true
}

// isErrorReply reports whether a reply is "E NN" or "E.text".
func isErrorReply(r []byte) bool {
	if len(r) >= 2 && r[0] == 'E' && r[1] == '.' {
		return true
	}
	return len(r) == 3 && r[0] == 'E' && isHex(r[1:])
}

// short shortens a packet for an error message.
func short(b []byte) string {
	const max = 80
	if len(b) <= max {
		return string(b)
	}
	return string(b[:max]) + "…"
}
