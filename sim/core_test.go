package sim

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/rpn"
)

// testSeg is a program header of a core built by buildCore; data is
// written at the end of the file and off points at it, unless off is
// given (nonzero) or filesz says otherwise (nonzero).
type testSeg struct {
	typ                 elf.ProgType
	vaddr, off, filesz  uint64
	memsz               uint64
	data                []byte
	keepOff, keepFilesz bool
}

// buildCore writes a little-endian x86_64 ELF core: the header, the
// program headers, then each segment's data.
func buildCore(segs []testSeg, phnum int) []byte {
	le := binary.LittleEndian
	h := make([]byte, 64)
	copy(h, elf.ELFMAG)
	h[elf.EI_CLASS], h[elf.EI_DATA], h[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), 1
	le.PutUint16(h[16:], uint16(elf.ET_CORE))
	le.PutUint16(h[18:], uint16(elf.EM_X86_64))
	le.PutUint32(h[20:], 1)
	le.PutUint64(h[32:], 64) // phoff
	le.PutUint16(h[52:], 64)
	le.PutUint16(h[54:], 56)
	if phnum < 0 {
		phnum = len(segs)
	}
	le.PutUint16(h[56:], uint16(phnum))
	out := append([]byte{}, h...)
	off := uint64(64 + 56*len(segs))
	var data []byte
	for _, s := range segs {
		p := make([]byte, 56)
		le.PutUint32(p, uint32(s.typ))
		o, fs := off+uint64(len(data)), uint64(len(s.data))
		if s.keepOff {
			o = s.off
		}
		if s.keepFilesz {
			fs = s.filesz
		}
		memsz := s.memsz
		if memsz == 0 {
			memsz = fs
		}
		le.PutUint64(p[8:], o)
		le.PutUint64(p[16:], s.vaddr)
		le.PutUint64(p[32:], fs)
		le.PutUint64(p[40:], memsz)
		out = append(out, p...)
		data = append(data, s.data...)
	}
	return append(out, data...)
}

// note is one ELF note with the name CORE.
func note(typ elf.NType, desc []byte) []byte {
	le := binary.LittleEndian
	b := make([]byte, 12)
	le.PutUint32(b, 5)
	le.PutUint32(b[4:], uint32(len(desc)))
	le.PutUint32(b[8:], uint32(typ))
	b = append(b, "CORE\x00\x00\x00\x00"...)
	b = append(b, desc...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// prstatus is an x86_64 NT_PRSTATUS descriptor with pid and rip and rdi.
func prstatus(pid uint32, rip, rdi uint64) []byte {
	d := make([]byte, prstatusReg64+27*8+8)
	binary.LittleEndian.PutUint32(d[prstatusPID64:], pid)
	binary.LittleEndian.PutUint64(d[prstatusReg64+16*8:], rip)
	binary.LittleEndian.PutUint64(d[prstatusReg64+14*8:], rdi)
	return d
}

// goodCore is a small well-formed core: one thread, two segments.
func goodCore() []byte {
	return buildCore([]testSeg{
		{typ: elf.PT_NOTE, data: note(elf.NT_PRSTATUS, prstatus(4242, 0x401000, 0x600010))},
		{typ: elf.PT_LOAD, vaddr: 0x600000, data: bytes.Repeat([]byte{0xab}, 32), memsz: 0x1000},
		{typ: elf.PT_LOAD, vaddr: 0x7fff0000, data: []byte("stack")},
	}, -1)
}

func TestLoadCoreReadsAWellFormedCore(t *testing.T) {
	e := NewEnv()
	data := goodCore()
	if err := e.LoadCoreFrom(bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if v, _ := e.Reg(rpn.RegRIP, false); v != 0x401000 {
		t.Errorf("rip = %#x", v)
	}
	if v, _ := e.Reg(rpn.RegRDI, false); v != 0x600010 {
		t.Errorf("rdi = %#x", v)
	}
	if v, _ := e.Sys(rpn.SysPID); v != 4242 {
		t.Errorf("pid = %d", v)
	}
	b := make([]byte, 5)
	if !e.ReadMem(0x7fff0000, b) || string(b) != "stack" {
		t.Errorf("stack segment: %q", b)
	}
	if !e.ReadMem(0x60001f, b[:1]) || b[0] != 0xab || e.ReadMem(0x600020, b[:1]) {
		t.Error("the first segment is not exactly its 32 dumped bytes")
	}
}

// A crafted core is refused with the reason, whatever its header claims:
// sizes are checked against the file's size before anything is allocated.
// The first one is the 184-byte core that made sim --core panic in
// makeslice (a segment of 2^62 bytes) or run out of memory (2^40).
func TestLoadCoreRefusesCraftedCores(t *testing.T) {
	huge := func(n uint64) []byte {
		return buildCore([]testSeg{
			{typ: elf.PT_NOTE, data: note(elf.NT_PRSTATUS, prstatus(1, 2, 3))[:8]},
			{typ: elf.PT_LOAD, vaddr: 0x1000, filesz: n, keepFilesz: true},
		}, -1)
	}
	le := binary.LittleEndian
	manyHeaders := goodCore()
	le.PutUint16(manyHeaders[56:], 0xffff) // PN_XNUM without a section header
	bigNote := buildCore([]testSeg{{typ: elf.PT_NOTE, off: 64, filesz: 1 << 40, keepOff: true, keepFilesz: true}}, -1)
	overlapInFile := buildCore([]testSeg{
		{typ: elf.PT_NOTE, data: note(elf.NT_PRSTATUS, prstatus(1, 2, 3))},
		{typ: elf.PT_LOAD, vaddr: 0x1000, off: 0, filesz: 400, keepOff: true, keepFilesz: true},
		{typ: elf.PT_LOAD, vaddr: 0x9000, off: 0, filesz: 400, keepOff: true, keepFilesz: true},
	}, -1)
	overlapInMemory := buildCore([]testSeg{
		{typ: elf.PT_NOTE, data: note(elf.NT_PRSTATUS, prstatus(1, 2, 3))},
		{typ: elf.PT_LOAD, vaddr: 0x1000, data: make([]byte, 16)},
		{typ: elf.PT_LOAD, vaddr: 0x1008, data: make([]byte, 16)},
	}, -1)
	fileBigger := buildCore([]testSeg{
		{typ: elf.PT_NOTE, data: note(elf.NT_PRSTATUS, prstatus(1, 2, 3))},
		{typ: elf.PT_LOAD, vaddr: 0x1000, data: make([]byte, 16), memsz: 8},
	}, -1)
	wrap := buildCore([]testSeg{
		{typ: elf.PT_NOTE, data: note(elf.NT_PRSTATUS, prstatus(1, 2, 3))},
		{typ: elf.PT_LOAD, vaddr: ^uint64(0) - 3, data: make([]byte, 16)},
	}, -1)
	phPastEnd := goodCore()
	le.PutUint16(phPastEnd[56:], 60000)
	badNote := buildCore([]testSeg{{typ: elf.PT_NOTE, data: []byte{5, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f, 1, 0, 0, 0, 'C', 'O', 'R', 'E'}}}, -1)
	noRegs := buildCore([]testSeg{{typ: elf.PT_LOAD, vaddr: 0x1000, data: make([]byte, 8)}}, -1)
	notCore := goodCore()
	le.PutUint16(notCore[16:], uint16(elf.ET_EXEC))
	arm := goodCore()
	le.PutUint16(arm[18:], uint16(elf.EM_AARCH64))
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"segment of 2^62 bytes", huge(1 << 62), "lie past the end of the 184-byte file"},
		{"segment of 2^40 bytes", huge(1 << 40), "lie past the end of the 184-byte file"},
		{"notes of 2^40 bytes", bigNote, "lie past the end"},
		{"PN_XNUM without its count", manyHeaders, "no section header 0 holds their count"},
		{"program headers past the end", phPastEnd, "60000 program headers of 56 bytes at offset 0x40 lie past the end"},
		{"segments sharing the file's bytes", overlapInFile, "overlap in the file"},
		{"segments overlapping in memory", overlapInMemory, "overlap"},
		{"more bytes in the file than in memory", fileBigger, "more than its 8 in memory"},
		{"segment wrapping the address space", wrap, "wrap past the end of the address space"},
		{"a note longer than its segment", badNote, "malformed note"},
		{"no registers", noRegs, "no NT_PRSTATUS note"},
		{"an executable", notCore, "not a core file"},
		{"an arm64 core", arm, "gprobes reads x86_64 and i386 cores"},
		{"10 bytes", goodCore()[:10], "not an ELF file"},
		{"a truncated header", goodCore()[:40], "ELF header"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "core")
			if err := os.WriteFile(path, c.data, 0o644); err != nil {
				t.Fatal(err)
			}
			err := NewEnv().LoadCore(path)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "core "+path+": ") {
				t.Errorf("LoadCore of %d bytes: %v, want an error naming the file and saying %q", len(c.data), err, c.want)
			}
		})
	}
	if n := len(huge(1 << 62)); n != 184 {
		t.Errorf("the crafted core is %d bytes, not the 184 of the report", n)
	}
}

// FuzzCore: no core makes LoadCoreFrom panic or take more memory than the
// file holds; what it loads is what the file holds.
func FuzzCore(f *testing.F) {
	f.Add(goodCore())
	f.Add(buildCore([]testSeg{
		{typ: elf.PT_NOTE, data: note(elf.NT_PRSTATUS, prstatus(1, 2, 3))[:8]},
		{typ: elf.PT_LOAD, vaddr: 0x1000, filesz: 1 << 62, keepFilesz: true},
	}, -1))
	f.Add(buildCore([]testSeg{
		{typ: elf.PT_NOTE, data: append(note(elf.NT_PRPSINFO, make([]byte, 136)), note(elf.NT_PRSTATUS, prstatus(7, 8, 9))...)},
		{typ: elf.PT_LOAD, vaddr: 0x2000, data: []byte("abcdefgh")},
		{typ: elf.PT_LOAD, vaddr: 0x1000, data: []byte("12345678")},
	}, -1))
	f.Fuzz(func(t *testing.T, data []byte) {
		e := NewEnv()
		err := e.LoadCoreFrom(bytes.NewReader(data), int64(len(data)))
		total := 0
		for i, r := range e.mem {
			total += len(r.data)
			if i > 0 && e.mem[i-1].addr+uint64(len(e.mem[i-1].data)) > r.addr {
				t.Fatalf("regions overlap or are out of order: %#x after %#x", r.addr, e.mem[i-1].addr)
			}
		}
		if total > len(data) {
			t.Fatalf("loaded %d bytes of memory from a %d-byte core", total, len(data))
		}
		if err != nil && err.Error() == "" {
			t.Fatal("an empty error")
		}
	})
}
