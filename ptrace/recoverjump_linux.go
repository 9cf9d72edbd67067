package ptrace

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// restoreJumps puts the original code back over the jumps to pads a dead
// gprobes left in a process (and the signal masks it changed, recorded in
// the liveness page at live). A jump is several bytes, which a running
// thread could fetch half-written: every thread is stopped first
// (PTRACE_SEIZE, PTRACE_INTERRUPT), once the dead tracer's attachment is
// gone (the kernel detaches its tracees as it exits). A thread inside a
// pad goes on there and jumps back to the original code; the pads stay
// mapped. Where the threads cannot be stopped the jumps stay, and the
// pads keep running the probes: records are counted lost once the ring
// is full, and the process runs on (docs/engine.md).
func restoreJumps(pid int, maps []Mapping, jumps []savedByte, live uint64) (int, int, error) {
	n, m := 0, 0
	err := withThreadsStopped(pid, "put the jumps back", func(tids []int) error {
		var err error
		n, err = writeBackJumps(pid, maps, jumps)
		if live != 0 {
			// the masks of threads a signal was held for inside a pad:
			// their signals, pending, come once they run
			var merr error
			m, merr = recoverMasks(pid, maps, live, tids)
			err = errors.Join(err, merr)
		}
		return err
	})
	return n, m, err
}

// recoverWatches turns off the debug registers (watch probes) a dead
// gprobes left in every thread of a process: PTRACE_POKEUSER needs the
// threads stopped under a tracer, so they are seized as for the jumps.
// It returns how many threads it cleared.
func recoverWatches(pid int) (int, error) {
	n := 0
	err := withThreadsStopped(pid, "turn its debug registers off", func(tids []int) error {
		var errs []error
		for _, tid := range tids {
			if err := clearDebugRegs(tid); err != nil {
				if !errors.Is(err, unix.ESRCH) {
					errs = append(errs, fmt.Errorf("thread %d: %w", tid, err))
				}
				continue
			}
			n++
		}
		return errors.Join(errs...)
	})
	return n, err
}

// withThreadsStopped seizes and interrupts every thread of a process (once
// the dead tracer's attachment is gone: the kernel detaches its tracees as
// it exits), runs f with them stopped, and lets them go. why says what
// for, in errors.
func withThreadsStopped(pid int, why string, f func(tids []int) error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	deadline := time.Now().Add(2 * time.Second)
	seized := map[int]bool{}
	// a thread may stop for a signal before the interrupt: it is stopped
	// as well, and gets its signal back as it is let go (detaching with
	// 0 would throw it away)
	sigs := map[int]int{}
	defer func() {
		for tid := range seized {
			unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(tid), 0, uintptr(sigs[tid]), 0, 0)
		}
	}()
	for {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return err
		}
		more := false
		for _, ent := range ents {
			tid, err := strconv.Atoi(ent.Name())
			if err != nil || seized[tid] {
				continue
			}
			more = true
			if err := unix.PtraceSeize(tid); err != nil {
				if errors.Is(err, unix.EPERM) && time.Now().Before(deadline) {
					// still traced by the dying gprobes
					time.Sleep(5 * time.Millisecond)
					continue
				}
				if errors.Is(err, unix.ESRCH) {
					continue
				}
				return fmt.Errorf("stop thread %d to %s: %w", tid, why, err)
			}
			seized[tid] = true
			if err := unix.PtraceInterrupt(tid); err != nil {
				return err
			}
			var ws unix.WaitStatus
			if _, err := unix.Wait4(tid, &ws, unix.WALL, nil); err != nil {
				return err
			}
			if ws.Stopped() && ws.StopSignal() != unix.SIGTRAP && uint32(ws)>>16 == 0 {
				// a signal-delivery stop (a group-stop of a seized
				// thread carries PTRACE_EVENT_STOP in the status)
				sigs[tid] = int(ws.StopSignal())
			}
		}
		if !more {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the threads of %d could not all be stopped to %s", pid, why)
		}
	}
	tids := make([]int, 0, len(seized))
	for tid := range seized {
		tids = append(tids, tid)
	}
	return f(tids)
}

// writeBackJumps writes the original code over the jumps, every thread
// stopped.
func writeBackJumps(pid int, maps []Mapping, jumps []savedByte) (int, error) {
	mem, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer mem.Close()
	n := 0
	var errs []error
	for _, b := range jumps {
		if !sameFile(maps, b) {
			continue
		}
		cur := make([]byte, len(b.Code))
		if _, err := mem.ReadAt(cur, int64(b.Addr)); err != nil || !bytes.Equal(cur, b.Code) {
			continue
		}
		if _, err := mem.WriteAt(b.Was, int64(b.Addr)); err != nil {
			errs = append(errs, fmt.Errorf("%#x: %w", b.Addr, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
