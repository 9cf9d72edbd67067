package linuxkernel

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/rpn"
)

// Guest kernel stacks (log kstack, autostacktrace) are unwound with the
// ORC tables of the kernel image: x86_64 kernels built with
// CONFIG_UNWINDER_ORC (Debian's, the labs') keep no frame pointers, and
// the kernel's own unwinder walks its stacks with two tables objtool
// writes into vmlinux:
//
//   - .orc_unwind_ip: one int32 per entry, the address of the first
//     instruction the entry covers, relative to the int32's own address;
//     sorted at build time (sorted here again when not);
//   - .orc_unwind: one 6-byte struct orc_entry per ip: s16 sp_offset,
//     s16 bp_offset, then a u16 of bit fields, sp_reg:4 and bp_reg:4,
//     then, up to Linux 6.3, type:2 (CALL, REGS, REGS_PARTIAL) and end:1
//     (sp_reg UNDEFINED with end set is the end of a stack, without it no
//     information); from 6.4, type:3 (UNDEFINED, END_OF_STACK, CALL,
//     REGS, REGS_PARTIAL) and signal:1 (the next frame's address is
//     where code was, not a return address).
//
// An entry says how to find the caller's stack pointer (the CFA): sp_reg
// (SP, BP, the word at SP or BP, or a register saved in the pt_regs of an
// interrupted frame) plus sp_offset; then by type: CALL, the return
// address is the word below the CFA; REGS, the CFA is a struct pt_regs
// (an interrupt, an exception, a system call's entry) whose ip and sp are
// the interrupted code's; REGS_PARTIAL, the CFA is the hardware's iret
// frame (ip, cs, flags, sp, ss). bp_reg (UNDEFINED, PREV_SP, BP) and
// bp_offset say where the caller's rbp was saved.

// ORC register numbers (sp_reg, bp_reg).
const (
	orcRegUndefined  = 0
	orcRegPrevSP     = 1
	orcRegDX         = 2
	orcRegDI         = 3
	orcRegBP         = 4
	orcRegSP         = 5
	orcRegR10        = 6
	orcRegR13        = 7
	orcRegBPIndirect = 8
	orcRegSPIndirect = 9
)

// orcType is an entry's type, the same for both layouts.
type orcType uint8

const (
	orcUndefined orcType = iota // no information: the walk stops
	orcEnd                      // the end of the stack (a thread's first frame, an entry point)
	orcCall
	orcRegs
	orcRegsPartial
)

// orcEntrySize is sizeof(struct orc_entry).
const orcEntrySize = 6

// orcEntry is one decoded struct orc_entry.
type orcEntry struct {
	spOff, bpOff int16
	spReg, bpReg uint8
	typ          orcType
	signal       bool // the next frame's ip is looked up as it is (6.4 and later)
}

// decodeORC decodes one struct orc_entry; layout64 is the layout of Linux
// 6.4 and later (type:3, signal:1), else type:2, end:1.
func decodeORC(b []byte, layout64 bool) orcEntry {
	e := orcEntry{spOff: int16(binary.LittleEndian.Uint16(b)), bpOff: int16(binary.LittleEndian.Uint16(b[2:]))}
	bits := binary.LittleEndian.Uint16(b[4:])
	e.spReg, e.bpReg = uint8(bits&0xf), uint8(bits>>4&0xf)
	if layout64 {
		e.typ = orcType(bits >> 8 & 7)
		e.signal = bits>>11&1 != 0
		if e.typ > orcRegsPartial {
			e.typ = orcUndefined
		}
		return e
	}
	end := bits>>10&1 != 0
	switch {
	case e.spReg == orcRegUndefined && end:
		e.typ = orcEnd
	case e.spReg == orcRegUndefined:
		e.typ = orcUndefined
	default:
		switch bits >> 8 & 3 {
		case 0:
			e.typ = orcCall
		case 1:
			e.typ = orcRegs
		case 2:
			e.typ = orcRegsPartial
		default:
			e.typ = orcUndefined
		}
	}
	return e
}

// orcTable is the ORC of the kernel image, at link-time addresses.
type orcTable struct {
	ips      []uint64 // sorted
	ents     []orcEntry
	lo, hi   uint64 // the code covered: [lo, hi)
	layout64 bool
}

// newORCTable decodes the two sections: ipSec is .orc_unwind_ip, at
// link-time address ipAddr, entSec .orc_unwind; textEnd is the end of
// the image's text (_etext; 0 for the last ip), past which no address is
// looked up (a module's code, a trampoline's).
func newORCTable(ipSec []byte, ipAddr uint64, entSec []byte, layout64 bool, textEnd uint64) (*orcTable, error) {
	n := len(ipSec) / 4
	if n == 0 || len(ipSec)%4 != 0 || len(entSec) != n*orcEntrySize {
		return nil, fmt.Errorf("the ORC tables do not match: .orc_unwind_ip has %d bytes (%d entries), .orc_unwind %d (%d bytes an entry)", len(ipSec), n, len(entSec), orcEntrySize)
	}
	t := &orcTable{ips: make([]uint64, n), ents: make([]orcEntry, n), layout64: layout64}
	sorted := true
	for i := range n {
		rel := int64(int32(binary.LittleEndian.Uint32(ipSec[4*i:])))
		t.ips[i] = ipAddr + uint64(4*i) + uint64(rel)
		t.ents[i] = decodeORC(entSec[orcEntrySize*i:], layout64)
		if i > 0 && t.ips[i] < t.ips[i-1] {
			sorted = false
		}
	}
	if !sorted {
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(a, b int) bool { return t.ips[idx[a]] < t.ips[idx[b]] })
		ips, ents := make([]uint64, n), make([]orcEntry, n)
		for i, j := range idx {
			ips[i], ents[i] = t.ips[j], t.ents[j]
		}
		t.ips, t.ents = ips, ents
	}
	t.lo, t.hi = t.ips[0], t.ips[n-1]+1
	if textEnd > t.lo {
		t.hi = max(t.hi, textEnd)
	}
	return t, nil
}

// find is the entry covering link-time address ip, or nil when ip is not
// in the image's code.
func (t *orcTable) find(ip uint64) *orcEntry {
	if ip < t.lo || ip >= t.hi {
		return nil
	}
	i := sort.Search(len(t.ips), func(i int) bool { return t.ips[i] > ip }) - 1
	if i < 0 {
		return nil
	}
	return &t.ents[i]
}

// Offsets in struct pt_regs (x86_64; the layout the entry code pushes,
// the same in every kernel), and in the iret frame.
const (
	ptR13   = 16
	ptBP    = 32
	ptR10   = 56
	ptDX    = 96
	ptDI    = 112
	ptIP    = 128
	ptCS    = 136
	ptSP    = 152
	ptIret  = ptIP // IRET_FRAME_OFFSET: where the hardware's frame starts
	iretCS  = ptCS - ptIret
	iretSP  = ptSP - ptIret
	wordLen = 8
)

// orcWalk walks a kernel stack from the registers of a hit: find is the
// ORC entry covering a running address (nil: none), layout64 the layout
// the kernel's entries have. read reads 8 bytes of guest memory. It writes the frames' addresses into pcs
// (innermost first: regs' rip, then return addresses, or where an
// interrupt or exception found the code) and returns how many, and the
// frames whose address is where code was (bit i).
//
// It stops at the end of the stack, at an address without ORC (code in
// no table, a trampoline's: that frame is recorded, the walk can go no
// further), at a pt_regs saved from user mode (the user's frames are
// not the kernel stack's), at memory it cannot read, at a stack pointer
// that does not go up within a stack, or after len(pcs) frames.
func orcWalk(find func(ip uint64) *orcEntry, layout64 bool, regs *engine.Regs, read func(addr uint64) (uint64, bool), pcs []uint64) (int, uint64) {
	if len(pcs) == 0 {
		return 0, 0
	}
	type state struct {
		ip, sp, bp uint64
		live       bool   // the hit's registers (the first frame)
		regs       uint64 // a pt_regs in memory (0: none)
		full       bool   // regs is a whole pt_regs, not only an iret frame
		signal     bool   // ip is where code was: looked up as it is
	}
	st := state{ip: regs[rpn.RegRIP], sp: regs[rpn.RegRSP], bp: regs[rpn.RegRBP], live: true, signal: true}
	pcs[0] = st.ip
	n, exact := 1, uint64(1)
	// reg is a register of the frame being left, where it is known
	reg := func(liveReg rpn.Reg, off uint64) (uint64, bool) {
		switch {
		case st.live:
			return regs[liveReg], true
		case st.regs != 0 && st.full:
			return read(st.regs + off)
		}
		return 0, false
	}
	for n < len(pcs) {
		look := st.ip
		if !st.signal {
			look-- // a return address: the call is before it (a call to a noreturn function may end its function)
		}
		e := find(look)
		if e == nil || e.typ == orcUndefined || e.typ == orcEnd {
			break
		}
		var sp uint64
		ok := true
		switch e.spReg {
		case orcRegSP:
			sp = st.sp + uint64(int64(e.spOff))
		case orcRegBP:
			sp = st.bp + uint64(int64(e.spOff))
		case orcRegSPIndirect:
			if layout64 {
				sp, ok = read(st.sp + uint64(int64(e.spOff)))
			} else if sp, ok = read(st.sp); ok {
				sp += uint64(int64(e.spOff))
			}
		case orcRegBPIndirect:
			sp, ok = read(st.bp + uint64(int64(e.spOff)))
		case orcRegR10:
			sp, ok = reg(rpn.RegR10, ptR10)
		case orcRegR13:
			sp, ok = reg(rpn.RegR13, ptR13)
		case orcRegDI:
			sp, ok = reg(rpn.RegRDI, ptDI)
		case orcRegDX:
			sp, ok = reg(rpn.RegRDX, ptDX)
		default:
			ok = false
		}
		if !ok {
			break
		}
		next := state{bp: st.bp}
		var cs uint64
		switch e.typ {
		case orcCall:
			next.ip, ok = read(sp - wordLen)
			next.sp, next.signal = sp, e.signal
		case orcRegs:
			next.regs, next.full, next.signal = sp, true, true
			next.ip, ok = read(sp + ptIP)
			if ok {
				next.sp, ok = read(sp + ptSP)
			}
			if ok {
				cs, ok = read(sp + ptCS)
			}
		case orcRegsPartial:
			next.regs, next.signal = sp-ptIret, true
			next.ip, ok = read(sp)
			if ok {
				next.sp, ok = read(sp + iretSP)
			}
			if ok {
				cs, ok = read(sp + iretCS)
			}
		}
		if !ok {
			break
		}
		if e.typ != orcCall && cs&3 == 3 {
			break // saved from user mode: the kernel stack ends here
		}
		switch e.bpReg {
		case orcRegUndefined:
			if e.typ == orcRegs {
				if bp, ok := read(sp + ptBP); ok {
					next.bp = bp
				}
			}
		case orcRegPrevSP:
			next.bp, ok = read(sp + uint64(int64(e.bpOff)))
		case orcRegBP:
			next.bp, ok = read(st.bp + uint64(int64(e.bpOff)))
		default:
			ok = false
		}
		if !ok || next.ip == 0 {
			break
		}
		// a stack pointer that does not go up on the same stack is bad
		// data (or a loop); a pt_regs or an indirect CFA may switch stacks
		if e.typ == orcCall && e.spReg != orcRegSPIndirect && e.spReg != orcRegBPIndirect && next.sp <= st.sp {
			break
		}
		pcs[n] = next.ip
		if next.signal {
			exact |= 1 << n
		}
		n++
		st = next
	}
	return n, exact
}
