//go:build linux

package kernel

import "github.com/gprobes/gprobes/bpf"

// mechanisms says which of the kernel's probing mechanisms this kernel
// has: nil, or why not (one line naming what is missing).
type mechanisms struct {
	Kprobe, Kretprobe, Fentry error
}

// probeMechanisms asks bpf.Probe, which tries each mechanism once per
// process (a kprobe and a kretprobe perf event opened and closed, a
// trivial fentry program loaded and attached): a kernel with kprobes but
// whose BPF trampoline refuses fentry (this development machine's 6.18
// refuses even the load) is told apart from one with both, so an entry
// probe does not try fentry, and pay a BTF copy and a refused load,
// before its kprobe.
func probeMechanisms() mechanisms {
	p := bpf.Probe()
	return mechanisms{Kprobe: p.Kprobe, Kretprobe: p.Kretprobe, Fentry: p.Fentry}
}
