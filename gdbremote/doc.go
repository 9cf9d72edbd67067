// Package gdbremote is a client of the GDB Remote Serial Protocol: it talks
// to a stub (QEMU/KVM's -gdb, Xen's gdbsx, gdbserver) to read and write the
// registers and memory of a stopped target, set breakpoints, step, resume
// and wait for stops. It speaks the protocol only; the engine's target
// adapter on top of it owns breakpoints, hits and caches.
//
// Design note.
//
// Terminology: the stub is the program at the other end of the connection;
// the target is what it debugs (a guest's vCPUs, a process's threads). A
// packet is "$data#checksum"; every request gets exactly one reply, except
// the resume requests (c, s, vCont), whose reply, a stop reply (S, T, W,
// X), comes when the target stops again. An empty reply means "not
// supported", "E NN" an error, "OK" success.
//
// The protocol is all-stop: while the target runs, the only thing a client
// may send is the interrupt byte 0x03. So the Conn has two states. Stopped:
// requests (registers, memory, breakpoints, threads) are allowed. Running:
// after Continue or Step, until Wait has returned the stop; requests fail
// with ErrRunning. Continue and Step return at once; Wait returns the stop.
//
// Assumptions about stubs, checked against QEMU 7.2 and gdbserver 13 (see
// docs/gdbremote.md for what each does):
//   - Threads are the stub's: a vCPU per thread on QEMU (ids from 1) and
//     gdbsx (from 0), a thread (LWP) per thread on gdbserver. In
//     multiprocess mode ids read "p<pid>.<tid>" in hex; Thread.ID is sent
//     back exactly as the stub wrote it.
//   - Registers are little-endian (x86). The layout comes from the stub's
//     target description; without one, QEMU's x86_64 layout is assumed.
//   - "vCont;s:<thread>" steps one thread and leaves the others stopped;
//     "vCont;c" resumes all. A stop reply names its thread, and the stub
//     selects that thread for the next g/p: the zero Thread relies on it,
//     a named Thread is selected with Hg after every resume.
//   - A stub may stop a running target on its own when a client connects
//     (QEMU does, and reports it unasked before any reply); NewConn drops
//     stop replies that come before the first reply.
//   - "E NN" codes are errnos written in decimal (QEMU) or stub codes
//     (gdbserver's E01); errors show the packet, the reply and a reading.
//
// Goroutines: a Conn is used by one goroutine at a time, except Interrupt,
// which any goroutine may call while another blocks in Wait. (Methods take
// a lock, so concurrent use is safe, but a request waits while another
// goroutine is in Wait.)
//
// Registers: the zero Thread in ReadRegs, ReadReg and WriteReg means the
// stub's current thread, the one of the last stop, and saves the Hg round
// trip a named thread costs after every resume.
//
// The trap: after Continue or Step, every stop must be collected with Wait
// before anything else is sent, including after a Wait cut short by its
// context: Interrupt, then Wait again. And a thread stopped at a breakpoint
// stops there again when continued, on QEMU and gdbserver alike (QEMU's
// breakpoints are not in guest memory, gdbserver does not step over the
// client's): clear it, Step, Wait, set it again, then Continue.
package gdbremote
