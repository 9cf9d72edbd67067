// Package engine puts probes into running code and handles their hits. It
// owns the loop, the breakpoints and the caches; a Target (a traced process
// tree, a guest's GDB stub, a Xen domain) provides only primitives: memory,
// registers, step, resume, wait.
//
// A logical probe is one DPDF probe of an inserted module; a physical
// breakpoint is one address in one address space with its original
// instruction, its out-of-line slot and the probes there, in insertion
// order. On a hit the engine runs each probe's program with the thread's own
// rpn.Machine (its temporary log buffer), executes the displaced instruction
// (emulated, boosted through its out-of-line slot, or single-stepped there),
// and only then commits the records. The int3 never leaves the code while
// probes are in, so other threads hitting the same probe meanwhile are never
// missed.
//
// The trap: every Target method must be called from the engine's loop
// goroutine, which the engine locks to one OS thread (ptrace requires it);
// other goroutines talk to the engine only through its exported methods,
// which hand work to the loop.
package engine
