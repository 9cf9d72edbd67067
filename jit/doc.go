// Package jit compiles one verified RPN probe program (rpn.Program, probe
// pi) into x86-64 machine code that runs inside the probed process, in a
// jump pad (package pad builds the pad around it; docs/design.md, "Fast
// probes inside the process"). It is a template compiler: every RPN
// instruction becomes a short fixed sequence, with the verifier's proofs
// (jump targets, variable slots, call depth) taken as given.
//
// # The contract with the pad
//
// The pad saves the interrupted thread's registers, then calls the
// compiled code with `call`, with:
//
//   - rbp: the register frame, 8-byte slots indexed by rpn.Reg for RegRAX
//     ... RegRFLAGS (FrameSlots of them): the thread's registers at the
//     probe, RSP the thread's rsp before the pad touched it, RIP the probe
//     address. `push r` reads a slot, `pop r` writes one (the pad restores
//     the frame into the registers). fs_base/gs_base are read with
//     rdfsbase/rdgsbase when Layout.FSGSBase says the kernel allows them,
//     else with arch_prctl; segment registers with mov from the segment
//     register.
//   - rbx: the hit's scratch area, ScratchSize(logmax) bytes, 8-byte
//     aligned, on the thread's stack; its header (Off* constants) is what
//     the pad reads after the call to build the record.
//   - rsp: 16-byte aligned, with at least StackUse bytes free below it.
//
// The compiled code may clobber every register but rbp, rbx and rsp (the
// pad saved them all) and must not touch SSE/AVX/x87 state (the pad does
// not save it). It returns with `ret` and eax:
//
//	ResultNone      nothing to commit (skipped, exit 0, abort)
//	ResultCommit    a record to commit once the displaced instructions ran
//	                (exit 1, exit 2, rem); header says exit facility
//	ResultException an exception record to commit now
//
// and the header filled in for ResultCommit and ResultException.
//
// Counters, pass count, max hits, rem: the compiled code does them, with
// lock-prefixed instructions on the probe's Counters (Layout.Probe), so
// any number of threads may run it at once. Variables: lv and gv are
// arrays of 8-byte words at Layout.LV and Layout.GV; inc/dec are lock
// inc/dec (each variable instruction is atomic; a sequence of them is not,
// as in bpftrace's maps without locking: docs/engine.md).
//
// # Memory access and faults
//
// push mrf, log str, log mrf, pop mrf, vfy_r and vfy_rw access the
// process's memory with plain loads and stores (a system call per read
// costs 1.2 us on the reference machine: docs/design.md). Each such
// instruction is listed in Code.Fixups with the offset of code that
// turns the fault into an invalid-address exception: the tracer, which
// sees the SIGSEGV/SIGBUS through ptrace before the process does, moves
// rip there and suppresses the signal (as the kernel's exception tables
// do). The fault address the exception records is the one the RPN
// machine would record (the first unreadable byte for log str).
//
// # What is not compiled
//
// Compile returns an *Unsupported error (its Reason in a few words, for
// `query`'s HOW column) for programs the pad cannot run: exit 3 and exit
// 4 (they need the tracer), pop r of rip, rsp, fs_base or gs_base (the
// pad restores none of them), pop u, push field (a tracepoint probe's,
// which only the kernel target runs), push iv and pop iv (a call's
// instance variables live in the engine), and enable and disable without
// a Layout.Switch. Those probes stay on the int3 route.
//
// # Switching
//
// With Layout.Switch, the module's switches (a byte per minor, shared with
// gprobes and every other pad of the module), the prologue first loads
// the probe's minor's byte and returns ResultNone at once when it is not
// 0: a probe switched off is no hit, nothing is counted. enable MINOR and
// disable MINOR store 0 and 1 to MINOR's byte.
//
// compile.go describes the code: its register allocation, the RPN stack
// in the scratch area (ScratchSize), the counters under concurrency, and
// what each fault handler does.
package jit
