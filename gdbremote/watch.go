package gdbremote

import (
	"context"
	"fmt"
	"strconv"
)

// WatchKind is a kind of watchpoint: the Z packet's type.
type WatchKind byte

const (
	WatchWrite  WatchKind = '2' // Z2: writes; the stop says "watch:ADDR"
	WatchRead   WatchKind = '3' // Z3: reads; "rwatch:ADDR"
	WatchAccess WatchKind = '4' // Z4: reads and writes; "awatch:ADDR"
)

func (k WatchKind) String() string {
	switch k {
	case WatchWrite:
		return "write"
	case WatchRead:
		return "read"
	case WatchAccess:
		return "access"
	}
	return fmt.Sprintf("watchkind(%c)", byte(k))
}

// SetWatchpoint asks the stub to stop the target after an access of kind
// to any of the size bytes at addr (Z2, Z3, Z4). The stop reply names it
// (Stop.Reason "watch", "rwatch", "awatch"; Stop.Addr). A stub without
// watchpoints (gdbsx) answers empty: ErrUnsupported.
func (c *Conn) SetWatchpoint(kind WatchKind, addr uint64, size int) error {
	return c.watchpoint('Z', kind, addr, size)
}

// ClearWatchpoint removes a watchpoint set by SetWatchpoint with the same
// arguments (z2, z3, z4).
func (c *Conn) ClearWatchpoint(kind WatchKind, addr uint64, size int) error {
	return c.watchpoint('z', kind, addr, size)
}

func (c *Conn) watchpoint(op byte, kind WatchKind, addr uint64, size int) error {
	switch kind {
	case WatchWrite, WatchRead, WatchAccess:
	default:
		return fmt.Errorf("gdbremote: watchpoint kind %v", kind)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b := append(c.pbuf[:0], op, byte(kind), ',')
	b = strconv.AppendUint(b, addr, 16)
	b = append(b, ',')
	b = strconv.AppendUint(b, uint64(size), 16)
	c.pbuf = b
	return c.requestOK(context.Background(), b)
}
