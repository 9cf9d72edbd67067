package engine

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/gprobes/gprobes/rpn"
)

// Where a stopped thread may go back to: its pc, and the pcs saved on its
// stacks. A thread inside a signal handler resumes, when the handler
// returns, at the pc the kernel saved in the signal frame on its stack
// (or on its alternate signal stack); a thread parked in a handler (the
// safepoints of Boehm's, Mono's and the JVMs' garbage collectors) can sit
// there for as long as it likes. So a jump may not go over bytes a saved
// pc points into, and code gprobes mapped may not be unmapped while a pc
// points into it.
//
// The check reads every 8-byte word from each thread's stack pointer to
// the end of the mapping that holds it, and of every stack a signal frame
// found there says the thread was on before (a handler on the alternate
// stack that interrupted code on the main stack). A word that points into
// a range is reported, whatever it is: a signal frame's saved pc is one
// of them, return addresses into covered bytes cannot exist (PlanJump
// refuses a call in the middle of them), and a data word that happens to
// hold such an address only costs a jump that could have gone in. A
// frame is recognised by its restorer (pretcode: `mov $15,%rax; syscall`,
// rt_sigreturn, as glibc's, musl's and Go's are) and its saved cs.

// maxStackScan bounds the bytes read from one stack: a thread whose
// stack pointer sits far below the end of its mapping (a coroutine stack
// inside a large heap mapping) cannot be checked, and the answer is no.
const maxStackScan = 64 << 20

// rt_sigframe on x86-64 (arch/x86/include/asm/sigframe.h): pretcode,
// then the ucontext, whose sigcontext starts at 40.
const (
	sfSP      = 8 + 40 + 120 // saved rsp
	sfIP      = 8 + 40 + 128 // saved rip
	sfCS      = 8 + 40 + 144 // saved cs (16 bits)
	sfSS      = 8 + 40 + 150 // saved ss (16 bits; 0 before Linux 4.6)
	sfFP      = 8 + 40 + 184 // fpstate pointer
	sfMin     = 8 + 40 + 256 // through the sigcontext
	userCS64  = 0x33
	userSS    = 0x2b
	sigreturn = "\x48\xc7\xc0\x0f\x00\x00\x00\x0f\x05" // mov $15,%rax; syscall
	sigret32  = "\xb8\x0f\x00\x00\x00\x0f\x05"         // mov $15,%eax; syscall
)

// What stackScan reports.
const (
	refPC    = iota // a thread's pc
	refFrame        // a signal frame's saved pc
	refWord         // any word of a stack
)

// stackScan calls visit with every stopped thread's pc, the saved pc of
// every signal frame on its stacks, and (words) every 8-byte word of
// them, until visit returns false. Each thread's stack is read from rsp
// to the end of its mapping, and so is every stack a signal frame found
// there says the thread was on before. It returns why it could not read
// a stack, or "".
func (e *Engine) stackScan(sp *space, host JumpHost, words bool, visit func(tid, kind int, at, v uint64) bool) string {
	maps, err := host.MapRanges(sp.id)
	if err != nil {
		return fmt.Sprintf("the mappings cannot be read to look for signal frames: %v", err)
	}
	mapping := func(a uint64) (uint64, uint64, bool) {
		i := sort.Search(len(maps), func(i int) bool { return maps[i][1] > a })
		if i < len(maps) && maps[i][0] <= a {
			return maps[i][0], maps[i][1], true
		}
		return 0, 0, false
	}
	restorer := map[uint64]bool{}
	isRestorer := func(a uint64) bool {
		ok, seen := restorer[a]
		if !seen {
			var b [len(sigreturn)]byte
			ok = e.tgt.ReadMem(sp.id, a, b[:]) == nil && (string(b[:]) == sigreturn || string(b[:len(sigret32)]) == sigret32)
			restorer[a] = ok
		}
		return ok
	}
	for _, tid := range e.tgt.Threads(sp.id) {
		var r Regs
		if err := e.tgt.GetRegs(tid, &r); err != nil {
			continue // gone
		}
		if !visit(tid, refPC, 0, r[rpn.RegRIP]) {
			return ""
		}
		// the stacks to read: from rsp up, then where signal frames say
		// the thread was
		scanned := map[uint64]uint64{} // mapping end -> lowest address read
		todo := []uint64{r[rpn.RegRSP]}
		for len(todo) > 0 {
			at := todo[0] &^ 7
			todo = todo[1:]
			_, hi, ok := mapping(at)
			if !ok {
				if at == r[rpn.RegRSP]&^7 {
					return fmt.Sprintf("thread %d's stack pointer %#x is in no mapping: its stack cannot be checked for signal frames", tid, at)
				}
				continue // a frame's saved rsp that is not a stack
			}
			end := hi
			if low, ok := scanned[hi]; ok {
				if at >= low {
					continue
				}
				end = low
			}
			if end-at > maxStackScan {
				return fmt.Sprintf("thread %d's stack at %#x is more than %d MiB below the end of its mapping: it cannot be checked for signal frames", tid, at, maxStackScan>>20)
			}
			scanned[hi] = at
			buf := make([]byte, end-at)
			if err := e.tgt.ReadMem(sp.id, at, buf); err != nil {
				return fmt.Sprintf("thread %d's stack cannot be read to look for signal frames: %v", tid, err)
			}
			for off := 0; off+8 <= len(buf); off += 8 {
				w := binary.LittleEndian.Uint64(buf[off:])
				if words && !visit(tid, refWord, at+uint64(off), w) {
					return ""
				}
				if frameAt(buf, off, at) && isRestorer(w) {
					if !visit(tid, refFrame, at+uint64(off), binary.LittleEndian.Uint64(buf[off+sfIP:])) {
						return ""
					}
					todo = append(todo, binary.LittleEndian.Uint64(buf[off+sfSP:]))
				}
			}
		}
	}
	return ""
}

// frameAt reports whether buf[off:] (at addr+off) looks like an
// rt_sigframe: the saved cs and ss of 64-bit user code and an fpstate
// pointer that is nil or just above the frame (the restorer is checked by
// the caller).
func frameAt(buf []byte, off int, addr uint64) bool {
	if off < 0 || off+sfMin > len(buf) || binary.LittleEndian.Uint16(buf[off+sfCS:]) != userCS64 {
		return false
	}
	if ss := binary.LittleEndian.Uint16(buf[off+sfSS:]); ss != userSS && ss != 0 {
		return false
	}
	f := addr + uint64(off)
	fp := binary.LittleEndian.Uint64(buf[off+sfFP:])
	return fp == 0 || fp > f && fp-f < 64<<10
}

// mayReturnInto says which thread of a space (every one stopped) may go
// back into one of the ranges ([lo, hi) each): its pc is there, a signal
// frame's saved pc is, or (words) any word on one of its stacks points
// there; "" when none may. A stack it cannot read fully is an answer too:
// it cannot tell, and says why.
func (e *Engine) mayReturnInto(sp *space, host JumpHost, ranges [][2]uint64, what string, words bool) string {
	in := func(a uint64) bool {
		for _, r := range ranges {
			if a >= r[0] && a < r[1] {
				return true
			}
		}
		return false
	}
	why := ""
	if err := e.stackScan(sp, host, words, func(tid, kind int, at, v uint64) bool {
		if !in(v) {
			return true
		}
		switch kind {
		case refPC:
			why = fmt.Sprintf("thread %d is inside %s (at %#x)", tid, what, v)
		case refFrame:
			why = fmt.Sprintf("thread %d is in a signal handler that returns to %#x, inside %s (its signal frame at %#x)", tid, v, what, at)
		default:
			why = fmt.Sprintf("a word on thread %d's stack (at %#x) points inside %s (%#x): a signal frame's saved pc, or data", tid, at, what, v)
		}
		return false
	}); err != "" {
		return err
	}
	return why
}
