package ptrace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/internal/shm"
	"github.com/gprobes/gprobes/pad"
)

// The tracer's liveness word (docs/engine.md, "gprobes killed"): a page
// of shared memory (a memfd) that gprobes maps, and every process with
// jump pads maps too. Its first word holds the tracer thread's id while
// the tracer lives; the pads read it before running any probe and before
// stopping for the tracer, and do neither once it says the tracer is gone
// (bit 30, FUTEX_OWNER_DIED).
//
// Nobody has to write it when gprobes dies: the word is a robust futex of
// the tracer thread (set_robust_list). When a thread exits, SIGKILL
// included, the kernel walks its robust list and marks each futex it holds
// FUTEX_OWNER_DIED, in exit_mm, before exit_notify detaches its tracees:
// by the time a tracee could meet a stop nobody answers, the word says so.
// The guard and `gprobes recover` write it too, first (it is journaled).
//
// The rest of the page records the signal masks gprobes changed to hold a
// signal for a thread inside a pad (the signals blocked until the thread
// leaves it, pending in the kernel with their own siginfo): a recovery
// puts them back.
const (
	liveSize = pad.LiveSize
	// liveDead is what the word says once the tracer is gone: the
	// kernel's FUTEX_OWNER_DIED (the id bits cleared)
	liveDead = pad.LiveDead
	// liveMasks: entries of {tid uint32, _ uint32, the thread's mask
	// uint64, the mask gprobes gave it uint64, _ uint64}
	liveMasks   = 64
	liveEntry   = 32
	liveEntries = (liveSize - liveMasks) / liveEntry
)

// LiveDead is the liveness word's bit that says the tracer is gone.
const LiveDead = liveDead

// liveUnmapped forgets the page of process space once it unmapped it at
// addr (detach).
func (tg *Target) liveUnmapped(space int, addr uint64) {
	if tg.live != nil && tg.live.at[space] == addr {
		delete(tg.live.at, space)
	}
}

// live is a tracer's liveness page.
type live struct {
	mem *shm.Mem
	// head and entry: the robust list registered for the tracer thread,
	// in memory of its own (never Go's heap: the kernel reads it as the
	// thread dies)
	list []byte
	// where each process maps the page
	at map[int]uint64
}

// liveWord returns the tracer's liveness page, made the first time: the
// word set to the calling thread's id (the tracer's: every Target method
// runs on it) and registered as its robust futex.
func (tg *Target) liveWord() (*live, error) {
	if tg.live != nil {
		return tg.live, nil
	}
	mem, err := shm.Create("gprobes-live", liveSize)
	if err != nil {
		return nil, err
	}
	list, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		mem.Close()
		return nil, err
	}
	word := (*uint32)(unsafe.Pointer(&mem.Bytes[0]))
	atomic.StoreUint32(word, uint32(unix.Gettid()))
	// struct robust_list_head { next, futex_offset, list_op_pending } at
	// 0; the one entry, struct robust_list { next }, at 64
	head := uintptr(unsafe.Pointer(&list[0]))
	entry := uintptr(unsafe.Pointer(&list[64]))
	binary.LittleEndian.PutUint64(list[0:], uint64(entry))
	binary.LittleEndian.PutUint64(list[8:], uint64(uintptr(unsafe.Pointer(word))-entry))
	binary.LittleEndian.PutUint64(list[16:], 0)
	binary.LittleEndian.PutUint64(list[64:], uint64(head))
	if _, _, errno := unix.RawSyscall(unix.SYS_SET_ROBUST_LIST, head, 24, 0); errno != 0 {
		unix.Munmap(list)
		mem.Close()
		return nil, fmt.Errorf("set_robust_list: %w", errno)
	}
	tg.live = &live{mem: mem, list: list, at: map[int]uint64{}}
	return tg.live, nil
}

// LiveWord maps the tracer's liveness page into process space (stopped
// thread tid makes the system calls) once per process image, journals
// the word's address, and returns it.
func (tg *Target) LiveWord(space, tid int) (uint64, error) {
	l, err := tg.liveWord()
	if err != nil {
		return 0, err
	}
	if at, ok := l.at[space]; ok {
		return at, nil
	}
	at, err := tg.MapShared(space, tid, l.mem.FD, liveSize)
	if err != nil {
		return 0, err
	}
	l.at[space] = at
	if err := tg.journalLive(space, at); err != nil {
		return 0, err
	}
	return at, nil
}

// liveForget drops what the liveness page knows of a process image (exec,
// exit); a fork child maps it where its parent does.
func (tg *Target) liveForget(pid int) {
	if tg.live != nil {
		delete(tg.live.at, pid)
	}
}

func (tg *Target) liveFork(child, parent int) {
	if tg.live == nil {
		return
	}
	if at, ok := tg.live.at[parent]; ok {
		tg.live.at[child] = at
	}
}

// BlockPadSignals blocks the asynchronous signals of stopped thread tid,
// inside a jump pad (as BlockSignals does), recording its mask in the
// liveness page first: if gprobes dies before UnblockPadSignals, a
// recovery puts it back. The record comes before the change and goes
// after the change back, and a recovery restores only a mask that is
// still the one gprobes set: gprobes dying at any moment of it leaves no
// mask changed.
func (tg *Target) BlockPadSignals(tid int) error {
	if _, ok := tg.masks[tid]; ok {
		return nil
	}
	var old uint64
	if err := sigmask(unix.PTRACE_GETSIGMASK, tid, &old); err != nil {
		return err
	}
	blocked := padMask(old)
	if tg.live != nil {
		b := tg.live.mem.Bytes
		for i := 0; i < liveEntries; i++ {
			off := liveMasks + i*liveEntry
			if binary.LittleEndian.Uint32(b[off:]) == 0 {
				binary.LittleEndian.PutUint64(b[off+8:], old)
				binary.LittleEndian.PutUint64(b[off+16:], blocked)
				atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[off])), uint32(tid))
				break
			}
		}
	}
	if err := sigmask(unix.PTRACE_SETSIGMASK, tid, &blocked); err != nil {
		tg.liveClear(tid)
		return err
	}
	tg.masks[tid] = old
	return nil
}

// padMask is the mask BlockPadSignals gives a thread whose mask was old,
// as the kernel keeps it (SIGKILL and SIGSTOP cannot be blocked).
func padMask(old uint64) uint64 {
	return (old | ^syncSignals) &^ (1<<(unix.SIGKILL-1) | 1<<(unix.SIGSTOP-1))
}

// UnblockPadSignals gives stopped thread tid its mask back (the signals
// held meanwhile are delivered once it runs), then clears its record. A
// thread whose mask is no longer the one gprobes set (it changed it
// itself: a longjmp out of a handler) keeps its own.
func (tg *Target) UnblockPadSignals(tid int) error {
	old, ok := tg.masks[tid]
	if !ok {
		tg.liveClear(tid)
		return nil
	}
	delete(tg.masks, tid)
	var cur uint64
	err := sigmask(unix.PTRACE_GETSIGMASK, tid, &cur)
	if err == nil && cur == padMask(old) {
		err = sigmask(unix.PTRACE_SETSIGMASK, tid, &old)
	}
	tg.liveClear(tid)
	return err
}

func (tg *Target) liveClear(tid int) {
	if tg.live == nil {
		return
	}
	b := tg.live.mem.Bytes
	for i := 0; i < liveEntries; i++ {
		off := liveMasks + i*liveEntry
		if binary.LittleEndian.Uint32(b[off:]) == uint32(tid) {
			atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[off])), 0)
		}
	}
}

// SyscallStops makes thread tid stop at the entry and exit of its system
// calls from its next resume on (EvSyscall), or no longer.
func (tg *Target) SyscallStops(tid int, on bool) {
	if th := tg.t.Thread(tid); th != nil {
		th.SyscallStops = on
	}
}

// EndSyscall makes stopped thread tid, at a system call's exit, return to
// the registers it was given as they are: no restart of the call (the
// kernel restarts one whose result looks like -ERESTARTSYS when a signal
// is pending, by moving rip back over it).
func (tg *Target) EndSyscall(tid int) error {
	raw := tg.raw[tid]
	if raw == nil {
		return fmt.Errorf("end the system call of %d: no registers read", tid)
	}
	raw.Orig_rax = ^uint64(0)
	return tg.t.SetRegs(tid, raw)
}

// recoverLive marks a dead tracer's liveness word in process pid as dead
// (the kernel did, as the tracer died, unless something went wrong), if
// its page is still mapped there.
func recoverLive(pid int, maps []Mapping, at uint64) error {
	if !liveMapped(maps, at) {
		return nil
	}
	mem, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer mem.Close()
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], liveDead)
	_, err = mem.WriteAt(b[:], int64(at))
	return err
}

// liveMapped reports whether a liveness page is mapped at addr.
func liveMapped(maps []Mapping, addr uint64) bool {
	for _, m := range maps {
		if addr >= m.Start && addr < m.End {
			return strings.Contains(m.Path, "memfd:gprobes-live")
		}
	}
	return false
}

// recoverMasks gives the threads of process pid (stopped, in tids) the
// signal masks a dead tracer recorded in the liveness page at addr.
func recoverMasks(pid int, maps []Mapping, at uint64, tids []int) (int, error) {
	if !liveMapped(maps, at) {
		return 0, nil
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return 0, err
	}
	defer mem.Close()
	page := make([]byte, liveSize)
	if _, err := mem.ReadAt(page, int64(at)); err != nil {
		return 0, err
	}
	ours := map[int]bool{}
	for _, t := range tids {
		ours[t] = true
	}
	n := 0
	var errs []error
	for i := 0; i < liveEntries; i++ {
		off := liveMasks + i*liveEntry
		tid := int(binary.LittleEndian.Uint32(page[off:]))
		if tid == 0 || !ours[tid] {
			continue
		}
		mask, set := binary.LittleEndian.Uint64(page[off+8:]), binary.LittleEndian.Uint64(page[off+16:])
		var cur uint64
		if sigmask(unix.PTRACE_GETSIGMASK, tid, &cur) != nil || cur != set {
			// not the mask gprobes gave it (not set yet, given back
			// already, or changed by the thread since: a handler's
			// return restores its own): left alone
			continue
		}
		if err := sigmask(unix.PTRACE_SETSIGMASK, tid, &mask); err != nil {
			if !errors.Is(err, unix.ESRCH) {
				errs = append(errs, err)
			}
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
