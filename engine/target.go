package engine

import (
	"errors"

	pb "github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
)

// A backend is three things, kept apart the way delve keeps its process
// interface apart from its OS knowledge:
//
//   - Target: the primitives of running code under a debugger — wait for
//     a stop, read and write memory and registers, step, resume, stop a
//     running thread, plant and take out a breakpoint. ptrace (a Linux
//     process), gdbtarget (a GDB stub) and xen (the hypervisor from
//     dom0) implement it.
//   - OS: what the code running there is — where a module is loaded,
//     whether memory is writable, what pid/tid/task mean, the user-mode
//     registers of a kernel's current task. Implemented once for Linux
//     processes (ptrace) and once for Linux guest kernels seen from
//     outside (linuxkernel.Guest, used by gdbtarget and xen alike).
//   - optional abilities a backend may have, declared in this file and
//     found once, when the engine opens the target (findAbilities): on
//     the Target, Dumper (exit 3), Handover (exit 4), PortIO, XOLMapper
//     (out-of-line slots in the target's memory), SignalHolder and
//     SignalBlocker (keep signals back during a step), OwnerAware (the
//     engine's "is this trap ours?" for a backend that classifies stops
//     itself), Warner, BreakpointForgetter, SemaphoreJournaler,
//     TargetCloser, Watcher (debug registers for watch probes) and
//     JumpHost (jump pads); on the OS, SymbolLoader (more symbol files
//     after open), UserRegWriter (pop u in a kernel), StackUnwinder,
//     StackRefuser, PendingReasoner and Describer. A backend states each
//     it has with a `var _ engine.X = ...` check beside its type.
//
// The engine owns everything else: the loop, the breakpoints and what is
// ours (breakpoints.go), hits, steps, commits. A backend never runs probe
// logic.

// Regs is a thread's register file, indexed by rpn.Reg.
type Regs = [rpn.NumRegs]uint64

// EventKind says what a Target reported.
type EventKind uint8

const (
	EvTrap       EventKind = iota // a breakpoint was hit or a single-step completed
	EvSignal                      // a signal is about to be delivered (Sig)
	EvKick                        // the stop requested by Kick
	EvNewThread                   // a new thread of a known address space, stopped
	EvNewSpace                    // a new address space (fork), stopped, a copy of Parent's
	EvExec                        // the address space was replaced (exec)
	EvThreadExit                  // a thread is gone
	EvSpaceExit                   // an address space is gone
	EvSyscall                     // a system call's entry or exit, for a thread that asked (JumpHost.SyscallStops)
)

// Event is what a Target reports from Wait.
type Event struct {
	Kind EventKind
	// Tid is never 0 for a thread: 0 is "no thread" (an EvKick that
	// stopped none, which only runs the commands). A backend whose
	// threads are numbered from 0 (gdbsx's vCPUs) shifts them.
	Tid    int
	Space  int // address space: a pid, or 0 for a guest
	Parent int // EvNewSpace
	Sig    int
	Exit   string // EvSpaceExit: "exited 0", "killed by SIGKILL"
	Code   int    // EvSpaceExit: the exit status, or 128+signal, as a shell reports it
	// Async (EvSignal): the signal was sent to the thread (kill, a
	// child's exit, a timer), not raised by the instruction at its rip
	Async bool
}

// Target is the core of a backend: the primitives of running code under
// a debugger. Every method is called from the engine's loop goroutine
// only, except Kick.
type Target interface {
	// Wait blocks for the next event. ErrNoTracees when nothing is left.
	Wait() (Event, error)
	// Kick makes Wait return an EvKick soon; any goroutine may call it.
	Kick() bool
	ReadMem(space int, addr uint64, p []byte) error
	WriteMem(space int, addr uint64, p []byte) error
	GetRegs(tid int, r *Regs) error
	SetRegs(tid int, r *Regs) error
	Step(tid int) error
	Resume(tid int, sig int) error
	// StopThread brings a running thread to a stop; events it reported
	// first are returned for the engine to handle.
	StopThread(tid int) ([]Event, error)
	// DrainKick runs a stopped thread on until a stop the engine asked for
	// earlier (StopThread, Kick) has arrived and been taken, so nothing of
	// the engine's is left pending; signals met first are returned.
	DrainKick(tid int) ([]int, error)
	// Detach lets a stopped thread go, delivering sig.
	Detach(tid int, sig int) error
	Threads(space int) []int
	Spaces() []int
	// ThreadIndex is the "procid" of a thread: its CPU or index.
	ThreadIndex(tid int) int
	// IsStopped reports whether a thread is stopped by the target.
	IsStopped(tid int) bool

	// InsertBreakpoint plants a breakpoint at addr; orig holds the
	// original bytes there (at least the first instruction's). Only the
	// engine's breakpoint owner (breakpoints.go) calls it.
	InsertBreakpoint(space int, addr uint64, orig []byte) error
	// RemoveBreakpoint takes it out, restoring orig.
	RemoveBreakpoint(space int, addr uint64, orig []byte) error
	// TrapPC is the address of the breakpoint a thread stopped on, from
	// its rip: rip-1 after an int3, rip for a stub that stops before the
	// instruction or a debug-register breakpoint (a fault).
	TrapPC(tid int, rip uint64) uint64

	// OS is what the target knows of the code it runs.
	OS() OS
}

// Describer is an OS that can say what it is, for status and the insert's
// report: a guest kernel's version, build ID, slide, and where its symbols
// and types came from. Describe must not touch the target (it is called
// from outside the engine's loop while the target runs).
type Describer interface {
	Describe() string
}

// OS is the operating-system knowledge of a target: Linux processes, or
// a Linux kernel seen from outside.
type OS interface {
	// Kernel reports whether the target runs kernel code (modtype =
	// kernel modules, privileged instructions, control registers).
	Kernel() bool
	// Check says why a module cannot be probed on this target at all, or
	// "": the wrong modtype, port IO without an IO space, push task
	// without type information.
	Check(m *rpn.Module) string
	// Resolve finds a module in an address space; ok is false when it is
	// not loaded there (yet).
	Resolve(space int, name string, modtype rpn.ModType) (ld *Loaded, ok bool, err error)
	// Rendezvous is where the list of loaded modules changes, if the
	// target has such places (a process: the dynamic linker's one; a
	// guest kernel: where a module is about to run and where it is about
	// to be freed): the engine puts a breakpoint at each and, on every
	// hit, drops what it placed in modules no longer loaded as they were
	// and tries pending probes again. While the answer is empty the
	// engine asks again at the next placement.
	Rendezvous(space int) []uint64
	// Writable reports whether memory at addr may be written by the
	// probed code (for vfy_rw).
	Writable(space int, addr uint64) bool
	// Sys answers push pid, tid, procid and task for a thread at a hit.
	Sys(tid int, regs *Regs, v rpn.SysValue) (uint64, bool)
	// UserReg reads a user-mode register of the current task (push u):
	// the same as the thread's register in a process.
	UserReg(tid int, regs *Regs, r rpn.Reg) (uint64, bool)
}

// PendingReasoner is an OS that says why a module's probes are pending
// (query's reason): not loaded yet, or unloaded (unloaded true: Resolve
// found it loaded before and no longer does).
type PendingReasoner interface {
	PendingReason(space int, name string, unloaded bool) string
}

// BreakpointForgetter is a target whose breakpoints outlive the code they
// were planted in: a stub's breakpoint list, a debug register, a backend's
// journal. When a module is unloaded the engine asks it to forget the
// breakpoints there without writing the original bytes back (the memory
// is about to be freed or reused). A target without one (a process:
// dlclose'd code takes its int3s with it) is only told nothing.
type BreakpointForgetter interface {
	ForgetBreakpoint(space int, addr uint64) error
}

// SemaphoreJournaler is a Target that keeps, for gprobes' sudden death,
// what it added to usdt semaphores in a space (engine/usdt.go): a
// recovery counts them down again. JournalSemaphore records delta (+1
// after the engine counted the semaphore at addr up, -1 before it counts
// it down).
type SemaphoreJournaler interface {
	JournalSemaphore(space int, addr uint64, delta int) error
}

// Dumper is a target that can write a dump of an address space (exit 3):
// an ELF core of a process, the guest's memory.
type Dumper interface {
	// Dump writes a dump into dir; tid is the thread that hit first.
	Dump(space, tid int, dir string) (string, error)
}

// Handover is a target that knows how a debugger attaches to it after
// exit 4 (a guest: the stub gprobes leaves, gdbsx for a Xen domain). A
// target without one is a process: "gdb -p PID".
type Handover interface {
	// DebuggerCommand is the command that attaches a debugger to the
	// space once the engine has let go of it, stopped where tid hit.
	DebuggerCommand(space, tid int) string
}

// UserRegWriter is an OS that can write a user-mode register of a
// kernel's current task (pop u): the saved registers the task returns to
// user mode with. ok false raises the program's invalid-operand
// exception (no such task, a kernel thread, a register not saved there).
type UserRegWriter interface {
	SetUserReg(tid int, regs *Regs, r rpn.Reg, v uint64) bool
}

// PortIO is a target that reaches the IO space of what it runs (push io,
// pop io): a QEMU guest through its monitor. size is 1, 2 or 4.
type PortIO interface {
	PortIO(port uint64, size uint8, write bool, v uint64) (uint64, error)
}

// XOLMapper is a target that can map executable memory for out-of-line
// slots (a process). Without one, displaced instructions are emulated,
// or stepped in place with every other thread stopped.
type XOLMapper interface {
	// AllocXOL maps size bytes of executable memory in the space, near
	// addr if it can, using stopped thread tid.
	AllocXOL(space, tid int, near, size uint64) (uint64, error)
}

// SymbolLoader is an OS that takes more symbol files after it is open (a
// guest kernel: every insert may bring its own).
type SymbolLoader interface {
	AddSymbols(paths []string) error
}

// Owner is the engine's answer to "is this trap ours?", from its books
// (breakpoints.go): the same answer the engine gives itself.
type Owner interface {
	// Ours reports whether addr in space holds a breakpoint the engine
	// planted, or held one until a stop there could still be on its way.
	Ours(space int, addr uint64) bool
}

// OwnerAware is a backend that classifies stops itself, before the engine
// sees them (a stub that ignores ^C stops past an int3), and asks the
// engine's books instead of keeping its own record of what it took out.
// The engine calls SetOwner once, before the first Wait; Ours is called
// from the engine's loop only.
type OwnerAware interface {
	SetOwner(Owner)
}

// Warner is a backend with failures to tell the user that end no
// command: what it could not undo or record while it went on (a domain
// left paused, a descriptor left open in a process, a journal not
// written). The engine calls SetWarn once, before the first Wait, with
// its Options.Warn; the backend calls it from the engine's loop.
type Warner interface {
	SetWarn(func(string))
}

// SignalHolder is implemented by a target that can keep a sent signal
// back while an out-of-line step finishes (a process): without it the
// thread goes back to the probed address to take the signal, and the
// probe fires again when the handler returns.
type SignalHolder interface {
	// Hold takes the signal a thread is stopped for (an EvSignal) out
	// of delivery and keeps it, siginfo and all; the thread then runs
	// on as if none had come.
	Hold(tid int) error
	// Release makes the signals held for a stopped thread pending again:
	// they are reported (EvSignal) and delivered as usual once it runs.
	Release(tid int) error
	// Inert reports whether delivering sig to thread tid runs none of
	// its code and changes nothing: the signal is ignored, or its
	// default action is to ignore it (SIGCHLD, SIGCONT, SIGURG,
	// SIGWINCH) and no handler is set. Such a signal is never held:
	// making it pending again is sending it again, and a SIGCONT sent
	// again discards every stop signal pending in the process (a
	// debugger's SIGSTOP, the tracer's own) and wakes a stopped one.
	Inert(tid, sig int) bool
}

// SignalBlocker is a target that can block a thread's signals for the
// time of an out-of-line step (PTRACE_SETSIGMASK): a signal sent meanwhile
// stays pending in the kernel, with its own siginfo, and is delivered once
// they are unblocked, after the step. Holding (SignalHolder) needs a stop
// per signal and gave up past 8 in one step.
type SignalBlocker interface {
	BlockSignals(tid int) error
	UnblockSignals(tid int) error
}

// ErrNoXOL is returned by AllocXOL by a target that cannot map
// out-of-line slots after all; displaced instructions are then emulated,
// or stepped in place with every other thread stopped.
var ErrNoXOL = errors.New("engine: the target has no out-of-line area")

// ErrNoTracees is what Wait returns when no thread is left to wait for.
var ErrNoTracees = errors.New("engine: nothing left to trace")

// TargetCloser is a Target with something of its own to end when the
// engine's loop is over (the process target's helper process), called on
// the loop's thread.
type TargetCloser interface {
	CloseTarget()
}

// StackUnwinder is an OS that can unwind a stopped thread's stack (log
// ustack, log kstack) and name the frames. Without it a program's log
// ustack and log kstack raise invalid-operand.
type StackUnwinder interface {
	// Unwind writes the frames' addresses of thread tid of space, stopped
	// with regs, into pcs, innermost first (regs' rip first, then return
	// addresses), and returns how many; ok false when this OS has no
	// such stack (a process has no kernel stack to read). Bit i of exact
	// is set when frame i's address is where code was rather than a
	// return address (frame 0; a frame a signal interrupted).
	Unwind(space, tid int, regs *Regs, kernel bool, pcs []uint64) (n int, exact uint64, ok bool)
	// NameFrames names frames Unwind found, with its exact: a return
	// address is looked up at the call before it.
	NameFrames(space int, kernel bool, pcs []uint64, exact uint64) []pb.Frame
}

// StackRefuser is a StackUnwinder that knows at insert that it cannot
// take a kind of stack (kernel false: user stacks): a guest kernel
// without its vmlinux's ORC tables, a guest's user stacks. A probe whose
// program logs such a stack, or with autostacktrace = yes whose stack
// would be one, is refused with the reason rather than raising
// invalid-operand at every hit.
type StackRefuser interface {
	StackRefused(kernel bool) string
}

// JumpHost is a target that can take jump pads (jump.go): a process.
type JumpHost interface {
	XOLMapper
	// MapShared maps gprobes' memfd into the space, read-write and
	// shared, using stopped thread tid; it returns the address.
	MapShared(space, tid int, fd int, size uint64) (uint64, error)
	// Patch writes code over orig at addr (every thread stopped),
	// journaled first so that a recovery can put orig back; Unpatch puts
	// orig back.
	Patch(space int, addr uint64, code, orig []byte) error
	Unpatch(space int, addr uint64, orig []byte) error
	// TIDOffset says where, from its fs_base, stopped thread tid keeps
	// its own id (0: nowhere gprobes trusts; the pads ask the kernel).
	TIDOffset(space, tid int) uint64
	// JournalHeld records the held byte of a pad area at addr, so that a
	// recovery clears it: left at 1 with no tracer, every thread
	// leaving a pad would stop on its int3 and die of SIGTRAP.
	JournalHeld(space int, addr uint64) error
	// FSGSBase reports whether the space's code may run rdfsbase.
	FSGSBase(space int) bool
	// ShadowStack reports whether the space runs with CET shadow stacks.
	ShadowStack(space int) bool
	// NSIDs returns the ids thread tid sees for itself and its process
	// (gettid, getpid), which differ from gprobes' in a pid namespace of
	// the process's own.
	NSIDs(tid int) (nsTid, nsPid int)
	// MapStacks maps size bytes of private read-write memory, anywhere in
	// the space, using stopped thread tid: the pads' stacks.
	MapStacks(space, tid int, size uint64) (uint64, error)
	// LiveWord maps the tracer's liveness word into the space (once per
	// process image; a fork child shares it) using stopped thread tid,
	// journaled, and returns its address: pad.LiveDead set in it means
	// the tracer is gone (the kernel sets it as the tracer thread dies,
	// before it detaches its tracees; a recovery sets it first).
	LiveWord(space, tid int) (uint64, error)
	// BlockPadSignals blocks the asynchronous signals of stopped thread
	// tid, recording its mask where a recovery finds it;
	// UnblockPadSignals gives it back. A signal resent to a thread with
	// it blocked stays pending, with its siginfo (the kernel requeues it).
	BlockPadSignals(tid int) error
	UnblockPadSignals(tid int) error
	// SyscallStops makes thread tid stop at the entry and the exit of its
	// system calls (EvSyscall) from its next resume on, or no longer.
	SyscallStops(tid int, on bool)
	// EndSyscall makes stopped thread tid, at a system call's exit,
	// return with the registers it was given: no restart of the call.
	EndSyscall(tid int) error
	// MapRanges returns the space's mappings, [start, end) each, in
	// order.
	MapRanges(space int) ([][2]uint64, error)
	// Unmap unmaps what AllocXOL or MapShared mapped, using stopped
	// thread tid.
	Unmap(space, tid int, addr, size uint64) error
	// SharesMemory reports whether two spaces are one address space (a
	// vfork child and its parent).
	SharesMemory(a, b int) (bool, error)
}

// Watcher is a target with data breakpoints (x86 debug registers; watch
// probes, watch.go). The engine chooses the register
// (slot 0-3) of each watch; the backend programs it.
type Watcher interface {
	// DebugRegs says what the target uses each of the four debug
	// registers for itself, "" for none: the xen backend's
	// debug-register breakpoints share them with watches.
	DebugRegs() [NumWatch]string
	// SetWatch makes debug register slot watch w in every thread of a
	// space, those created later included (WatchThread), stopping
	// running threads for it if it must.
	SetWatch(space, slot int, w Watch) error
	// ClearWatch turns the register off in every thread of the space.
	ClearWatch(space, slot int) error
	// WatchThread gives a new thread of a space (stopped, at its first
	// stop) the space's watches: a clone does not inherit them.
	WatchThread(tid, space int) error
	// WatchHit says, for a thread stopped by a trap, which registers
	// fired (bit i: slot i) and clears that status (DR6), and whether
	// the stop is also something else the engine handles as usual (a
	// single-step that completed, a code breakpoint).
	WatchHit(tid int) (fired uint8, other bool, err error)
}

// abilities are the optional abilities of the target and its OS, found
// once when the engine opens the target: each is nil when the backend
// does not have it. The engine asks these, never the target again.
type abilities struct {
	jump       JumpHost
	watcher    Watcher
	blocker    SignalBlocker
	holder     SignalHolder
	xol        XOLMapper
	dumper     Dumper
	handover   Handover
	portIO     PortIO
	forgetter  BreakpointForgetter
	journaler  SemaphoreJournaler
	closer     TargetCloser
	ownerAware OwnerAware
	warner     Warner
	// the OS's
	loader    SymbolLoader
	unwinder  StackUnwinder
	refuser   StackRefuser
	userRegs  UserRegWriter
	pending   PendingReasoner
	describer Describer
}

// findAbilities is the one place the engine asks what a target can do.
func findAbilities(t Target, os OS) abilities {
	var a abilities
	a.jump, _ = t.(JumpHost)
	a.watcher, _ = t.(Watcher)
	a.blocker, _ = t.(SignalBlocker)
	a.holder, _ = t.(SignalHolder)
	a.xol, _ = t.(XOLMapper)
	a.dumper, _ = t.(Dumper)
	a.handover, _ = t.(Handover)
	a.portIO, _ = t.(PortIO)
	a.forgetter, _ = t.(BreakpointForgetter)
	a.journaler, _ = t.(SemaphoreJournaler)
	a.closer, _ = t.(TargetCloser)
	a.ownerAware, _ = t.(OwnerAware)
	a.warner, _ = t.(Warner)
	a.loader, _ = os.(SymbolLoader)
	a.unwinder, _ = os.(StackUnwinder)
	a.refuser, _ = os.(StackRefuser)
	a.userRegs, _ = os.(UserRegWriter)
	a.pending, _ = os.(PendingReasoner)
	a.describer, _ = os.(Describer)
	return a
}
