package probe

import "time"

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
