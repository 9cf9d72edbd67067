package xen

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Paging is the paging mode of a vCPU, from its control registers.
type Paging uint8

const (
	// Paging2 is 32-bit paging: 2 levels of 4-byte entries, 4 MiB pages
	// with CR4.PSE (PSE-36 puts physical bits 32-39 in bits 13-20).
	Paging2 Paging = iota + 1
	// PagingPAE is 32-bit PAE paging: a 4-entry PDPT, then 2 levels of
	// 8-byte entries, 2 MiB pages.
	PagingPAE
	// Paging4 is 4-level x86_64 paging: 1 GiB and 2 MiB pages.
	Paging4
	// Paging5 is 5-level x86_64 paging (CR4.LA57).
	Paging5
)

func (p Paging) String() string {
	switch p {
	case Paging2:
		return "2-level"
	case PagingPAE:
		return "PAE"
	case Paging4:
		return "4-level"
	case Paging5:
		return "5-level"
	}
	return fmt.Sprintf("paging(%d)", uint8(p))
}

// Control register bits that choose the mode.
const (
	cr4PSE  = 1 << 4
	cr4PAE  = 1 << 5
	cr4LA57 = 1 << 12
)

// PagingOf is the mode of a vCPU with these CR4 and address width (64 for
// a 64-bit guest, whose EFER.LMA is set; 32 otherwise).
func PagingOf(cr4 uint64, width int) Paging {
	switch {
	case width == 64 && cr4&cr4LA57 != 0:
		return Paging5
	case width == 64:
		return Paging4
	case cr4&cr4PAE != 0:
		return PagingPAE
	}
	return Paging2
}

// PhysReader reads the guest's physical memory — for a PV guest, machine
// memory: its page tables hold machine frame numbers.
type PhysReader interface {
	ReadPhys(addr uint64, p []byte) error
}

// Translation is where a virtual address lives.
type Translation struct {
	Phys     uint64 // the physical (machine) address
	PageSize uint64 // 4 KiB, 2 MiB, 4 MiB or 1 GiB
	Writable bool   // every level allows writes
	User     bool   // every level allows user access
}

// NotMappedError is a virtual address with a non-present entry on its way.
type NotMappedError struct {
	VA    uint64
	Level int // 1 = the page table, up to 5; 0 = not canonical
}

func (e *NotMappedError) Error() string {
	if e.Level == 0 {
		return fmt.Sprintf("%#x is not a canonical address", e.VA)
	}
	return fmt.Sprintf("%#x is not mapped (no present entry at level %d)", e.VA, e.Level)
}

// Trace, when set, sees every entry a walk reads (debugging).
var Trace func(format string, args ...any)

func trace(format string, args ...any) {
	if Trace != nil {
		Trace(format, args...)
	}
}

// ErrBadPaging is a paging mode the walker does not know.
var ErrBadPaging = errors.New("xen: unknown paging mode")

// Entry bits.
const (
	ptePresent = 1 << 0
	pteWrite   = 1 << 1
	pteUser    = 1 << 2
	ptePS      = 1 << 7
	// bits 12-51 of a 64-bit entry: the frame
	pteAddr64 = 0x000f_ffff_ffff_f000
)

// Translate walks the page tables rooted at cr3 for va, in mode m, with
// CR4 (for PSE in 2-level mode).
func Translate(mem PhysReader, m Paging, cr3, cr4, va uint64) (Translation, error) {
	switch m {
	case Paging4, Paging5:
		return walk64(mem, m, cr3, va)
	case PagingPAE:
		return walkPAE(mem, cr3, va)
	case Paging2:
		return walk2(mem, cr3, cr4, va)
	}
	return Translation{}, ErrBadPaging
}

func read64(mem PhysReader, addr uint64) (uint64, error) {
	var b [8]byte
	if err := mem.ReadPhys(addr, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

func read32(mem PhysReader, addr uint64) (uint32, error) {
	var b [4]byte
	if err := mem.ReadPhys(addr, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b[:]), nil
}

func walk64(mem PhysReader, m Paging, cr3, va uint64) (Translation, error) {
	levels, bits := 4, 48
	if m == Paging5 {
		levels, bits = 5, 57
	}
	// canonical: bits above the top one copy it
	if top := int64(va) >> (bits - 1); top != 0 && top != -1 {
		return Translation{}, &NotMappedError{VA: va}
	}
	t := Translation{Writable: true, User: true}
	table := cr3 & pteAddr64
	for level := levels; level >= 1; level-- {
		shift := 12 + 9*uint(level-1)
		idx := (va >> shift) & 511
		e, err := read64(mem, table+idx*8)
		if err != nil {
			return Translation{}, fmt.Errorf("level %d entry of %#x at %#x: %w", level, va, table+idx*8, err)
		}
		if Trace != nil {
			Trace("walk %#x: level %d table %#x [%d] = %#x", va, level, table, idx, e)
		}
		if e&ptePresent == 0 {
			return Translation{}, &NotMappedError{VA: va, Level: level}
		}
		t.Writable = t.Writable && e&pteWrite != 0
		t.User = t.User && e&pteUser != 0
		if level == 1 || (e&ptePS != 0 && (level == 2 || level == 3)) {
			size := uint64(1) << shift
			// a large page's frame is aligned to its size (PAT sits in bit 12)
			base := e & pteAddr64 &^ (size - 1)
			t.Phys, t.PageSize = base|va&(size-1), size
			return t, nil
		}
		table = e & pteAddr64
	}
	panic("unreachable")
}

func walkPAE(mem PhysReader, cr3, va uint64) (Translation, error) {
	va &= 0xffff_ffff
	pdpt := cr3 & 0xffff_ffe0
	e, err := read64(mem, pdpt+(va>>30)*8)
	if err != nil {
		return Translation{}, fmt.Errorf("PDPT entry of %#x: %w", va, err)
	}
	if e&ptePresent == 0 {
		return Translation{}, &NotMappedError{VA: va, Level: 3}
	}
	t := Translation{Writable: true, User: true} // PDPTEs carry no R/W or U/S
	table := e & pteAddr64
	for level := 2; level >= 1; level-- {
		shift := 12 + 9*uint(level-1)
		idx := (va >> shift) & 511
		e, err := read64(mem, table+idx*8)
		if err != nil {
			return Translation{}, fmt.Errorf("level %d entry of %#x: %w", level, va, err)
		}
		if e&ptePresent == 0 {
			return Translation{}, &NotMappedError{VA: va, Level: level}
		}
		t.Writable = t.Writable && e&pteWrite != 0
		t.User = t.User && e&pteUser != 0
		if level == 1 || e&ptePS != 0 {
			size := uint64(1) << shift
			t.Phys, t.PageSize = e&pteAddr64&^(size-1)|va&(size-1), size
			return t, nil
		}
		table = e & pteAddr64
	}
	panic("unreachable")
}

func walk2(mem PhysReader, cr3, cr4, va uint64) (Translation, error) {
	va &= 0xffff_ffff
	pd := cr3 & 0xffff_f000
	e, err := read32(mem, pd+(va>>22)*4)
	if err != nil {
		return Translation{}, fmt.Errorf("page directory entry of %#x: %w", va, err)
	}
	if e&ptePresent == 0 {
		return Translation{}, &NotMappedError{VA: va, Level: 2}
	}
	t := Translation{Writable: e&pteWrite != 0, User: e&pteUser != 0}
	if e&ptePS != 0 && cr4&cr4PSE != 0 {
		// 4 MiB page: bits 22-31, and with PSE-36 bits 32-39 from 13-20
		base := uint64(e&0xffc0_0000) | uint64(e>>13&0xff)<<32
		t.Phys, t.PageSize = base|va&(4<<20-1), 4<<20
		return t, nil
	}
	pte, err := read32(mem, uint64(e&0xffff_f000)+(va>>12&1023)*4)
	if err != nil {
		return Translation{}, fmt.Errorf("page table entry of %#x: %w", va, err)
	}
	if pte&ptePresent == 0 {
		return Translation{}, &NotMappedError{VA: va, Level: 1}
	}
	t.Writable = t.Writable && pte&pteWrite != 0
	t.User = t.User && pte&pteUser != 0
	t.Phys, t.PageSize = uint64(pte&0xffff_f000)|va&0xfff, 4096
	return t, nil
}
