package probe

import (
	"fmt"
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
	Comm      string     `json:"comm,omitempty"` // the command name of the process (the kernel and host targets)
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

// StackName is how exporters name a record's stack i: "ustack" or "kstack",
// and for a second stack of the same kind "ustack.2", "ustack.3", ...
func StackName(stacks []Stack, i int) string {
	name := "ustack"
	if stacks[i].Kind == "kernel" {
		name = "kstack"
	}
	n := 1
	for _, s := range stacks[:i] {
		if s.Kind == stacks[i].Kind {
			n++
		}
	}
	if n > 1 {
		name += "." + strconv.Itoa(n)
	}
	return name
}

// Line is a frame as exporters write it: its address, then what is known
// of function+0xOFF and (module): "0x55d0c24c fact+0x4c (/tmp/fact)".
func (f Frame) Line() string {
	s := "0x" + strconv.FormatUint(uint64(f.Address), 16)
	if f.Function != "" {
		s += " " + f.Function + "+0x" + strconv.FormatUint(f.Offset, 16)
	}
	if f.Module != "" {
		s += " (" + f.Module + ")"
	}
	return s
}

// parseFrame reads what Line wrote: the address, then a function+0xOFF
// (symbol names have no spaces), then the module in parentheses to the
// end of the line (a path may hold anything but a newline).
func parseFrame(l string) (Frame, error) {
	var f Frame
	addr, rest, _ := strings.Cut(l, " ")
	if err := f.Address.UnmarshalText([]byte(addr)); err != nil || !strings.HasPrefix(addr, "0x") {
		return f, fmt.Errorf("frame %q: no address", l)
	}
	if rest != "" && !strings.HasPrefix(rest, "(") {
		var fn string
		fn, rest, _ = strings.Cut(rest, " ")
		i := strings.LastIndex(fn, "+0x")
		if i <= 0 {
			return f, fmt.Errorf("frame %q: no function+0xOFF", l)
		}
		off, err := strconv.ParseUint(fn[i+3:], 16, 64)
		if err != nil {
			return f, fmt.Errorf("frame %q: %v", l, err)
		}
		f.Function, f.Offset = fn[:i], off
	}
	if rest != "" {
		if !strings.HasPrefix(rest, "(") || !strings.HasSuffix(rest, ")") {
			return f, fmt.Errorf("frame %q: no (module)", l)
		}
		f.Module = rest[1 : len(rest)-1]
	}
	return f, nil
}

// Text is the stack's frames one per line (Frame.Line), no newline at
// the end; "" for none.
func (s Stack) Text() string {
	var b strings.Builder
	for i, f := range s.Frames {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(f.Line())
	}
	return b.String()
}

// StacksText is every stack of a record as one text, for an exporter's
// single field: each stack's name (StackName) and a colon on a line,
// then its frames (Frame.Line); "" for none. ParseStacksText reads it.
func StacksText(stacks []Stack) string {
	var b strings.Builder
	for i, s := range stacks {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(StackName(stacks, i) + ":")
		if t := s.Text(); t != "" {
			b.WriteString("\n" + t)
		}
	}
	return b.String()
}

// ParseStacksText reads what StacksText wrote (nil for "").
func ParseStacksText(t string) ([]Stack, error) {
	if t == "" {
		return nil, nil
	}
	var out []Stack
	for _, l := range strings.Split(t, "\n") {
		if name, ok := strings.CutSuffix(l, ":"); ok && !strings.HasPrefix(l, "0x") {
			kind := "user"
			if strings.HasPrefix(name, "kstack") {
				kind = "kernel"
			} else if !strings.HasPrefix(name, "ustack") {
				return nil, fmt.Errorf("stacks: %q is no stack's name", l)
			}
			out = append(out, Stack{Kind: kind, Frames: []Frame{}})
			continue
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("stacks: a frame %q before a stack's name", l)
		}
		f, err := ParseFrameText(l)
		if err != nil {
			return nil, err
		}
		out[len(out)-1].Frames = append(out[len(out)-1].Frames, f)
	}
	return out, nil
}

// ParseStackText reads the frames of what Stack.Text wrote.
func ParseStackText(kind, t string) (Stack, error) {
	st := Stack{Kind: kind, Frames: []Frame{}}
	if t == "" {
		return st, nil
	}
	for _, l := range strings.Split(t, "\n") {
		f, err := ParseFrameText(l)
		if err != nil {
			return st, err
		}
		st.Frames = append(st.Frames, f)
	}
	return st, nil
}

// ParseFrameText reads what Frame.Line wrote.
func ParseFrameText(l string) (Frame, error) { return parseFrame(l) }
