package bpf

import (
	"fmt"
	"strings"
)

// Mechanisms says which of the ways to run a program this kernel has
// (Probe): each field is nil when the kernel has it, else an error whose
// message says what is missing, in one line, for the kernel target to
// refuse a probe naming it.
type Mechanisms struct {
	Tracepoint    error // BPF_PROG_TYPE_TRACEPOINT on a tracefs event (KindTracepoint)
	RawTracepoint error // BPF_PROG_TYPE_RAW_TRACEPOINT (KindRawTracepoint)
	Kprobe        error // kprobes through the kprobe PMU (KindKprobe, AttachKprobe)
	Kretprobe     error // kretprobes through the kprobe PMU (KindKretprobe, AttachKretprobe)
	KprobeMulti   error // kprobe.multi links (many functions, one program)
	Fentry        error // fentry programs loaded and attached (KindFentry, AttachFentry)
	Ringbuf       error // BPF_MAP_TYPE_RINGBUF: every probe's records
	Loop          error // the bpf_loop helper: programs with a cycle or a call (Compiled.Loop)
}

// ForKind is the reason a probe of kind k cannot run here, or nil: the
// mechanism it attaches with, and the ring buffer every probe needs.
// (A program in loop mode, Compiled.Loop, needs Loop too.)
func (m Mechanisms) ForKind(k Kind) error {
	if m.Ringbuf != nil {
		return m.Ringbuf
	}
	switch k {
	case KindTracepoint:
		return m.Tracepoint
	case KindRawTracepoint:
		return m.RawTracepoint
	case KindKprobe, KindUprobe:
		// uprobes share the kprobe program type; their PMU is another,
		// not probed here
		if k == KindUprobe {
			return nil
		}
		return m.Kprobe
	case KindKretprobe:
		return m.Kretprobe
	case KindFentry:
		return m.Fentry
	case KindWatch:
		return nil // AttachWatch says what the CPU or kernel refuses
	}
	return fmt.Errorf("unknown probe kind %v", k)
}

// String lists the mechanisms, present or not and why.
func (m Mechanisms) String() string {
	var b strings.Builder
	for _, f := range []struct {
		name string
		err  error
	}{
		{"tracepoint", m.Tracepoint}, {"raw tracepoint", m.RawTracepoint}, {"kprobe", m.Kprobe},
		{"kretprobe", m.Kretprobe}, {"kprobe.multi", m.KprobeMulti}, {"fentry", m.Fentry},
		{"ringbuf", m.Ringbuf}, {"bpf_loop", m.Loop},
	} {
		if f.err == nil {
			fmt.Fprintf(&b, "%-15s yes\n", f.name)
		} else {
			fmt.Fprintf(&b, "%-15s no: %v\n", f.name, f.err)
		}
	}
	return b.String()
}
