package bpf

import (
	"strings"

	"github.com/gprobes/gprobes/rpn"
)

// KernelCheck is what CheckKernel found of one probe.
type KernelCheck struct {
	// Compiled is the probe's program (nil when it cannot be compiled).
	Compiled *Compiled
	// Err is why the kernel target would refuse the probe: an
	// *Unsupported (eBPF cannot do what it does) or a *TooLarge (past the
	// kernel's verifier limits); nil when it would go in as far as can be
	// told without loading it.
	Err error
	// Fields is why the probe's push field names were not checked (the
	// event's format could not be read here), "" when they were or there
	// are none.
	Fields string
}

// CheckKernel compiles each probe of p for the kernel target, with the
// kind of program its location takes (a tracepoint's, a watch's, a
// kretprobe for a retprobe, a kprobe for an offset: fentry, which the
// kernel target prefers at a function's first instruction, sees fewer
// registers and is otherwise the same program), and holds each against
// the kernel's limits (Budget): what insert would refuse, said before
// anything is loaded, on any machine. format gives a tracepoint's event
// format (ReadFormat); when it fails, or is nil, every field push field
// names is taken for an 8-byte number, and KernelCheck.Fields says so.
func CheckKernel(p *rpn.Program, format func(group, event string) (*Format, error)) []KernelCheck {
	mod := p.Module()
	out := make([]KernelCheck, p.NumProbes())
	for pi := range out {
		o := Options{Probe: uint32(pi)}
		switch d := &mod.Probes[pi]; d.Kind {
		case rpn.ProbeTracepoint:
			o.Kind = KindTracepoint
			group, event, _ := strings.Cut(d.Loc.Text, ":")
			if len(mod.Fields) > 0 {
				var err error
				if format != nil {
					o.Format, err = format(group, event)
				}
				if format == nil || err != nil {
					o.Format = anyFields(group, event, mod.Fields)
					out[pi].Fields = "the event's format was not read"
					if err != nil {
						out[pi].Fields += ": " + err.Error()
					}
				}
			}
		case rpn.ProbeRetprobe:
			o.Kind = KindKretprobe
		case rpn.ProbeWatch:
			o.Kind = KindWatch
		default:
			o.Kind = KindKprobe
		}
		c, err := CompileProbe(p, pi, o)
		if err == nil {
			err = c.Budget()
		}
		out[pi].Compiled, out[pi].Err = c, err
	}
	return out
}

// anyFields is a stand-in format for a tracepoint whose format cannot be
// read: every name an 8-byte number, one after the other past the
// common fields.
func anyFields(group, event string, names []string) *Format {
	f := &Format{Group: group, Event: event, Fields: []Field{
		{Name: "common_type", Type: "unsigned short", Offset: 0, Size: 2, Kind: FieldScalar, Common: true},
		{Name: "common_flags", Type: "unsigned char", Offset: 2, Size: 1, Kind: FieldScalar, Common: true},
		{Name: "common_preempt_count", Type: "unsigned char", Offset: 3, Size: 1, Kind: FieldScalar, Common: true},
		{Name: "common_pid", Type: "int", Offset: 4, Size: 4, Signed: true, Kind: FieldScalar, Common: true},
	}}
	for i, n := range names {
		if strings.HasPrefix(n, "common_") {
			continue
		}
		f.Fields = append(f.Fields, Field{Name: n, Type: "u64", Offset: 8 + 8*i, Size: 8, Kind: FieldScalar})
	}
	return f
}
