package ptrace

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// growthReserves returns where a process's heap and main stack may grow:
// [brk, brk+1 GiB) above the heap (the [heap] mapping's end, or the
// start of the break from /proc/PID/stat when there is no heap yet), and
// below the [stack] mapping as much as its stack limit allows (at least
// 128 MiB, as the kernel keeps below the stack for it; 1 GiB when the
// limit is unlimited).
func growthReserves(pid int, maps []Mapping) []span {
	var out []span
	heap := false
	for _, m := range maps {
		switch m.Path {
		case "[heap]":
			out = append(out, span{m.End, m.End + heapRoom})
			heap = true
		case "[stack]":
			room := stackLimit(pid)
			if m.Start > room {
				out = append(out, span{m.Start - room, m.Start})
			} else {
				out = append(out, span{0, m.Start})
			}
		}
	}
	if !heap {
		if brk := startBrk(pid); brk != 0 {
			out = append(out, span{brk, brk + heapRoom})
		}
	}
	return out
}

// stackLimit is the room kept below the main stack: its soft limit,
// within [128 MiB, 1 GiB].
func stackLimit(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return maxStackRoom
	}
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "Max stack size") {
			continue
		}
		f := strings.Fields(strings.TrimPrefix(l, "Max stack size"))
		if len(f) == 0 || f[0] == "unlimited" {
			return maxStackRoom
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return maxStackRoom
		}
		return min(max(n, minStackRoom), maxStackRoom)
	}
	return maxStackRoom
}

// startBrk reads where the process's break starts (field 47 of
// /proc/PID/stat), 0 when unknown.
func startBrk(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command may hold spaces
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): field 47 is f[44]
	if len(f) < 45 {
		return 0
	}
	n, _ := strconv.ParseUint(f[44], 10, 64)
	return n
}

// Finding room for gprobes' areas in a process: a free gap of its
// address space within reach of the code (a 5-byte jump or a RIP-relative
// operand reaches ±2 GiB), chosen from /proc/PID/maps, away from where
// the process's own memory grows: above the heap (brk) and below the main
// thread's stack, which the kernel extends into free space. An area there
// would make the program's brk fail, or its stack overflow early, where
// it would not have.

// reach is how far an area may be from the code it serves: 2 GiB less a
// margin, both of its ends.
const reach = 1<<31 - 1<<20

// userTop is the end of the user address space with 4-level paging (a
// mapping above it is never given without asking).
const userTop = 0x7ffffffff000

// minAddr is the lowest address an area is put at: vm.mmap_min_addr's
// usual 64 KiB, with room.
const minAddr = 1 << 20

// guardGap keeps an area a page away from its neighbours.
const guardGap = 4096

type span struct{ lo, hi uint64 }

// freeNear returns a page-aligned address for size bytes in a gap of
// maps, clear of the reserved spans, as close to near as there is, with
// the whole area within reach of near.
func freeNear(maps []Mapping, near, size uint64, reserved []span) (uint64, bool) {
	size = (size + 4095) &^ 4095
	var lo, hi uint64 = minAddr, userTop
	if near > reach && near-reach > lo {
		lo = near - reach
	}
	if near+reach < hi {
		hi = near + reach
	}
	if hi <= lo || hi-lo < size {
		return 0, false
	}
	busy := make([]span, 0, len(maps)+len(reserved))
	for _, m := range maps {
		s := span{m.Start, m.End}
		if s.lo >= guardGap {
			s.lo -= guardGap
		}
		s.hi += guardGap
		busy = append(busy, s)
	}
	busy = append(busy, reserved...)
	sort.Slice(busy, func(i, j int) bool { return busy[i].lo < busy[j].lo })
	best, found := uint64(0), false
	dist := func(a uint64) uint64 {
		if a > near {
			return a - near
		}
		return near - a
	}
	consider := func(f0, f1 uint64) {
		// the free span [f0, f1) clipped to the window
		f0 = max(f0, lo)
		f1 = min(f1, hi)
		f0 = (f0 + 4095) &^ 4095
		f1 &^= 4095
		if f1 <= f0 || f1-f0 < size {
			return
		}
		var at uint64
		switch {
		case near+size <= f1 && near >= f0:
			at = near &^ 4095
		case f1 <= near:
			at = f1 - size // the top of a gap below the code
		default:
			at = f0 // the bottom of a gap above it
		}
		if at < lo || at+size > hi {
			return
		}
		if !found || dist(at) < dist(best) {
			best, found = at, true
		}
	}
	cur := uint64(0)
	for _, b := range busy {
		if b.lo > cur {
			consider(cur, b.lo)
		}
		if b.hi > cur {
			cur = b.hi
		}
	}
	consider(cur, userTop)
	return best, found
}

// Room left for the heap and the main stack to grow.
const (
	heapRoom     = 1 << 30
	minStackRoom = 128 << 20
	maxStackRoom = 1 << 30
)
