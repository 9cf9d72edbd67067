package timeline

import (
	"time"

	"github.com/gprobes/gprobes/probe"
)

// Record is one committed record and the target it came from (pid:N,
// kernel, gdb:HOST:PORT, xen:DOMID; empty for gprobes run's own command
// before it is named).
type Record struct {
	Target string
	probe.Record
}

// Thread is what a track is kept for: a thread of a process, a task of a
// kernel, or a guest's vCPU when its task is not known (the engine then
// leaves the vCPU's thread in Tid).
type Thread struct {
	Target   string
	Pid, Tid int
}

// Thread is the thread the record belongs to.
func (r *Record) Thread() Thread { return Thread{r.Target, r.Pid, r.Tid} }

// Process reports whether the target is a process (pid:N, exec:, or
// gprobes run's own command), whose pid and tid are those of this
// machine; otherwise (kernel, gdb:, xen:) the tracks belong to the target.
func Process(target string) bool {
	return target == "" || hasPrefix(target, "pid:") || hasPrefix(target, "exec:")
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

// EventType says what a record is on its track.
type EventType uint8

const (
	Instant EventType = iota // an event without duration
	Begin                    // an entry record that opens a slice
	End                      // the return record that closes it
)

// Event is one record placed on its thread's track.
type Event struct {
	Type EventType
	*Record
}

// Loss is a count of records that are not in the trace because they were
// lost before it was written: the daemon's log file could not take them,
// a jump pad's ring was full, gprobes run's output failed.
type Loss struct {
	Time     time.Time // when it was counted (the end of the records read)
	Target   string    // empty: every target
	Module   string    // empty: every probe
	Minor    int       // -1: every probe of the module (or every probe)
	Location string
	Records  uint64
	Why      string
}

// Writer is a trace format. Events of one thread come in order of time
// (the Builder sees to it), threads interleaved. A writer buffers what it
// is given and writes whole pieces of the trace (packets); a record in a
// piece that could not be written is reported to Options.OnLost. Close
// writes what is left and whatever the format writes last.
type Writer interface {
	Event(ev Event)
	Loss(l Loss)
	Close() error
}

// Flusher is a Writer that can write what it buffers now, as whole
// pieces, so that a trace being written while records still come (log
// --follow) is readable up to its last Flush even if gprobes is killed.
type Flusher interface {
	Flush() error
}

// Options are the writers' common options.
type Options struct {
	// OnLost, if set, is told of each record that could not be written
	// to the trace, with the error.
	OnLost func(r *Record, err error)
}

// Nanos is t as nanoseconds since the Unix epoch; the zero time (a record
// without a clock) is 0.
func Nanos(t time.Time) uint64 {
	if t.IsZero() || t.Before(time.Unix(0, 0)) {
		return 0
	}
	return uint64(t.UnixNano())
}
