// Package bpf compiles verified RPN programs (rpn.Program) to eBPF for the
// kernel target (SPEC §7, issue 12), with cilium/ebpf's asm package, and
// loads and attaches them. Groundwork: not yet wired into the engine or
// the command line.
package bpf
