package bpf

import (
	"encoding/binary"
	"fmt"

	"github.com/gprobes/gprobes/rpn"
)

// Record is one record a probe committed: exit 1, exit 2 or rem with the
// log, or an exception.
type Record struct {
	Probe     uint32 // Options.Probe
	CPU       uint32
	PID, TID  uint32 // root PID namespace
	TS        uint64 // Unix ns (CLOCK_MONOTONIC plus the offset of Maps.SetClock)
	Major     uint16
	Minor     uint16
	Exit      uint8 // 1, 2; 0 for an exception
	Exception rpn.Exception
	Truncated bool
	Rem       bool
	PC        uint32 // exception: byte offset in Module.Code of the instruction
	Addr      uint64 // invalid-address: the address
	Comm      string // the task's command name (its comm)
	Log       []byte
}

// ParseRecord decodes one record from the ring buffer. The log aliases b.
func ParseRecord(b []byte) (Record, error) {
	if len(b) < HeaderSize {
		return Record{}, fmt.Errorf("bpf: record of %d bytes, shorter than its header", len(b))
	}
	le := binary.LittleEndian
	r := Record{
		Probe:     le.Uint32(b[HdrProbe:]),
		CPU:       le.Uint32(b[HdrCPU:]),
		PID:       le.Uint32(b[HdrPID:]),
		TID:       le.Uint32(b[HdrTID:]),
		TS:        le.Uint64(b[HdrTS:]),
		Major:     le.Uint16(b[HdrMajor:]),
		Minor:     le.Uint16(b[HdrMinor:]),
		Exit:      b[HdrExit],
		Exception: rpn.Exception(b[HdrException]),
		Truncated: b[HdrTruncated] != 0,
		Rem:       b[HdrFlags]&FlagRem != 0,
		PC:        le.Uint32(b[HdrPC:]),
		Addr:      le.Uint64(b[HdrAddr:]),
		Comm:      cString(b[HdrComm : HdrComm+16]),
	}
	n := int(le.Uint32(b[HdrLogLen:]))
	if HeaderSize+n > len(b) {
		return Record{}, fmt.Errorf("bpf: record says %d bytes of log, has %d", n, len(b)-HeaderSize)
	}
	r.Log = b[HeaderSize : HeaderSize+n]
	return r, nil
}

// cString is a NUL-padded string.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
