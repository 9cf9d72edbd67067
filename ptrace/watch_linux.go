package ptrace

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/engine"
)

// Watch probes on a process: x86's debug registers through ptrace. Linux
// keeps a thread's DR0-DR3 and DR7 as perf hardware breakpoints of that
// thread (arch/x86/kernel/ptrace.c), written with PTRACE_POKEUSER at
// offsetof(struct user, u_debugreg[i]) while it is stopped. What the
// kernel does with them, and so what this file does:
//
//   - They belong to one thread: every thread of a process gets the
//     process's watches, and a thread created later gets them at its
//     first stop (WatchThread); clone and fork start a thread with none
//     (copy_thread clears ptrace_bps), so a fork child gets them only if
//     the engine gives them (it does: a watch, like the other probes,
//     covers the children of a traced process).
//   - exec clears them (flush_thread), with the image: the engine places
//     its watches again in the new one.
//   - PTRACE_DETACH, and the kernel's detach when the tracer dies, leave
//     them in: a watch hit in a process no one traces is a SIGTRAP that
//     kills it. So they are turned off before every detach, journaled
//     while they are in, and the recovery of a dead gprobes's journal
//     clears them (DR7 0) in every thread.
//   - A hit is a #DB trap: SIGTRAP after the instruction, with the
//     register's bit in the thread's virtual DR6 (PTRACE_PEEKUSER of
//     u_debugreg[6]). The kernel sets that DR6 afresh at each #DB only:
//     an int3's SIGTRAP leaves the last one, so WatchHit clears it after
//     reading it.
//   - They watch the process's own accesses in user mode: the kernel's
//     accesses on its behalf (read(2) into a watched buffer) are not
//     reported (ptrace's breakpoints exclude the kernel).
//   - A process cannot use these registers itself (only its tracer can);
//     its own perf hardware breakpoints (perf_event_open on itself) share
//     the CPU's four with ours, and when they are all taken the kernel
//     refuses the later one, ours (ENOSPC, said at insert) or its own.

// offDebugReg is offsetof(struct user, u_debugreg) on x86_64.
const offDebugReg = 848

const (
	dr6Hits = 0xf     // B0-B3: which register fired
	dr6Step = 1 << 14 // BS: a single-step
)

// procWatches are a process's watches, by debug register.
type procWatches struct {
	slots [engine.NumWatch]*engine.Watch
}

// dr7 is DR7 with every watch in, or without one slot (skip >= 0).
func (pw *procWatches) dr7(skip int) uint64 {
	var v uint64
	for i, w := range pw.slots {
		if w != nil && i != skip {
			v |= 1<<(2*i) | w.DR7(i)
		}
	}
	return v
}

func (pw *procWatches) empty() bool { return pw.dr7(-1) == 0 }

func pokeUser(tid int, off uintptr, v uint64) error {
	if _, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_POKEUSR, uintptr(tid), off, uintptr(v), 0, 0); errno != 0 {
		return errno
	}
	return nil
}

func peekUser(tid int, off uintptr) (uint64, error) {
	var v uint64
	if _, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_PEEKUSR, uintptr(tid), off, uintptr(unsafe.Pointer(&v)), 0, 0); errno != 0 {
		return 0, errno
	}
	return v, nil
}

func debugReg(i int) uintptr { return offDebugReg + uintptr(i)*8 }

// setDebugReg writes debug register i of a stopped thread, saying which
// and why it failed.
func setDebugReg(tid, i int, v uint64) error {
	if err := pokeUser(tid, debugReg(i), v); err != nil {
		why := ""
		switch {
		case errors.Is(err, unix.ENOSPC):
			why = " (the CPU's four debug registers are taken for this thread: the process's own perf hardware breakpoints, or another tool's)"
		case errors.Is(err, unix.EINVAL) && i < 4:
			why = " (the kernel refuses the address: not a user address, or not aligned)"
		}
		return fmt.Errorf("debug register DR%d of thread %d: %w%s", i, tid, err, why)
	}
	return nil
}

var _ engine.Watcher = (*Target)(nil)

// DebugRegs: the process target uses no debug register itself.
func (tg *Target) DebugRegs() [engine.NumWatch]string { return [engine.NumWatch]string{} }

func (tg *Target) watchesOf(pid int) *procWatches {
	if tg.watches == nil {
		tg.watches = map[int]*procWatches{}
	}
	pw := tg.watches[pid]
	if pw == nil {
		pw = &procWatches{}
		tg.watches[pid] = pw
	}
	return pw
}

// watchDrop forgets a process's watches: its image is gone (exec, exit),
// and the kernel cleared its debug registers with it.
func (tg *Target) watchDrop(pid int) { delete(tg.watches, pid) }

// SetWatch makes debug register slot watch w in every thread of the
// process, stopping each running one for the time of the write. It is
// journaled first: a gprobes that dies with it in leaves what the
// recovery clears.
func (tg *Target) SetWatch(space, slot int, w engine.Watch) error {
	if slot < 0 || slot >= engine.NumWatch {
		return fmt.Errorf("no debug register DR%d", slot)
	}
	pw := tg.watchesOf(space)
	old := pw.slots[slot]
	pw.slots[slot] = &w
	if err := tg.journalWatches(space); err != nil {
		pw.slots[slot] = old
		return err
	}
	if err := tg.eachThread(space, func(tid int) error { return tg.programSlot(tid, pw, slot) }); err != nil {
		// back as it was, in the threads written already
		pw.slots[slot] = old
		back := tg.eachThread(space, func(tid int) error { return tg.programSlot(tid, pw, slot) })
		if back != nil {
			back = fmt.Errorf("and putting DR%d back as it was: %w", slot, back)
		}
		return errors.Join(err, back, tg.journalWatches(space))
	}
	return nil
}

// ClearWatch turns debug register slot off in every thread of the
// process.
func (tg *Target) ClearWatch(space, slot int) error {
	if slot < 0 || slot >= engine.NumWatch {
		return fmt.Errorf("no debug register DR%d", slot)
	}
	pw := tg.watches[space]
	if pw == nil || pw.slots[slot] == nil {
		return nil
	}
	pw.slots[slot] = nil
	err := tg.eachThread(space, func(tid int) error { return setDebugReg(tid, 7, pw.dr7(-1)) })
	if err == nil {
		err = tg.journalWatches(space)
	}
	return err
}

// programSlot writes one register of a stopped thread as pw has it: off
// first with the shortest length (Linux checks a new address against the
// length the register has), then the address, then on.
func (tg *Target) programSlot(tid int, pw *procWatches, slot int) error {
	if err := setDebugReg(tid, 7, pw.dr7(slot)); err != nil {
		return err
	}
	w := pw.slots[slot]
	if w == nil {
		return nil
	}
	if err := setDebugReg(tid, slot, w.Addr); err != nil {
		return err
	}
	return setDebugReg(tid, 7, pw.dr7(-1))
}

// WatchThread gives a new thread (stopped at its first stop) the
// process's watches.
func (tg *Target) WatchThread(tid, space int) error {
	pw := tg.watches[space]
	if pw == nil || pw.empty() {
		return nil
	}
	for i, w := range pw.slots {
		if w != nil {
			if err := setDebugReg(tid, i, w.Addr); err != nil {
				return err
			}
		}
	}
	return setDebugReg(tid, 7, pw.dr7(-1))
}

// WatchHit reads the DR6 of a thread stopped by a SIGTRAP: the registers
// of its process's watches that fired, and whether it single-stepped too.
// A DR6 with a register's bit is cleared: the kernel would keep it until
// the next #DB, and an int3's SIGTRAP would read it again.
func (tg *Target) WatchHit(tid int) (uint8, bool, error) {
	th := tg.t.Thread(tid)
	if th == nil {
		return 0, false, fmt.Errorf("thread %d is not traced", tid)
	}
	pw := tg.watches[th.Pid]
	if pw == nil || pw.empty() {
		return 0, false, nil
	}
	dr6, err := peekUser(tid, debugReg(6))
	if err != nil {
		return 0, false, fmt.Errorf("DR6 of thread %d: %w", tid, err)
	}
	if dr6&dr6Hits != 0 {
		if err := pokeUser(tid, debugReg(6), 0); err != nil {
			return 0, false, fmt.Errorf("clear DR6 of thread %d: %w", tid, err)
		}
	}
	var mine uint8
	for i, w := range pw.slots {
		if w != nil && dr6&(1<<i) != 0 {
			mine |= 1 << i
		}
	}
	return mine, dr6&dr6Step != 0, nil
}

// eachThread runs f on every thread of a process, each stopped: a running
// one is stopped for it (what it reported meanwhile goes back to Wait)
// and let go after, as Dump does.
func (tg *Target) eachThread(pid int, f func(tid int) error) error {
	p := tg.t.Process(pid)
	if p == nil {
		return fmt.Errorf("process %d is not traced", pid)
	}
	var errs []error
	for tid := range p.Threads {
		th := tg.t.Thread(tid)
		if th == nil {
			continue
		}
		stopped := false
		if !th.Stopped {
			evs, err := tg.t.StopThread(tid)
			tg.t.Queue(evs...)
			if err != nil {
				continue // it exited
			}
			stopped = len(evs) == 0
		}
		if err := f(tid); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, err)
		}
		if stopped {
			if err := tg.t.Resume(tid, 0); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// clearDebugRegs turns every debug register of a stopped thread off: what
// a dead gprobes's journal recovery does to each thread it stops.
func clearDebugRegs(tid int) error {
	if err := pokeUser(tid, debugReg(7), 0); err != nil {
		return err
	}
	return pokeUser(tid, debugReg(6), 0)
}
