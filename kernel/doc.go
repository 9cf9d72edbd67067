// Package kernel is the `kernel` target (docs/kernel.md): the running
// kernel of this machine and its loaded modules, probed through eBPF.
// docs/kernel.md is the user's page; this is how it is built.
//
// # Beside the engine, not behind it
//
// A kernel probe never stops anything: its program, compiled from the
// verified RPN bytecode to eBPF by package bpf, runs in the kernel at
// every hit. So the kernel target is not an engine.Target (the primitives
// of code stopped under a debugger) but a probe.Prober, the interface
// the daemon and `gprobes run` drive every target through: Insert,
// Release, Query, Vars, Remove, Modules, Close. It answers with package
// probe's types (probe.Info, probe.Record, probe.Final), so query,
// getvars, log and run print a kernel probe as any other, and it does
// not link the engine.
//
// # A module in the kernel
//
// Each inserted module (each PPDF or DPDF; a --merge adds another source
// to the same module) gets its own maps (bpf.NewMaps: per-CPU scratch,
// counters, a ring buffer) and one program per probe, and a goroutine
// that reads its ring and hands the records to the Sink. The lv map and
// the switch map (a byte per minor: enabled = no, enable, disable,
// gprobes enable; switch_linux.go) are the module's, shared by its
// sources, so that a --merge'd source's programs count into the same
// variables and switch the other sources' probes. gv is one map
// shared by every module of the target: the kernel's programs can address
// only eBPF maps, and an eBPF map cannot be mapped into another process,
// so the kernel's gv is its own and not the one the daemon's processes and
// guests share (docs/kernel.md says so, getvars shows it apart).
//
// Where a probe goes:
//
//   - tracepoint = SUBSYS:EVENT: a BPF_PROG_TYPE_TRACEPOINT program on
//     the event; push field reads the event's record by the offsets of
//     its tracefs format file, read at insert.
//   - offset = LOC: LOC resolved with /proc/kallsyms (addresses as they
//     run: no KASLR arithmetic), or a vmlinux with DWARF given with
//     --symbols for file:line (its slide taken from _stext); the live
//     bytes are read through eBPF itself (kmem.go: the kernel need not
//     have /proc/kcore) for the opcode check and to prove the address an
//     instruction boundary by decoding the function from its start. At a
//     function's first instruction an fentry program when the kernel has
//     fentry and the program reads no register fentry cannot give; else a
//     kprobe (symbol+offset).
//   - retprobe = SYMBOL: a kretprobe (maxactive from the probe).
//
// A probe that cannot go in is refused with its reason (the verifier's
// refusal mapped back to the DPDF line, a mechanism this kernel lacks, a
// non-boundary, a function kprobes cannot probe), and the module's other
// probes go in.
//
// # Kernel modules
//
// name = vmlinux (or kernel) is the kernel image; any other name is a
// kernel module. A module that is loaded (in /proc/modules, or built in:
// /sys/module/NAME without a refcnt) resolves through kallsyms' [NAME]
// symbols; one installed but not loaded (named in modules.dep) keeps its
// probes pending, and a goroutine polls the module list (Options.Poll):
// the probes go in when it loads, and are pending again (their links
// closed) when it unloads, to go in again at the next load. A name that is
// neither loaded nor installed is refused.
//
// # Nothing left behind
//
// Every program, link and map is a file descriptor of gprobes: when
// gprobes exits, however it exits (SIGKILL included), the kernel detaches
// and frees them all. Nothing is pinned.
package kernel
