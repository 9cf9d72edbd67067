package probe

import (
	"strconv"
	"strings"
	"time"
)

// RecordKind says what a Record is.
type RecordKind string

const (
	RecordLog       RecordKind = "log"       // a probe's log, committed after its instruction
	RecordTrace     RecordKind = "trace"     // a trace event (exit trace)
	RecordException RecordKind = "exception" // a program's exception
)

// Record is one committed record: a probe's log after its instruction
// executed, a trace event, or an exception record.
type Record struct {
	Time      time.Time  `json:"time"`
	Kind      RecordKind `json:"kind"`
	Module    string     `json:"module"`
	Major     uint16     `json:"major"`
	Minor     uint16     `json:"minor"`
	Location  string     `json:"location"`
	Probe     string     `json:"probe,omitempty"` // the probe's kind, when not an offset probe: "retprobe", "watch" (KindName)
	Address   uint64     `json:"address"`
	Pid       int        `json:"pid"`
	Tid       int        `json:"tid"`
	CPU       int        `json:"cpu"`
	Exit      uint8      `json:"exit"`
	Data      []byte     `json:"data"`
	Truncated bool       `json:"truncated"`
	Exception string     `json:"exception,omitempty"`
	PC        uint32     `json:"pc,omitempty"`
	Line      string     `json:"line,omitempty"`
	Dump      string     `json:"dump,omitempty"`
	Debugger  string     `json:"debugger,omitempty"`
	// Stacks are the stacks the program logged (log ustack, log
	// kstack), with their frames' names.
	Stacks []Stack `json:"stacks,omitempty"`

	// KeepOnFault is the probe's logonfault = yes, for the mechanism
	// that commits the record: a record made before the probed
	// instruction runs is dropped if the instruction faults, unless
	// this is set. Never written out.
	KeepOnFault bool `json:"-"`
}

// Sink receives committed records, in order. It must not block for long:
// what runs the probes waits for it (a traced thread, a ring's reader).
type Sink interface{ Commit(*Record) }

// BatchSink is a Sink that also takes records that were committed in the
// target already and handed over at once (a drain of a jump pad's ring),
// in order: nothing waits for them, and a writer may write them in one go.
type BatchSink interface {
	Sink
	CommitBatch([]*Record)
}

// SinkFunc adapts a function to a Sink.
type SinkFunc func(*Record)

func (f SinkFunc) Commit(r *Record) { f(r) }

// Stack is one stack a record's program logged (log ustack, log kstack):
// its frames, innermost first, named where the target could name them.
// The addresses are in the record's data too (8 bytes each, zeros after
// the last frame); Stacks are in the order the program logged them.
type Stack struct {
	Kind   string  `json:"kind"` // "user" or "kernel"
	Frames []Frame `json:"frames"`
}

// Frame is one frame of a Stack: the address (the hit's in the first
// frame, a return address in the others) and, when known, the function
// it is in, the offset of the address from the function's start and the
// module (the file mapped there, "vmlinux" or a kernel module's name).
type Frame struct {
	Address  Hex    `json:"address"`
	Function string `json:"function,omitempty"`
	Offset   uint64 `json:"offset,omitempty"`
	Module   string `json:"module,omitempty"`
}

// String shows a frame as "function+0xOFF (module)", or what of it is
// known: "0x7f12... (module)", "0x7f12...".
func (f Frame) String() string {
	s := "0x" + strconv.FormatUint(uint64(f.Address), 16)
	if f.Function != "" {
		s = f.Function + "+0x" + strconv.FormatUint(f.Offset, 16)
	}
	if f.Module != "" {
		s += " (" + f.Module + ")"
	}
	return s
}

// Hex is an address written as "0x..." in JSON.
type Hex uint64

func (h Hex) MarshalText() ([]byte, error) {
	return []byte("0x" + strconv.FormatUint(uint64(h), 16)), nil
}

func (h *Hex) UnmarshalText(b []byte) error {
	s := strings.TrimPrefix(strings.TrimPrefix(string(b), "0x"), "0X")
	v, err := strconv.ParseUint(s, 16, 64)
	*h = Hex(v)
	return err
}
