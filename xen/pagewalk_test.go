package xen

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
)

// fakePhys is guest physical memory made of 4 KiB frames; a missing frame
// cannot be read (as a frame the hypervisor refuses to map).
type fakePhys struct {
	frames map[uint64]*[4096]byte
	next   uint64 // next free frame number for tables
}

func newPhys() *fakePhys { return &fakePhys{frames: map[uint64]*[4096]byte{}, next: 0x100} }

func (m *fakePhys) ReadPhys(addr uint64, p []byte) error {
	for len(p) > 0 {
		f, ok := m.frames[addr>>12]
		if !ok {
			return fmt.Errorf("frame %#x not mapped", addr>>12)
		}
		n := copy(p, f[addr&0xfff:])
		p, addr = p[n:], addr+uint64(n)
	}
	return nil
}

// table allocates a zeroed frame for a page table, at an address with the
// given alignment (PAE's PDPT needs only 32 bytes, the others a frame).
func (m *fakePhys) table() uint64 {
	f := m.next
	m.next++
	m.frames[f] = new([4096]byte)
	return f << 12
}

func (m *fakePhys) put64(addr, v uint64) {
	f := m.frames[addr>>12]
	binary.LittleEndian.PutUint64(f[addr&0xfff:], v)
}

func (m *fakePhys) get64(addr uint64) uint64 {
	f := m.frames[addr>>12]
	return binary.LittleEndian.Uint64(f[addr&0xfff:])
}

func (m *fakePhys) put32(addr uint64, v uint32) {
	f := m.frames[addr>>12]
	binary.LittleEndian.PutUint32(f[addr&0xfff:], v)
}

func (m *fakePhys) get32(addr uint64) uint32 {
	f := m.frames[addr>>12]
	return binary.LittleEndian.Uint32(f[addr&0xfff:])
}

const rw = ptePresent | pteWrite

// map64 maps va to pa in 4- or 5-level tables rooted at root, with a page
// of size 4 KiB, 2 MiB or 1 GiB; flags go on the last entry, the upper ones
// get present|write|user|extra.
func (m *fakePhys) map64(root uint64, levels int, va, pa, size, flags, upper uint64) {
	table := root
	for level := levels; level >= 1; level-- {
		shift := 12 + 9*uint(level-1)
		slot := table + (va>>shift&511)*8
		if uint64(1)<<shift == size {
			e := pa | flags
			if level > 1 {
				e |= ptePS
			}
			m.put64(slot, e)
			return
		}
		e := m.get64(slot)
		if e&ptePresent == 0 {
			e = m.table() | rw | pteUser | upper
			m.put64(slot, e)
		}
		table = e & pteAddr64
	}
}

func TestTranslate64(t *testing.T) {
	for _, mode := range []Paging{Paging4, Paging5} {
		levels := 4
		if mode == Paging5 {
			levels = 5
		}
		t.Run(mode.String(), func(t *testing.T) {
			mem := newPhys()
			root := mem.table()
			kern := uint64(0xffffffff81000000)
			if mode == Paging5 {
				kern = 0xff11_2233_4440_0000 // needs bits above 47
			}
			mem.map64(root, levels, kern, 0x1234000, 4096, rw, 0)
			mem.map64(root, levels, kern+0x200000, 0x4000_0000, 2<<20, ptePresent, 0) // read-only 2 MiB
			mem.map64(root, levels, 0x7f00_0000_0000&^(1<<30-1), 0x1_4000_0000, 1<<30, rw|pteUser, 0)
			mem.map64(root, levels, 0x1000, 0x5000, 4096, rw|pteUser, 0)
			// a 2 MiB page whose entry has PAT (bit 12) set: not part of the frame
			mem.map64(root, levels, 0x40000000, 0x8000_0000, 2<<20, rw|pteUser|1<<12|1<<63, 0)

			for _, c := range []struct {
				va   uint64
				want Translation
			}{
				{kern + 0x123, Translation{Phys: 0x1234123, PageSize: 4096, Writable: true}},
				{kern + 0x200000 + 0x1abcd, Translation{Phys: 0x4001abcd, PageSize: 2 << 20}},
				{0x7f00_0000_0000&^(1<<30-1) + 0x3456789, Translation{Phys: 0x1_4345_6789, PageSize: 1 << 30, Writable: true, User: true}},
				{0x1ff8, Translation{Phys: 0x5ff8, PageSize: 4096, Writable: true, User: true}},
				{0x40000000 + 0x12345, Translation{Phys: 0x80012345, PageSize: 2 << 20, Writable: true, User: true}},
			} {
				got, err := Translate(mem, mode, root|0x18 /* PWT|PCD ignored */, 0, c.va)
				if err != nil || got != c.want {
					t.Errorf("%#x: %+v %v, want %+v", c.va, got, err, c.want)
				}
			}
			// nothing mapped at each level below the root
			var nm *NotMappedError
			if _, err := Translate(mem, mode, root, 0, kern+0x1000); !errors.As(err, &nm) || nm.Level != 1 {
				t.Errorf("unmapped PTE: %v", err)
			}
			if _, err := Translate(mem, mode, root, 0, kern+0x400000); !errors.As(err, &nm) || nm.Level != 2 {
				t.Errorf("unmapped PDE: %v", err)
			}
			top := uint64(0x0000_4000_0000_0000)
			if mode == Paging5 {
				top = 0x00ff_0000_0000_0000
			}
			if _, err := Translate(mem, mode, root, 0, top); !errors.As(err, &nm) || nm.Level != levels {
				t.Errorf("unmapped top level: %v", err)
			}
			// not canonical
			bad := uint64(0x0000_8000_0000_0000)
			if mode == Paging5 {
				bad = 0x0100_0000_0000_0000
			}
			if _, err := Translate(mem, mode, root, 0, bad); !errors.As(err, &nm) || nm.Level != 0 {
				t.Errorf("non-canonical %#x: %v", bad, err)
			}
			// a table frame that cannot be read is an error, not a mapping
			mem.map64(root, levels, 0x2000_0000, 0x9000, 4096, rw, 0)
			pd := mem.get64(mem.get64(root+(0x2000_0000>>(12+9*uint(levels-1))&511)*8)&pteAddr64) & pteAddr64
			if levels == 5 {
				pd = mem.get64(pd) & pteAddr64
			}
			pt := mem.get64(pd+(0x2000_0000>>21&511)*8) & pteAddr64
			delete(mem.frames, pt>>12)
			if _, err := Translate(mem, mode, root, 0, 0x2000_0000); err == nil || errors.As(err, &nm) {
				t.Errorf("unreadable table: %v", err)
			}
		})
	}
}

func TestTranslate64ReadOnlyUpperLevel(t *testing.T) {
	mem := newPhys()
	root := mem.table()
	// a writable PTE under a read-only, supervisor PDE: neither
	mem.map64(root, 4, 0x600000, 0x7000, 4096, rw|pteUser, 0)
	pdpt := mem.get64(root) & pteAddr64
	pd := mem.get64(pdpt) & pteAddr64
	mem.put64(pd+3*8, mem.get64(pd+3*8)&^(pteWrite|pteUser))
	got, err := Translate(mem, Paging4, root, 0, 0x600010)
	if err != nil || got.Writable || got.User || got.Phys != 0x7010 {
		t.Errorf("%+v %v", got, err)
	}
}

func TestTranslatePAE(t *testing.T) {
	mem := newPhys()
	frame := mem.table()
	pdpt := frame + 0x40 // 32-byte aligned, not frame aligned
	pd0, pd3 := mem.table(), mem.table()
	mem.put64(pdpt, pd0|ptePresent)
	mem.put64(pdpt+3*8, pd3|ptePresent)
	// 0xc0000000 + 2 MiB: a 2 MiB page; 0xc0400000: a page table
	mem.put64(pd3+1*8, 0x3_0020_0000|rw|ptePS)
	pt := mem.table()
	mem.put64(pd3+2*8, pt|rw|pteUser)
	mem.put64(pt+5*8, 0x2_0000_3000|ptePresent|pteUser|1<<63)
	cr3 := pdpt
	for _, c := range []struct {
		va   uint64
		want Translation
	}{
		{0xc0212345, Translation{Phys: 0x3_0021_2345, PageSize: 2 << 20, Writable: true, User: false}},
		{0xc0405abc, Translation{Phys: 0x2_0000_3abc, PageSize: 4096, Writable: false, User: true}},
	} {
		got, err := Translate(mem, PagingPAE, cr3, cr4PAE, c.va)
		if err != nil || got != c.want {
			t.Errorf("%#x: %+v %v, want %+v", c.va, got, err, c.want)
		}
	}
	var nm *NotMappedError
	for _, c := range []struct {
		va    uint64
		level int
	}{{0x40000000, 3}, {0x00001000, 2}, {0xc0406000, 1}} {
		if _, err := Translate(mem, PagingPAE, cr3, cr4PAE, c.va); !errors.As(err, &nm) || nm.Level != c.level {
			t.Errorf("%#x: %v, want not mapped at level %d", c.va, err, c.level)
		}
	}
}

func TestTranslate2Level(t *testing.T) {
	mem := newPhys()
	pd := mem.table()
	pt := mem.table()
	mem.put32(pd+0x300*4, uint32(pt)|rw)               // 0xc0000000: a page table
	mem.put32(pt+7*4, 0x0abcd000|ptePresent)           // read-only 4 KiB page
	mem.put32(pd+0x301*4, 0x1fc00000|rw|ptePS|0x3<<13) // 4 MiB page, PSE-36 high bits 3
	for _, c := range []struct {
		va   uint64
		cr4  uint64
		want Translation
	}{
		{0xc0007123, cr4PSE, Translation{Phys: 0x0abcd123, PageSize: 4096, Writable: false}},
		{0xc0412345, cr4PSE, Translation{Phys: 0x3_1fc1_2345, PageSize: 4 << 20, Writable: true}},
	} {
		got, err := Translate(mem, Paging2, pd, c.cr4, c.va)
		if err != nil || got != c.want {
			t.Errorf("%#x: %+v %v, want %+v", c.va, got, err, c.want)
		}
	}
	// without CR4.PSE the PS bit is ignored: the entry is a page table
	// (frame 0x1fc00 | the low flag bits), which is not in memory here
	if _, err := Translate(mem, Paging2, pd, 0, 0xc0412345); err == nil {
		t.Error("PS honoured without CR4.PSE")
	}
	var nm *NotMappedError
	if _, err := Translate(mem, Paging2, pd, cr4PSE, 0x00400000); !errors.As(err, &nm) || nm.Level != 2 {
		t.Errorf("unmapped PDE: %v", err)
	}
	if _, err := Translate(mem, Paging2, pd, cr4PSE, 0xc0008000); !errors.As(err, &nm) || nm.Level != 1 {
		t.Errorf("unmapped PTE: %v", err)
	}
}

func TestPagingOf(t *testing.T) {
	for _, c := range []struct {
		cr4   uint64
		width int
		want  Paging
	}{
		{cr4PAE, 64, Paging4},
		{cr4PAE | cr4LA57, 64, Paging5},
		{cr4PAE, 32, PagingPAE},
		{cr4PSE, 32, Paging2},
		{0, 32, Paging2},
	} {
		if got := PagingOf(c.cr4, c.width); got != c.want {
			t.Errorf("PagingOf(%#x, %d) = %v, want %v", c.cr4, c.width, got, c.want)
		}
	}
	if _, err := Translate(newPhys(), Paging(9), 0, 0, 0); !errors.Is(err, ErrBadPaging) {
		t.Errorf("unknown mode: %v", err)
	}
}
