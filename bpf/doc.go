// Package bpf compiles verified RPN programs (rpn.Program) to eBPF for the
// kernel target (docs/kernel.md) with cilium/ebpf's asm package (no
// clang, no LLVM, no headers), and loads, attaches and reads them. The
// kernel target (package kernel) uses it for every probe it places.
//
// # One probe, one program
//
// CompileProbe turns probe pi of a program into one eBPF program of the
// type its attachment needs (Options.Kind: tracepoint, raw tracepoint,
// kprobe, uprobe, fentry, kretprobe). It starts from the RPN verifier's proofs (jump targets
// in the probe, variable indices, register names) and is a template
// compiler, as package jit is for x86-64: each RPN instruction becomes a
// short fixed sequence. Registers: r6 this CPU's scratch value, r7 the TOS
// index (dynamic stack only), r8 the log length, r9 the context in the
// prologue and then the jumps left (straight mode, when counted); r0-r5
// are temporaries and helper
// arguments. The per-instruction eBPF carries the RPN disassembly as BTF
// line info, so the verifier's log reads as the RPN program; a refusal of
// the verifier is mapped back to the RPN instruction, its pc and DPDF line
// (VerifierError); what eBPF cannot do at all is refused before, with the
// same position (Unsupported).
//
// # State: the scratch value, the stack and the log
//
// The 32-entry circular stack, the call stack, the loop state, the record
// header and the temporary log live in one per-CPU array value (Maps.
// Scratch; layout.go), one per probe: a program runs to its end on one CPU
// without being preempted, and the kernel never runs a program nested in
// itself on a CPU (it counts such misses), so the value is the hit's own. A stack entry k below the TOS is at ((tos-k)&31)*8: the mask
// is the circular wrap, and it is also what proves the access in bounds to
// the verifier. When the program has no call and reaches every instruction
// with one TOS index (static-stack mode, rpn's lowering) the offsets are
// constants, no register holds the TOS, and only the slots read before
// written are zeroed at the hit. The log is at a variable offset (its
// length, bounded to logmax by a compare the verifier sees); the value
// keeps logmax bytes more than the log needs, because the verifier cannot
// relate the log's length and a length cut to the room left (log mrf, log
// str), and log N / log lv write whole words and cut the length after. A
// value above 32 KiB (logmax above about 15000) is an array with one entry
// per CPU, keyed by bpf_get_smp_processor_id, instead of a per-CPU array.
//
// # Variables and counters
//
// lv, gv and the counters are one-entry arrays, addressed directly (a
// 64-bit load of the value's address, BPF_PSEUDO_MAP_VALUE: no lookup, no
// NULL check), mmapable so that the daemon can read them in place. inc and
// dec are atomic adds (BPF_ATOMIC); in a 32-bit module an atomic add to the
// low half and a store of 0 to the high half (the machine's (v±1)&mask;
// the two are not one atomic step, which matters only if a 64-bit module
// sharing gv wrote a wider value). gv is one map that modules share when
// given the same one (MapOptions.GV); sharing it with the daemon's other
// targets means giving them the mmapped value as their gv words, not done
// yet. Counters per probe: skipped, runs, faults, disabled, lost; hits is
// skipped + runs; missed, the hits the kernel did not run the program for
// (another eBPF program running on the CPU), is the kernel's own
// (Module.Counters). The prologue takes the hit's number with an atomic
// fetch-and-add only when there is a pass count, reads disabled, and
// counts runs (fetch-and-add when there is a max hits): the run numbered
// MaxHits sets disabled, and one numbered above it (another CPU passed the
// disabled check meanwhile) gives its run back and counts as skipped,
// exactly as jit's code does. rem sets disabled. Options.PID/TID (or
// Options.Follow, a process and those it starts: follow_linux.go) filter
// before all that: another process's hit is not a hit of the probe.
//
// # Jumps: straight mode and loop mode
//
// The verifier must see every path end. A program whose jumps form no
// cycle, that has no call and whose code has at most 4096 conditional
// eBPF jumps (maxBranches, below) is compiled straight: RPN jumps are
// eBPF jumps, all forward. The most jumps any path takes is then known;
// only when it exceeds jmpmax is a counter kept (r9), checked on every
// taken jump. Any other program runs in loop mode, under bpf_loop: each
// iteration runs from the start of a block (the entry, a jump target, the
// instruction after a call) to the next taken jump, which checks the jump
// budget (kept in the scratch value; max-jumps at that jump's pc when none
// is left), stores the target's block id and returns 0; the next iteration
// dispatches on the id. bpf_loop's bound (2*jmpmax+2: the jumps, as many
// rets, the first block) is never reached: the budget stops the program
// first. An RPN loop of 65535 iterations costs the verifier nothing more
// than one of 2. (The verifier's own bounded loops would be unrolled:
// jmpmax 65535 times the body is far past its million instructions.)
//
// The blocks are in regions, each a global function (BTF_FUNC_GLOBAL)
// long gp_N_rK(struct gp_scratch *s, long id): at most 12288 eBPF
// instructions and 4096 conditional jumps of consecutive blocks, with a
// binary search over their ids at its start. The callback (a static
// function: static long cb(u64 index, void *ctx)) finds the region by the
// block id (a binary search) and calls it; a region whose code runs on
// past its last block returns 2, and the callback calls the next region
// at its first block in the same iteration (no jump counted, no iteration
// used). The verifier checks a global function once, on its own, against
// its signature (the scratch value as memory of its size, which the
// function tests for NULL; the block id as any number), whoever calls it
// and however its callers are checked: that is what keeps its work on
// loop mode's code the same on every kernel. Linux 6.7 began checking
// bpf_loop's callback as a loop, and inside it this host's 6.18 walked a
// block again for states that differed only in registers the block does
// not read (up to 17 times a block, 4.4 instructions processed per eBPF
// instruction of random programs, against 2.1 since); the QEMU lab's 6.1
// checks the callback once. A program has at most 250 regions
// (BPF_MAX_SUBPROGS is 256 functions).
//
// call and ret are an explicit return-index switch: call pushes the block
// id of the instruction after it on the call stack in the scratch value
// (call-depth past 32 levels), counts a jump and goes to the target's
// block; ret pops the id (call-depth at depth 0) and goes there. eBPF
// function calls (bpf-to-bpf) cannot do it: an RPN routine is not a
// function (it may jump anywhere in the probe, share code, return from
// several places, recurse at run time up to 32 levels), while eBPF allows
// no recursion, 8 frames and 512 bytes of stack for all of them.
//
// # Verification cost
//
// The verifier walks every path of a function, stopping a path where its
// state is one it has seen at the same instruction (pruning), at most a
// million instructions in all (BPF_COMPLEXITY_LIMIT_INSNS), and keeps the
// other way of every conditional jump it passes pending, at most 8192
// (BPF_COMPLEXITY_LIMIT_JMP_SEQ). The compiler makes its work grow with
// the program, by construction rather than by the verifier's heuristics:
//
//   - Joins. Where paths meet (an RPN jump target with another way in;
//     every block start in loop mode), the registers that carry the
//     machine's state from one instruction to the next (r8 the log
//     length, when an instruction moves it; r7 the TOS index, dynamic
//     stack; r9 the jumps left, when counted) are stored into the scratch
//     value on every way in and loaded back, bounded, at the join: every
//     path reaches it in one state, so the verifier walks the code after
//     it once, however many paths lead there. Without it the log length
//     is a different constant on each path (the number of logs taken) and
//     n diamonds of conditional logging are 2^n paths: 400 of them went
//     past the million straight, and in loop mode a block was walked again
//     from every block before it (400: a million; 200: 287,000).
//   - An instruction's own branches meet again at its end: the log
//     length's cut to logmax is out of line (its path, the length logmax,
//     lies within the one that falls through, which the verifier walks
//     first), and log str and log mrf, whose paths leave the length in
//     different ranges, store and load it at their end. (A "goto +0"
//     before every instruction's code, to make each a place where the
//     verifier compares states, cut its work by a fifth but made its
//     time grow with the square of the program on this host's 6.18: 400
//     diamonds 0.33 s, 1200 2.9 s, 7000 diamonds three minutes; without,
//     12 s. Not done.)
//   - Pending branches. A path of the verifier passes each conditional
//     jump at most once (the code it walks has no cycle), so 4096 of them
//     in a straight program's code, or a region's, keep it below 8192.
//   - Reach. eBPF jumps reach 32767 instructions; every 4096 instructions
//     of a body an island (jumped over) takes the out-of-line code queued
//     so far and the trampolines the assembler adds for longer jumps
//     (branch relaxation, asm.go).
//
// Compiled.Estimate is an upper bound of the verifier's work: the eBPF
// instructions of each RPN instruction's code weighted by how many times
// at most the verifier processes them (2 for most, 3 for jumps, divisions,
// push mrf, vfy_r and log mrf, 4 for log str, 3 for the glue), plus the
// main function's tails once for each way into them (straight mode's exits
// and exceptions). Budget (which Load calls first, and gprobes check
// --target kernel through CheckKernel) refuses a program past a million
// instructions or a million of the estimate, before anything is loaded,
// naming the RPN instruction (its DPDF line) from which it is past
// (TooLarge). Measured (TestVerifierCost, TestBranchy, TestManyBranches:
// "processed N insns", bpf_prog_info's verified_insns; this host's 6.18
// and the QEMU lab's 6.1), per eBPF instruction: at most 3.14 (log str on
// 6.1), 2.26 for the rest, 1.0 for straight-line code; per RPN
// instruction from 3 (push d, add) to 71 (log 32) and 110 (log str),
// which are long code. 400 diamonds of conditional logging: 15,140
// straight, 35,000 in a loop or a routine. 2000 random branch-heavy
// programs: at most 2.26 per eBPF instruction, 0.61 of the estimate. The
// largest that load: some 7,000 diamonds (56,000 RPN instructions, loop
// mode, 620,000 processed, 12 s); BENCHMARKS.md has the figures.
//
// When the verifier still gives up on a straight program's size, Load
// compiles it in loop mode and loads that; a refusal then says both
// attempts' errors (VerifierError.Straight).
//
// # Exceptions and records
//
// Exceptions are those of the machine: invalid-address (a
// bpf_probe_read_* failing: push mrf, log mrf, log str), divide-by-zero
// (the divisor is tested before div/idiv: eBPF itself would give 0),
// max-jumps, call-depth, invalid-operand (indexed variables out of range,
// setmaj above 0xffff, pop lp beyond the log). The header gets the
// exception, the RPN pc of the instruction (p.PC: its DPDF line) and the
// address; the log is dropped and the record committed; faults rises.
// Records go out with bpf_ringbuf_output: a 48-byte header (probe id,
// CPU, tid and pid from one store of bpf_get_current_pid_tgid, time,
// major, minor, exit, exception, truncated, flags (rem), pc, log length,
// address; layout.go) and the log. The ring's reader is woken only when
// Options.Wakeup bytes wait (64 KiB by default; a wakeup per record costs
// about a microsecond a hit) and polls meanwhile (Reader.Poll). A full ring
// loses the record and counts it (lost).
//
// # System values, registers, memory
//
// push pid and tid: bpf_get_current_pid_tgid, ids of the root PID
// namespace. procid: the CPU. task: bpf_get_current_task. ts, and the
// records' time: bpf_ktime_get_ns (CLOCK_MONOTONIC) plus the offset to
// Unix time the loader stores in the counters' globals (Maps.SetClock), so
// that the kernel's times read as the other targets' (Unix ns); taken once
// per hit.
//
// push r reads the probe's registers, copied into the scratch value at
// the hit (its register area): a kprobe's, kretprobe's or uprobe's
// pt_regs, a fentry program's arguments (Function probes, below). rip is
// the probed address (a kprobe's regs->ip, past the int3, less one; a
// kprobe asked at a function's first byte, when that is an endbr64
// (IBT), is placed past it by the kernel, and rip is then the function +
// 4: not seen in the lab). A tracepoint (or raw
// tracepoint) has no probed instruction and so no registers: push r is
// refused there (push field reads its data). Registers pt_regs does not
// hold (ds, es, fs, gs, fs_base, gs_base, cr0-4) are refused. push u reads the task's user-mode registers, saved at its
// entry into the kernel: bpf_task_pt_regs(bpf_get_current_task_btf()). At
// a system call's entry rax there is -ENOSYS (the kernel's), the number
// being in orig_rax, which RPN cannot name. A kernel thread's saved
// registers are zeros.
//
// Memory: a user module's probes (uprobes) read with
// bpf_probe_read_user; a kernel module's choose by the address, the lower
// half of x86-64's address space (below 1<<47) being the current task's
// memory (bpf_probe_read_user), the upper the kernel's
// (bpf_probe_read_kernel, which refuses user addresses). A user page that
// is not present reads as invalid (a tracing program cannot fault it in).
// log str copies with bpf_probe_read_*_str; when it faults, the n bytes
// the machine would log are read raw: the machine reads the byte after
// them only to know whether the string was cut, so a fault there is
// truncation, not an exception. The address of a log str fault is the
// string's first byte when that is unreadable, else the next page's first
// byte (exact for a string crossing one page boundary; for a longer one
// the machine names the first unreadable byte, which may be a later page).
// vfy_r: a one-byte read.
//
// # Tracepoint fields (push field)
//
// A tracepoint's context is the event's record, laid out as tracefs's
// events/GROUP/EVENT/format says (ReadFormat, ParseFormat: each field's
// offset, size, sign and kind). CompileProbe resolves push field's names
// (Module.Fields) in Options.Format; a name the event lacks is an
// Unsupported at the instruction whose message lists the event's fields
// (its own first, then the common ones) with the closest names. The
// fields a probe reads are copied at the hit, in the prologue while r9
// still holds the context, into the scratch value's register area (a
// tracepoint has no registers; 30 different fields at most per probe),
// so that push field is one load in straight mode and in the loop's
// callback alike, and reads the record as it was at the hit:
//
//   - an integer (1, 2, 4 or 8 bytes) or a pointer: its value, loaded
//     from the context, sign-extended when the format says signed. The
//     verifier allows a tracepoint program to load from its context at
//     any offset from 8 to PERF_MAX_TRACE_SIZE, aligned to the size, read
//     only; elsewhere (a misaligned field, one beyond 2048 bytes: 6.1
//     allows 8192, older kernels 2048) bpf_probe_read_kernel of the
//     record's bytes.
//   - an array ("char comm[16]"), or an inline value of another size:
//     its address in the record (a kernel address: log str, log mrf and
//     push mrf read it with bpf_probe_read_kernel, the address being in
//     the upper half).
//   - __data_loc: the record's address + the u32's low 16 bits (its high
//     16 are the length); __rel_loc the same counted from the field's end.
//
// The record's address is a number to RPN: the prologue stores the
// context pointer in the scratch value and loads it back, which the
// verifier allows a privileged loader (a pointer stored in a map value:
// CAP_PERFMON's allow_ptr_leaks) and sees as a scalar after.
//
// The common fields are not what the format says: before it runs the
// programs, the kernel writes the pt_regs pointer over the record's first
// 8 bytes (perf_trace_run_bpf_submit, perf_call_bpf_enter for system
// calls; TestFieldCommonOverwritten reads a kernel address there), and the
// verifier refuses loads below offset 8 for that reason. So common_type
// is the event's id (Format.ID, a constant), common_pid the current
// thread's id (what the kernel writes there), and common_flags and
// common_preempt_count are refused.
//
// # Function probes: kprobe, kretprobe, fentry
//
// A kprobe (KindKprobe) runs at symbol+offset, AttachKprobe: a perf event
// of the kernel's kprobe PMU opened by this package (not cilium/ebpf's
// Kprobe, which falls back to tracefs and loses the errno) and a BPF link
// to it; the link holds the event, so a gprobes that dies leaves nothing.
// The kernel's refusals are told apart: EILSEQ, the offset is not an
// instruction boundary (the kernel decodes the function from its start),
// ErrNotBoundary; ENOENT, no such symbol, ErrUnknownSymbol; EINVAL (and
// E2BIG), the function is on the kprobe blacklist (named as such when
// /sys/kernel/debug/kprobes/blacklist is readable) or the offset is
// outside it, ErrCannotProbe.
//
// A kretprobe (KindKretprobe, AttachKretprobe) is a kprobe program whose
// pt_regs are the function's return: rax its return value, rip the return
// address, rsp the caller's stack pointer past it, the callee-saved
// registers the caller's, the others what the function left. maxactive is
// the kernel's number of calls tracked at once (beyond it a return is
// missed, the kernel's nmissed, not run): up to the kernel's default,
// max(10, 2 × possible CPUs), the kprobe PMU's kretprobe gives at least as
// many; above it only a tracefs kprobe event can say it (cilium/ebpf's
// Kretprobe, group gprobes_<random>), which a gprobes killed with SIGKILL
// leaves in kprobe_events, disabled and without a program, for
// RemoveStaleKprobeEvents.
//
// A fentry program (KindFentry, BPF_PROG_TYPE_TRACING, BPF_TRACE_FENTRY,
// AttachFentry) is called by a BPF trampoline from the function's ftrace
// call site: no int3, no single-step. It is loaded for its function
// (Options.AttachTo, found in vmlinux's or a module's BTF) and its context
// is the function's arguments, one u64 each: push r of rdi, rsi, rdx, rcx,
// r8, r9 reads argument 0 to 5 when it is below Options.NumArgs, which
// FuncArgs gives (the leading arguments that are integers, enums or
// pointers: a struct passed by value shifts the slots); an int argument's
// upper half is whatever the register held, as with a kprobe. rip is
// Options.Addr. The verifier enforces the count (reading past the last
// argument is refused). Any other register, or rip without Addr, is an
// Unsupported wrapping ErrNeedsKprobe: the caller compiles the probe again
// as a kprobe at the function's address, which sees every register.
// Everything else is a kprobe's (push u through bpf_task_pt_regs, memory,
// system values, bpf_loop): the helpers the compiler calls are all
// allowed to tracing programs, which TestFentryContext proves on a
// kernel that refuses fentry itself, by loading the same program as a
// BTF raw tracepoint (tp_btf, the same program type and context) on
// sys_enter.
//
// # Mechanisms
//
// Probe says which of tracepoint, raw tracepoint, kprobe, kretprobe,
// kprobe.multi, fentry, uprobe, uretprobe, ringbuf, bpf_loop,
// bpf_task_pt_regs, the kernel's BTF and hardware breakpoints on kernel
// and user addresses this host allows, each nil or an error with a
// one-line reason (cilium/ebpf's feature tests, a trivial program
// attached and detached at once, kprobe and uprobe perf events and
// disabled breakpoints opened and closed), once per process;
// Mechanisms.ForKind is the reason a probe of a kind cannot go in.
// ScanKallsyms says what /proc/kallsyms shows, Detect is the whole matrix
// (gprobes doctor). This host (6.18): no kprobe PMU (a kernel built
// without CONFIG_KPROBES), BPF_PROG_LOAD refuses every fentry program
// with EPERM before its verifier, as root (tp_btf loads: a policy or
// lockdown of this kernel), and perf refuses breakpoints on kernel
// addresses with EPERM, as root, while it accepts user addresses, so
// kprobe, kretprobe, fentry, kprobe.multi and kernel watches are
// absent. The QEMU lab's Debian 6.1 has all but kprobe.multi (no
// CONFIG_FPROBE), and the package's whole test suite passes there (the
// test binary, go test -c with CGO_ENABLED=0, run as root in the guest:
// TestFentry, TestKprobe, TestKretprobe and TestRemoveStaleKprobeEvents
// attach for real; with one vCPU: under TCG with two, attaching a system
// call tracepoint while another thread makes system calls can livelock
// the guest in the kernel's text patching of syscall_trace_enter's jump
// label, nothing of this package's).
//
// # Refused (Unsupported)
//
// pop mrf (eBPF cannot write kernel memory; bpf_probe_write_user taints
// the kernel and only writes user memory), pop r and pop u (it cannot
// change registers), push io and pop io (no port IO), exit 3 (a dump
// needs the task stopped) and exit 4 (a debugger), vfy_rw (a program can
// test a read, not a write without writing), push r where there are no
// registers (and, ErrNeedsKprobe, those a fentry program does not see),
// push field outside a tracepoint probe, without the event's format, of a
// field the event lacks or of common_flags and common_preempt_count, and
// any opcode added to the machine after this compiler.
//
// # What differs from the machine (docs/language.md, "The RPN machine")
//
// The record is committed when the program ends, before the probed
// instruction runs: eBPF cannot wait for it or know whether it faulted
// (logonfault has no meaning). The temporary log is per CPU. The lazily
// paged user memory and the log str fault address above.
//
// # Speed (BenchmarkGetppidCost, this host, one run)
//
// getppid 166 ns natively; a hand-written minimal counter (one atomic add
// to a one-entry array) on syscalls:sys_enter_getppid +156 ns a hit; the
// counting probe (inc lv,0; exit 0) +156 ns: the tracepoint's own cost,
// the compiled program's few instructions lost in the noise; with the pid
// filter +174; bpftrace's count() +207; logging pid and tid to a reader
// draining the ring +352 (+1224 with a wakeup per record).
package bpf
