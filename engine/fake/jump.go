package fake

import (
	"fmt"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/engine"
)

// JumpTarget is the fake process taking jump pads (engine.JumpHost), as a
// process does: the engine maps areas, stacks and its shared memory
// (the memfd is mapped in the test's process too, so that the fake's
// memory there is the engine's), patches jumps and takes them out. The
// fake does not run a pad's code: a thread that reaches a jump into one
// dies of SIGSEGV, as at any instruction the fake does not know. A pad's
// hits are proven on real processes (ptrace); here the books are: what
// is planted, where, and that it all goes.
type JumpTarget struct{ *Target }

var _ engine.JumpHost = JumpTarget{}

// jumpBooks are the fake's records of what a JumpTarget was asked.
type jumpBooks struct {
	next     uint64            // the next address handed out for a mapping
	shared   map[uint64][]byte // mappings of a memfd, to unmap
	Patched  map[uint64][]byte // journal: the original bytes under each jump
	Held     []uint64          // journal: held bytes
	syscalls map[int]bool
	// refuse, when set, is the error of the next mapping (MapShared,
	// AllocXOL, MapStacks): a process that has no room
	refuse error
}

// mapAt hands out size bytes of address space (called with t.mu held).
func (t *Target) mapAt(size uint64) uint64 {
	if t.jump.next == 0 {
		t.jump.next = 0x40000000
	}
	at := t.jump.next
	t.jump.next += (size + 0xffff) &^ 0xffff
	return at
}

func (j JumpTarget) alloc(size uint64, writable bool) (uint64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.jump.refuse; err != nil {
		j.jump.refuse = nil
		return 0, err
	}
	at := j.mapAt(size)
	j.regions = append(j.regions, &Region{Base: at, Data: make([]byte, size), Writable: writable})
	return at, nil
}

// RefuseNextMap makes the next mapping the engine asks for fail with err.
func (t *Target) RefuseNextMap(err error) {
	t.mu.Lock()
	t.jump.refuse = err
	t.mu.Unlock()
}

func (j JumpTarget) AllocXOL(space, tid int, near, size uint64) (uint64, error) {
	return j.alloc(size, false)
}

func (j JumpTarget) MapStacks(space, tid int, size uint64) (uint64, error) {
	return j.alloc(size, true)
}

func (j JumpTarget) LiveWord(space, tid int) (uint64, error) { return j.alloc(4096, true) }

// MapShared maps the memfd in the test's process and makes that mapping
// the fake's memory at the address it returns.
func (j JumpTarget) MapShared(space, tid int, fd int, size uint64) (uint64, error) {
	b, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return 0, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.jump.refuse; err != nil {
		j.jump.refuse = nil
		unix.Munmap(b)
		return 0, err
	}
	at := j.mapAt(size)
	if j.jump.shared == nil {
		j.jump.shared = map[uint64][]byte{}
	}
	j.jump.shared[at] = b
	j.regions = append(j.regions, &Region{Base: at, Data: b, Writable: true})
	return at, nil
}

func (j JumpTarget) Unmap(space, tid int, addr, size uint64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i, r := range j.regions {
		if r.Base == addr {
			j.regions = append(j.regions[:i], j.regions[i+1:]...)
			if b := j.jump.shared[addr]; b != nil {
				delete(j.jump.shared, addr)
				return unix.Munmap(b)
			}
			return nil
		}
	}
	return fmt.Errorf("fake: nothing mapped at %#x", addr)
}

// Patch journals orig, then writes code, as the process target does.
func (j JumpTarget) Patch(space int, addr uint64, code, orig []byte) error {
	j.mu.Lock()
	if j.jump.Patched == nil {
		j.jump.Patched = map[uint64][]byte{}
	}
	j.jump.Patched[addr] = append([]byte{}, orig...)
	j.mu.Unlock()
	return j.WriteMem(space, addr, code)
}

func (j JumpTarget) Unpatch(space int, addr uint64, orig []byte) error {
	if err := j.WriteMem(space, addr, orig); err != nil {
		return err
	}
	j.mu.Lock()
	delete(j.jump.Patched, addr)
	j.mu.Unlock()
	return nil
}

// Patches are the addresses holding a jump now (journaled, not taken
// out), in order.
func (t *Target) Patches() []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []uint64
	for a := range t.jump.Patched {
		out = append(out, a)
	}
	sort.Slice(out, func(i, k int) bool { return out[i] < out[k] })
	return out
}

// HeldBytes are the held bytes of the pad areas, as journaled.
func (t *Target) HeldBytes() []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]uint64{}, t.jump.Held...)
}

// Mapped reports whether anything is mapped at addr.
func (t *Target) Mapped(addr uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, _, ok := t.region(addr, 1)
	return ok
}

// TIDOffset: the fake's threads keep their id nowhere (the pads would
// ask the kernel).
func (j JumpTarget) TIDOffset(space, tid int) uint64 { return 0 }

func (j JumpTarget) JournalHeld(space int, addr uint64) error {
	j.mu.Lock()
	j.jump.Held = append(j.jump.Held, addr)
	j.mu.Unlock()
	return nil
}

func (j JumpTarget) FSGSBase(space int) bool    { return false }
func (j JumpTarget) ShadowStack(space int) bool { return j.Target.ShadowStack }
func (j JumpTarget) NSIDs(tid int) (int, int)   { return tid, Pid }

func (j JumpTarget) BlockPadSignals(tid int) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	th, err := j.thread(tid)
	if err == nil {
		th.Blocked++
	}
	return err
}

func (j JumpTarget) UnblockPadSignals(tid int) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	th, err := j.thread(tid)
	if err == nil {
		th.Blocked--
	}
	return err
}

func (j JumpTarget) SyscallStops(tid int, on bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.jump.syscalls == nil {
		j.jump.syscalls = map[int]bool{}
	}
	j.jump.syscalls[tid] = on
}

// EndSyscall: the fake's threads make no system calls.
func (j JumpTarget) EndSyscall(tid int) error {
	return fmt.Errorf("fake: thread %d is in no system call", tid)
}

func (j JumpTarget) MapRanges(space int) ([][2]uint64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out [][2]uint64
	for _, r := range j.regions {
		out = append(out, [2]uint64{r.Base, r.Base + uint64(len(r.Data))})
	}
	sort.Slice(out, func(i, k int) bool { return out[i][0] < out[k][0] })
	return out, nil
}

func (j JumpTarget) SharesMemory(a, b int) (bool, error) { return a == b, nil }
