package x86

// A whole file's code, decoded linearly, for what may enter any of it:
// PlanJump sees one function's branches, and the jump it plans must also
// not be entered from anywhere else (another function's tail jump, a
// `.cold` part jumping back, glibc's __mempcpy_*_erms jumping into
// __memmove_*_erms).

// DirectBranch is a direct branch: jmp, jcc, call, loop*, jrcxz, or xbegin's
// abort address.
type DirectBranch struct{ From, To uint64 }

// IndirectJump is an indirect jump that may land anywhere (through a
// register, or through memory with a base or index register), with the
// starts of the instructions decoded just before it, oldest first, where
// a jump table's address is usually loaded.
type IndirectJump struct {
	At     uint64
	Before []uint64
}

// CodeScan is what ScanCode found.
type CodeScan struct {
	Branches []DirectBranch
	Indirect []IndirectJump
	// Decoded is the number of bytes decoded as instructions; Skipped
	// the number that did not decode and were stepped over one at a
	// time.
	Decoded, Skipped int
}

// lookBack is how many instruction starts an IndirectJump keeps.
const lookBack = 8

// ScanCode decodes code (at addr) linearly and returns its direct
// branches and the indirect jumps that may land anywhere. syncs (sorted)
// are addresses known to start code (symbols, unwind-table entries):
// decoding starts again at each, so that data or padding before one does
// not hide the instructions after it. A byte that does not decode is
// skipped; what follows is decoded as usual. Bytes of data that happen to
// decode give branches that are not there: the result errs on the side of
// more branches.
func ScanCode(code []byte, addr uint64, mode int, syncs []uint64) CodeScan {
	var cs CodeScan
	si := 0
	for si < len(syncs) && syncs[si] < addr {
		si++
	}
	var recent [lookBack]uint64
	nrecent := 0
	for pc := 0; pc < len(code); {
		at := addr + uint64(pc)
		for si < len(syncs) && syncs[si] < at {
			si++
		}
		next := uint64(len(code))
		if si < len(syncs) && syncs[si]-addr < next {
			next = syncs[si] - addr
		}
		if si < len(syncs) && syncs[si] == at {
			nrecent = 0 // a new function: nothing before it loads its tables
		}
		l, err := parseLayout(code[pc:], mode)
		if err != nil {
			cs.Skipped++
			pc++
			nrecent = 0
			continue
		}
		end := at + uint64(l.len)
		if mode == 32 {
			end &= 0xffffffff
		}
		ins := code[pc : pc+l.len]
		if rel, ok := relBranch(&l, ins); ok {
			to := end + rel
			if mode == 32 {
				to &= 0xffffffff
			}
			cs.Branches = append(cs.Branches, DirectBranch{From: at, To: to})
		} else if mayLandAnywhere(&l, ins, at, mode) {
			n := min(nrecent, lookBack)
			before := make([]uint64, 0, n)
			for i := nrecent - n; i < nrecent; i++ {
				before = append(before, recent[i%lookBack])
			}
			cs.Indirect = append(cs.Indirect, IndirectJump{At: at, Before: before})
		}
		recent[nrecent%lookBack] = at
		nrecent++
		cs.Decoded += l.len
		if uint64(pc+l.len) > next && uint64(pc) < next {
			// the instruction runs over a known start: it was padding or
			// data, and the code there starts afresh
			cs.Decoded -= l.len
			cs.Skipped += int(next) - pc
			pc = int(next)
			nrecent = 0
			continue
		}
		pc += l.len
	}
	return cs
}
