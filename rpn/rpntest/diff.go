package rpntest

import (
	"bytes"
	"fmt"

	"github.com/gprobes/gprobes/rpn"
)

// String names the target.
func (t Target) String() string {
	if t == Kernel {
		return "kernel"
	}
	return "process"
}

// Reference is the machine's side of a differential test: one probe of a
// program, its counters and variables, run by rpn.Machine hit after hit
// (pass count, max hits, rem and faults carry over).
type Reference struct {
	P      *rpn.Program
	Probe  int
	Mach   rpn.Machine
	St     rpn.ProbeState
	LV, GV []uint64
}

// Run runs one hit over env and returns its result, the log copied.
func (r *Reference) Run(env rpn.Env) rpn.Result {
	res := *r.Mach.Run(r.P, r.Probe, &r.St, r.LV, r.GV, env)
	if res.Log != nil {
		res.Log = bytes.Clone(res.Log)
	}
	return res
}

// Kind is how a hit of generated code ended, as its harness saw it.
type Kind uint8

const (
	None   Kind = iota // nothing to commit: skipped, abort, exit 0
	Commit             // a record committed: exit 1/2 or rem with the log
	Raised             // an exception record
)

// Observed is what generated code did on one hit, as its harness read it
// (a jump pad's scratch area, the kernel's ring buffer).
type Observed struct {
	Kind      Kind
	Exit      uint8
	Log       []byte
	Truncated bool
	Exception rpn.Exception // of a Raised hit; must be 0 in a committed record
	PC        uint32
	Addr      uint64
	Major     uint16
	Minor     uint16
}

// Compare describes each difference between a hit of the machine (want)
// and the same hit of generated code (got): how it ended, and the
// record's exit, log, truncation, exception, pc, address, major and
// minor. No difference: nil.
func Compare(want *rpn.Result, got *Observed) []string {
	var d []string
	diff := func(format string, args ...any) { d = append(d, fmt.Sprintf(format, args...)) }
	switch {
	case want.Outcome == rpn.OutcomeException:
		if got.Kind != Raised {
			diff("%s; the machine raised %v at pc %#x addr %#x", got.kindText(), want.Exception, want.PC, want.Addr)
			return d
		}
		if got.Exception != want.Exception {
			diff("exception %v, want %v", got.Exception, want.Exception)
		}
		if got.PC != want.PC {
			diff("pc %#x, want %#x", got.PC, want.PC)
		}
		if got.Addr != want.Addr {
			diff("addr %#x, want %#x", got.Addr, want.Addr)
		}
	case want.Commits():
		if got.Kind != Commit {
			diff("%s; the machine committed: %v exit %d log %x", got.kindText(), want.Outcome, want.Exit, want.Log)
			return d
		}
		if got.Exit != want.Exit {
			diff("exit %d, want %d", got.Exit, want.Exit)
		}
		if !bytes.Equal(got.Log, want.Log) {
			diff("log (%d bytes) %x\nwant (%d bytes) %x", len(got.Log), got.Log, len(want.Log), want.Log)
		}
		if got.Truncated != want.Truncated {
			diff("truncated %v, want %v", got.Truncated, want.Truncated)
		}
		// an exception in a committed record (an earlier hit's left
		// in a header) would make it an exception record
		if got.Exception != 0 {
			diff("exception %v in a committed record", got.Exception)
		}
	default:
		if got.Kind != None {
			diff("%s; the machine's outcome is %v, nothing to commit", got.kindText(), want.Outcome)
		}
		return d
	}
	if got.Major != want.Major {
		diff("major %d, want %d", got.Major, want.Major)
	}
	if got.Minor != want.Minor {
		diff("minor %d, want %d", got.Minor, want.Minor)
	}
	return d
}

func (o *Observed) kindText() string {
	switch o.Kind {
	case Commit:
		return fmt.Sprintf("committed exit %d log %x", o.Exit, o.Log)
	case Raised:
		return fmt.Sprintf("raised %v at pc %#x addr %#x", o.Exception, o.PC, o.Addr)
	}
	return "nothing committed"
}

// CompareState describes each difference between the machine's counters
// and variables and the generated code's (st, lv, gv; lv and gv at least
// as long as the machine's).
func (r *Reference) CompareState(st rpn.ProbeState, lv, gv []uint64) []string {
	var d []string
	if st != r.St {
		d = append(d, fmt.Sprintf("counters %+v, want %+v", st, r.St))
	}
	for _, s := range []struct {
		name      string
		got, want []uint64
	}{{"lv", lv, r.LV}, {"gv", gv, r.GV}} {
		if len(s.got) < len(s.want) {
			d = append(d, fmt.Sprintf("%d %s, want %d", len(s.got), s.name, len(s.want)))
			continue
		}
		for i := range s.want {
			if s.got[i] != s.want[i] {
				d = append(d, fmt.Sprintf("%s[%d] = %#x, want %#x", s.name, i, s.got[i], s.want[i]))
			}
		}
	}
	return d
}
