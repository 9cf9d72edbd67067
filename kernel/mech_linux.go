//go:build linux

package kernel

import "github.com/gprobes/gprobes/bpf"

// probeMechanisms asks bpf.Probe, which tries each mechanism once per
// process (a kprobe and a kretprobe perf event opened and closed, a
// trivial fentry program loaded and attached, a disabled hardware
// breakpoint on a kernel address): a kernel with kprobes but whose BPF
// trampoline refuses fentry (this development machine's 6.18 refuses
// even the load) is told apart from one with both, so an entry probe does
// not try fentry, and pay a BTF copy and a refused load, before its
// kprobe; a kernel that refuses breakpoints on its own addresses (the
// same 6.18, as root) has its watch probes refused at insert, naming
// that. What /proc/kallsyms shows is the ksyms' (kallsyms, read once at
// the start).
func probeMechanisms() bpf.Mechanisms { return bpf.Probe() }

// Abilities is what this host allows the kernel target, as it found out
// at its start (bpf.Probe, and what kallsyms showed): the daemon's
// status carries it, which may differ from what `gprobes doctor` finds
// as another user.
func (t *Target) Abilities() []bpf.Ability {
	return append(t.mech.List(), t.syms.facts.List()...)
}
