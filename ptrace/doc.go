// Package ptrace is the Linux process backend of the engine: it starts or
// attaches to a process, follows every thread and every process forked or
// cloned from it, reads and writes their registers and memory, single-steps
// and resumes them, and reports what happens to them as events. It holds no
// probe logic: the engine owns the loop, the breakpoints and the caches.
//
// Design note. Linux accepts ptrace requests for a tracee only from the one
// thread that attached it, so a Tracer lives on one locked OS thread and
// every method must be called from the goroutine that created it (the
// engine's loop); the trap for callers is exactly that. Events come from
// wait4(-1, __WALL), which blocks; to hand the loop work from another
// goroutine, Kick stops one tracee with SIGSTOP (as delve does), and the
// resulting stop is reported as EventKick, to be resumed without the
// signal. Memory goes through /proc/PID/mem (pread/pwrite), which also
// writes read-only text, and registers through PTRACE_GETREGS/SETREGS.
// Assumptions: x86_64 tracees (32-bit processes are refused), a kernel
// that allows ptrace (root, or kernel.yama.ptrace_scope 0 for attach).
package ptrace
