package guestcore

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/gprobes/gprobes/rpn"
)

// fakeMem: frames 0..15 of RAM, the direct map at dm + pfn*4096, a kernel
// image at ki mapping frames 4..7, frame 9 unmapped in the direct map.
type fakeMem struct{ frames map[uint64][]byte }

const (
	dm = 0xffff888000000000
	ki = 0xffffffff81000000
)

func (m fakeMem) Frame(va uint64) (uint64, bool, error) {
	switch {
	case va >= ki && va < ki+4*PageSize:
		return 4 + (va-ki)/PageSize, true, nil
	case va >= dm && va < dm+16*PageSize:
		f := (va - dm) / PageSize
		return f, f != 9, nil
	}
	return 0, false, nil
}

func (m fakeMem) ReadFrame(f uint64, p []byte) error {
	if b, ok := m.frames[f]; ok {
		copy(p, b)
		return nil
	}
	clear(p)
	return nil
}

func TestWriteFile(t *testing.T) {
	mem := fakeMem{frames: map[uint64][]byte{}}
	for f := uint64(0); f < 16; f++ {
		if f%3 == 0 {
			continue // frames of zeros
		}
		b := bytes.Repeat([]byte{byte(f)}, PageSize)
		binary.LittleEndian.PutUint64(b, 0x1000+f)
		mem.frames[f] = b
	}
	var regs [rpn.NumRegs]uint64
	regs[rpn.RegRIP] = ki + 0x10
	regs[rpn.RegRSP] = dm + 0x2000
	path := filepath.Join(t.TempDir(), "core")
	st, err := WriteFile(path, mem, Options{
		Ranges: []Range{
			{Name: "kernel image", Start: ki, End: ki + 4*PageSize, Phys: 4 * PageSize, HasPhys: true},
			{Name: "direct map", Start: dm, End: dm + 16*PageSize, Phys: 0, HasPhys: true},
		},
		VCPUs:      []VCPU{{ID: 0, Regs: regs}, {ID: 1}},
		VMCoreInfo: []byte("OSRELEASE=6.1.0-test\nPAGESIZE=4096\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	// 15 frames written once each (the kernel image's 4 are in the direct
	// map too), 5 of them zeros; 4+15 pages covered
	if st.Frames != 15 || st.Pages != 19 || st.Unmapped != 1 || st.Zero != 5 {
		t.Errorf("stats %+v", st)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Type != elf.ET_CORE || f.Machine != elf.EM_X86_64 {
		t.Fatalf("type %v machine %v", f.Type, f.Machine)
	}
	read := func(va uint64) (uint64, bool) {
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && va >= p.Vaddr && va+8 <= p.Vaddr+p.Filesz {
				var b [8]byte
				if _, err := p.ReadAt(b[:], int64(va-p.Vaddr)); err != nil {
					t.Fatal(err)
				}
				return binary.LittleEndian.Uint64(b[:]), true
			}
		}
		return 0, false
	}
	for fr := uint64(0); fr < 16; fr++ {
		want := uint64(0)
		if fr%3 != 0 {
			want = 0x1000 + fr
		}
		got, ok := read(dm + fr*PageSize)
		if fr == 9 {
			if ok {
				t.Errorf("frame 9 is unmapped but the core has it")
			}
			continue
		}
		if !ok || got != want {
			t.Errorf("direct map frame %d: %#x %v, want %#x", fr, got, ok, want)
		}
	}
	for i := uint64(0); i < 4; i++ {
		got, ok := read(ki + i*PageSize)
		want := uint64(0x1000 + 4 + i)
		if (4+i)%3 == 0 {
			want = 0
		}
		if !ok || got != want {
			t.Errorf("kernel image page %d: %#x %v, want %#x", i, got, ok, want)
		}
	}
	// p_paddr, and the kernel image sharing the direct map's bytes
	var kiOff, dmOff uint64
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		if p.Vaddr == ki {
			kiOff = p.Off
			if p.Paddr != 4*PageSize {
				t.Errorf("kernel image p_paddr %#x", p.Paddr)
			}
		}
		if p.Vaddr <= dm+4*PageSize && dm+4*PageSize < p.Vaddr+p.Filesz {
			dmOff = p.Off + dm + 4*PageSize - p.Vaddr
		}
	}
	if kiOff == 0 || kiOff != dmOff {
		t.Errorf("kernel image at file offset %#x, its frames in the direct map at %#x: want one copy", kiOff, dmOff)
	}
	// notes: two PRSTATUS with the registers in user_regs_struct order,
	// then VMCOREINFO
	var notes []byte
	for _, p := range f.Progs {
		if p.Type == elf.PT_NOTE {
			notes = make([]byte, p.Filesz)
			p.ReadAt(notes, 0)
		}
	}
	var names []string
	for b := notes; len(b) >= 12; {
		nsz, dsz, typ := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint32(b[8:])
		name := string(b[12 : 12+nsz-1])
		desc := b[12+(nsz+3)&^3:]
		desc = desc[:dsz]
		names = append(names, name)
		if name == "CORE" && typ == 1 && len(names) == 1 {
			if rip := binary.LittleEndian.Uint64(desc[112+16*8:]); rip != ki+0x10 {
				t.Errorf("PRSTATUS rip %#x", rip)
			}
			if rsp := binary.LittleEndian.Uint64(desc[112+19*8:]); rsp != dm+0x2000 {
				t.Errorf("PRSTATUS rsp %#x", rsp)
			}
		}
		if name == "VMCOREINFO" && !bytes.HasPrefix(desc, []byte("OSRELEASE=")) {
			t.Errorf("VMCOREINFO %q", desc)
		}
		b = b[12+(nsz+3)&^3+(dsz+3)&^3:]
	}
	if len(names) != 3 || names[0] != "CORE" || names[1] != "CORE" || names[2] != "VMCOREINFO" {
		t.Errorf("notes %v", names)
	}
	// sparse: the frames of zeros take no blocks
	fi, _ := os.Stat(path)
	if s, ok := fi.Sys().(*syscall.Stat_t); ok && s.Blocks*512 >= fi.Size() {
		t.Logf("blocks %d for %d bytes (the file system may not make holes)", s.Blocks, fi.Size())
	}
}

func TestWriteFileLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "core")
	_, err := WriteFile(path, fakeMem{}, Options{
		Ranges:   []Range{{Name: "direct map", Start: dm, End: dm + 16*PageSize}},
		MaxBytes: 8 * PageSize,
	})
	if !errors.Is(err, ErrTooBig) {
		t.Fatalf("err %v, want ErrTooBig", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a refused dump left %s", path)
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 0 {
		t.Errorf("left %v", ents)
	}
}

type batchMem struct {
	fakeMem
	calls int
}

func (m *batchMem) ReadFrames(frames []uint64, p []byte) error {
	m.calls++
	for i, f := range frames {
		m.ReadFrame(f, p[i*PageSize:(i+1)*PageSize])
	}
	return nil
}

// TestBatchSame: a BatchMemory gives the same file, in few calls.
func TestBatchSame(t *testing.T) {
	mem := fakeMem{frames: map[uint64][]byte{}}
	for f := uint64(0); f < 16; f++ {
		mem.frames[f] = bytes.Repeat([]byte{byte(f + 1)}, PageSize)
	}
	opts := Options{Ranges: []Range{
		{Name: "kernel image", Start: ki, End: ki + 4*PageSize},
		{Name: "direct map", Start: dm, End: dm + 16*PageSize},
	}, VCPUs: []VCPU{{}}}
	dir := t.TempDir()
	if _, err := WriteFile(filepath.Join(dir, "a"), mem, opts); err != nil {
		t.Fatal(err)
	}
	bm := &batchMem{fakeMem: mem}
	if _, err := WriteFile(filepath.Join(dir, "b"), bm, opts); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(filepath.Join(dir, "a"))
	b, _ := os.ReadFile(filepath.Join(dir, "b"))
	if !bytes.Equal(a, b) || bm.calls != 1 {
		t.Errorf("batch: equal %v, %d calls", bytes.Equal(a, b), bm.calls)
	}
}
