package linuxkernel

import (
	"encoding/binary"
	"testing"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/rpn"
)

// A synthetic kernel: link-time code addresses, the slide they run at,
// and the ORC entries objtool would write for them.
const (
	tText  = 0xffffffff81000000
	tSlide = 0x2e00000
	tF0    = tText + 0x1000 // a leaf, probed at its first byte
	tF1    = tText + 0x2000 // push rbp; sub rsp,0x10; ...; call F0 at +0x20
	tF2    = tText + 0x3000 // a frame-pointer function: call F1 at +0x40
	tEntry = tText + 0x4000 // an entry stub: a pt_regs at sp; call F2 at +0x60
	tF3    = tText + 0x5000 // interrupted at +7, one word pushed
	tEnd   = tText + 0x6000 // a thread's first frame: the end of its stack
	tStop  = tText + 0x7000 // the table's terminator: no information
	tStack = 0xffffc90000a1c000
	tMod   = 0xffffffffc0201234 // a module's code: no ORC
)

// tORC is the table, as (ip, entry) pairs in address order.
var tORC = []struct {
	ip uint64
	e  orcEntry
}{
	{tF0, orcEntry{spReg: orcRegSP, spOff: 8, typ: orcCall}},
	{tF1, orcEntry{spReg: orcRegSP, spOff: 8, typ: orcCall}},
	{tF1 + 0x10, orcEntry{spReg: orcRegSP, spOff: 32, bpReg: orcRegPrevSP, bpOff: -16, typ: orcCall}},
	{tF2, orcEntry{spReg: orcRegSP, spOff: 8, typ: orcCall}},
	{tF2 + 0x8, orcEntry{spReg: orcRegBP, spOff: 16, bpReg: orcRegPrevSP, bpOff: -16, typ: orcCall}},
	{tEntry, orcEntry{spReg: orcRegSP, spOff: 0, typ: orcRegs}},
	{tF3, orcEntry{spReg: orcRegSP, spOff: 8, typ: orcCall}},
	{tF3 + 4, orcEntry{spReg: orcRegSP, spOff: 16, typ: orcCall}},
	{tEnd, orcEntry{typ: orcEnd}},
	{tStop, orcEntry{typ: orcUndefined}},
}

// encodeORC writes an entry as objtool does, in either layout.
func encodeORC(e orcEntry, layout64 bool) []byte {
	b := make([]byte, orcEntrySize)
	binary.LittleEndian.PutUint16(b, uint16(e.spOff))
	binary.LittleEndian.PutUint16(b[2:], uint16(e.bpOff))
	bits := uint16(e.spReg) | uint16(e.bpReg)<<4
	if layout64 {
		bits |= uint16(e.typ) << 8
		if e.signal {
			bits |= 1 << 11
		}
	} else {
		switch e.typ {
		case orcEnd:
			bits = 1 << 10 // sp_reg undefined, end
		case orcUndefined:
			bits = 0
		case orcCall:
		case orcRegs:
			bits |= 1 << 8
		case orcRegsPartial:
			bits |= 2 << 8
		}
	}
	binary.LittleEndian.PutUint16(b[4:], bits)
	return b
}

// orcSections lays the table out as the two sections of a vmlinux, the
// ip section at ipAddr; shuffled swaps two entries (a table not sorted).
func orcSections(layout64, shuffled bool, ipAddr uint64) (ips, ents []byte) {
	order := make([]int, len(tORC))
	for i := range order {
		order[i] = i
	}
	if shuffled {
		order[1], order[4] = order[4], order[1]
	}
	for i, j := range order {
		var w [4]byte
		binary.LittleEndian.PutUint32(w[:], uint32(int32(int64(tORC[j].ip)-int64(ipAddr+uint64(4*i)))))
		ips = append(ips, w[:]...)
		ents = append(ents, encodeORC(tORC[j].e, layout64)...)
	}
	return ips, ents
}

type wordMem map[uint64]uint64

func (m wordMem) read(a uint64) (uint64, bool) {
	v, ok := m[a]
	return v, ok
}

// The walk of a system call's stack: the probed leaf, a return address
// found from SP, one from BP (the bp the frame below restored), the
// entry stub, and there a pt_regs saved from user mode ends the kernel
// stack. With the pt_regs of an interrupt of kernel code, the walk goes
// on into the interrupted function (its address exact, looked up as it
// is) and stops at a return address into a module (recorded: no ORC
// there). Both layouts of struct orc_entry, sorted or not, decode alike.
func TestORCWalk(t *testing.T) {
	const s = tStack + 0x800
	const b2 = s + 0x100 // F2's rbp
	const regs = b2 + 0x10
	for _, layout64 := range []bool{false, true} {
		for _, shuffled := range []bool{false, true} {
			ips, ents := orcSections(layout64, shuffled, 0xffffffff82c5f474)
			tab, err := newORCTable(ips, 0xffffffff82c5f474, ents, layout64, tText+0x8000)
			if err != nil {
				t.Fatal(err)
			}
			mem := wordMem{
				s:      tF1 + 0x25 + tSlide, // F0's return address, at its sp on entry
				s + 24: b2,                  // F1 saved F2's rbp at CFA-16 (CFA s+40)
				s + 32: tF2 + 0x45 + tSlide, // F1's return address
				b2:     0,                   // F2's caller's rbp
				b2 + 8: tEntry + 0x65 + tSlide,
				// the pt_regs at F2's CFA (b2+16)
				regs + ptIP: 0x7f0000001234, regs + ptCS: 0x33, regs + ptSP: 0x7ffd00000000, regs + ptBP: 0x7ffd00000100,
			}
			var r engine.Regs
			r[rpn.RegRIP], r[rpn.RegRSP], r[rpn.RegRBP], r[rpn.RegCS] = tF0+tSlide, s, 0xdead, 0x10
			pcs := make([]uint64, 16)
			n, exact := orcWalk(func(ip uint64) *orcEntry { return tab.find(ip - tSlide) }, layout64, &r, mem.read, pcs)
			want := []uint64{tF0, tF1 + 0x25, tF2 + 0x45, tEntry + 0x65}
			check := func(what string, n int, exact uint64, want []uint64, wantExact uint64) {
				t.Helper()
				got := pcs[:n]
				ok := len(got) == len(want) && exact == wantExact
				for i := range want {
					ok = ok && i < len(got) && got[i] == want[i]+tSlide
				}
				if !ok {
					t.Errorf("layout64 %v shuffled %v, %s: frames %#x exact %b; want %#x (+%#x) exact %b", layout64, shuffled, what, got, exact, want, tSlide, wantExact)
				}
			}
			check("from user mode", n, exact, want, 1)

			// the entry was an interrupt of kernel code in F3, whose
			// caller is a module
			const s3 = tStack + 0x400
			mem[regs+ptCS], mem[regs+ptIP], mem[regs+ptSP] = 0x10, tF3+7+tSlide, s3
			mem[s3+8] = tMod
			n, exact = orcWalk(func(ip uint64) *orcEntry { return tab.find(ip - tSlide) }, layout64, &r, mem.read, pcs)
			check("interrupt", n, exact, append(want, tF3+7, tMod-tSlide), 1|1<<4)

			// at most len(pcs) frames
			n, exact = orcWalk(func(ip uint64) *orcEntry { return tab.find(ip - tSlide) }, layout64, &r, mem.read, pcs[:2])
			check("two frames", n, exact, want[:2], 1)

			// the end of a thread's stack, and a return address into code
			// the table has no information for, end the walk there
			mem[s3+8] = tEnd + 0x10 + tSlide
			n, exact = orcWalk(func(ip uint64) *orcEntry { return tab.find(ip - tSlide) }, layout64, &r, mem.read, pcs)
			check("end of stack", n, exact, append(want, tF3+7, tEnd+0x10), 1|1<<4)
			mem[s3+8] = tStop + 0x10 + tSlide
			n, exact = orcWalk(func(ip uint64) *orcEntry { return tab.find(ip - tSlide) }, layout64, &r, mem.read, pcs)
			check("no information", n, exact, append(want, tF3+7, tStop+0x10), 1|1<<4)

			// a stack pointer going down (bad data, a loop) stops the
			// walk: F1 says F2's rbp was below F1's stack
			const low = s - 0x100
			mem[s+24], mem[low], mem[low+8] = low, 0, tEntry+0x65+tSlide
			n, exact = orcWalk(func(ip uint64) *orcEntry { return tab.find(ip - tSlide) }, layout64, &r, mem.read, pcs)
			check("stack going down", n, exact, want[:3], 1)
			mem[s+24] = b2

			// memory that cannot be read ends it
			delete(mem, b2+8)
			n, exact = orcWalk(func(ip uint64) *orcEntry { return tab.find(ip - tSlide) }, layout64, &r, mem.read, pcs)
			check("unreadable", n, exact, want[:3], 1)
		}
	}
}

// The bits of struct orc_entry as Linux 6.1 and 6.4 lay them out, each
// read back as written.
func TestORCDecode(t *testing.T) {
	for _, layout64 := range []bool{false, true} {
		for _, x := range tORC {
			e := x.e
			if got := decodeORC(encodeORC(e, layout64), layout64); got != e {
				t.Errorf("layout64 %v: %+v decodes as %+v", layout64, e, got)
			}
		}
	}
	// Linux 6.1: {sp_offset 8, bp_offset 0, sp_reg SP, bp_reg UNDEFINED,
	// type CALL, end 0} is 08 00 00 00 05 00; an interrupt's REGS at sp
	// 05 01; the end of a stack 00 04
	old := map[[6]byte]orcEntry{
		{8, 0, 0, 0, 5, 0}:        {spOff: 8, spReg: orcRegSP, typ: orcCall},
		{0, 0, 0, 0, 5, 1}:        {spReg: orcRegSP, typ: orcRegs},
		{0, 0, 0, 0, 0, 4}:        {typ: orcEnd},
		{16, 0, 0xf0, 0xff, 4, 0}: {spOff: 16, bpOff: -16, spReg: orcRegBP, typ: orcCall},
	}
	for b, want := range old {
		if got := decodeORC(b[:], false); got != want {
			t.Errorf("6.1 % x: %+v, want %+v", b, got, want)
		}
	}
	// Linux 6.4: type CALL is 2, END_OF_STACK 1, signal bit 11
	if got := decodeORC([]byte{8, 0, 0, 0, 5, 2 | 8}, true); got != (orcEntry{spOff: 8, spReg: orcRegSP, typ: orcCall, signal: true}) {
		t.Errorf("6.4 call with signal: %+v", got)
	}
	if got := decodeORC([]byte{0, 0, 0, 0, 0, 1}, true); got.typ != orcEnd {
		t.Errorf("6.4 end of stack: %+v", got)
	}
}
