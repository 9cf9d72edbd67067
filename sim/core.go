package sim

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/unwind"
)

// Register order of the general registers in an x86_64 core's
// NT_PRSTATUS (struct user_regs_struct), and of an i386 one.
var (
	coreRegs64 = []rpn.Reg{
		rpn.RegR15, rpn.RegR14, rpn.RegR13, rpn.RegR12, rpn.RegRBP, rpn.RegRBX, rpn.RegR11, rpn.RegR10,
		rpn.RegR9, rpn.RegR8, rpn.RegRAX, rpn.RegRCX, rpn.RegRDX, rpn.RegRSI, rpn.RegRDI, 0xffff, /* orig_rax */
		rpn.RegRIP, rpn.RegCS, rpn.RegRFLAGS, rpn.RegRSP, rpn.RegSS, rpn.RegFSBase, rpn.RegGSBase,
		rpn.RegDS, rpn.RegES, rpn.RegFS, rpn.RegGS,
	}
	coreRegs32 = []rpn.Reg{
		rpn.RegRBX, rpn.RegRCX, rpn.RegRDX, rpn.RegRSI, rpn.RegRDI, rpn.RegRBP, rpn.RegRAX,
		rpn.RegDS, rpn.RegES, rpn.RegFS, rpn.RegGS, 0xffff, /* orig_eax */
		rpn.RegRIP, rpn.RegCS, rpn.RegRFLAGS, rpn.RegRSP, rpn.RegSS,
	}
)

// Offsets in struct elf_prstatus and elf_prpsinfo.
const (
	prstatusPID64 = 32
	prstatusReg64 = 112
	prpsinfoPID64 = 24
	prstatusPID32 = 24
	prstatusReg32 = 72
	prpsinfoPID32 = 12
)

// Limits of what LoadCore reads. Every size and offset of a core is
// checked against the file's size first, so a crafted header cannot make
// it allocate more than the file holds; these cap the counts on top.
const (
	// MaxCoreSegments is the most program headers LoadCore reads. A
	// process has one segment per mapping; Linux allows 65,530 mappings
	// by default (vm.max_map_count).
	MaxCoreSegments = 1 << 20
	// MaxCoreNotes is the most bytes of notes LoadCore reads: a thread's
	// notes are a few KiB (registers, FPU and xsave state, siginfo).
	MaxCoreNotes = 256 << 20
)

// LoadCore takes the registers of the first thread, the pid and tid, and
// every dumped memory segment of an ELF core file (as written by the
// kernel or by gdb's gcore). Segments the core did not dump (file size
// smaller than memory size) stay unreadable. The dumped memory is read
// into memory: as much as the file holds, never more (a malformed core
// is refused with the reason, before anything is allocated for it).
func (e *Env) LoadCore(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("core %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("core %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("core %s: not a regular file (%s)", path, fi.Mode().Type())
	}
	if err := e.LoadCoreFrom(f, fi.Size()); err != nil {
		return fmt.Errorf("core %s: %w", path, err)
	}
	return nil
}

// LoadCoreFrom is LoadCore reading a core of size bytes from r.
func (e *Env) LoadCoreFrom(r io.ReaderAt, size int64) error {
	c, err := readCore(r, size)
	if err != nil {
		return err
	}
	var st noteState
	for _, n := range c.notes {
		if err := e.coreNotes(n, c.bo, c.is64, &st); err != nil {
			return err
		}
	}
	if st.threads == 0 {
		return fmt.Errorf("no NT_PRSTATUS note: no registers")
	}
	if len(e.mem) == 0 {
		e.mem = c.mem // sorted and disjoint (readCore)
		return nil
	}
	for _, m := range c.mem {
		if err := e.AddMem(m.addr, m.data); err != nil {
			return err
		}
	}
	return nil
}

// core is what LoadCore takes from an ELF core file.
type core struct {
	is64  bool
	bo    binary.ByteOrder
	mem   []region // the dumped segments, sorted by address, disjoint
	notes [][]byte // the PT_NOTE segments
}

// segment is a program header, as wide as ELF64's.
type segment struct {
	typ                       elf.ProgType
	off, vaddr, filesz, memsz uint64
}

// readCore reads an ELF core's header, program headers, dumped segments
// and notes from r, a file of size bytes. Every offset and size is checked
// against size before it is used, so what it allocates is bounded by the
// file (and by MaxCoreSegments and MaxCoreNotes).
func readCore(r io.ReaderAt, size int64) (*core, error) {
	if size < 0 {
		return nil, fmt.Errorf("negative size")
	}
	fsize := uint64(size)
	// within reports whether [off, off+n) lies in the file
	within := func(off, n uint64) bool { return off <= fsize && n <= fsize-off }
	ident := make([]byte, elf.EI_NIDENT)
	if _, err := r.ReadAt(ident, 0); err != nil {
		return nil, fmt.Errorf("not an ELF file: %d bytes", size)
	}
	if string(ident[:4]) != elf.ELFMAG {
		return nil, fmt.Errorf("not an ELF file (no \\x7fELF at its start)")
	}
	c := &core{}
	switch elf.Class(ident[elf.EI_CLASS]) {
	case elf.ELFCLASS64:
		c.is64 = true
	case elf.ELFCLASS32:
	default:
		return nil, fmt.Errorf("ELF class %d: neither 32 nor 64 bits", ident[elf.EI_CLASS])
	}
	switch elf.Data(ident[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		c.bo = binary.LittleEndian
	case elf.ELFDATA2MSB:
		c.bo = binary.BigEndian
	default:
		return nil, fmt.Errorf("ELF data encoding %d: neither little nor big endian", ident[elf.EI_DATA])
	}
	hsize, phentsize := 52, uint64(32)
	if c.is64 {
		hsize, phentsize = 64, 56
	}
	h := make([]byte, hsize)
	if _, err := r.ReadAt(h, 0); err != nil {
		return nil, fmt.Errorf("ELF header: the file is %d bytes, the header %d", size, hsize)
	}
	bo := c.bo
	typ, machine := elf.Type(bo.Uint16(h[16:])), elf.Machine(bo.Uint16(h[18:]))
	var phoff, shoff uint64
	var phent, phnum, shent, shnum uint16
	if c.is64 {
		phoff, shoff = bo.Uint64(h[32:]), bo.Uint64(h[40:])
		phent, phnum, shent, shnum = bo.Uint16(h[54:]), bo.Uint16(h[56:]), bo.Uint16(h[58:]), bo.Uint16(h[60:])
	} else {
		phoff, shoff = uint64(bo.Uint32(h[28:])), uint64(bo.Uint32(h[32:]))
		phent, phnum, shent, shnum = bo.Uint16(h[42:]), bo.Uint16(h[44:]), bo.Uint16(h[46:]), bo.Uint16(h[48:])
	}
	if typ != elf.ET_CORE {
		return nil, fmt.Errorf("an ELF %s, not a core file", typ)
	}
	switch {
	case machine == elf.EM_X86_64 && c.is64, machine == elf.EM_386 && !c.is64:
	case machine == elf.EM_X86_64 || machine == elf.EM_386:
		return nil, fmt.Errorf("machine %s in a %d-bit ELF file: gprobes reads 64-bit x86_64 and 32-bit i386 cores", machine, map[bool]int{true: 64, false: 32}[c.is64])
	default:
		return nil, fmt.Errorf("machine %s: gprobes reads x86_64 and i386 cores", machine)
	}
	if uint64(phent) != phentsize {
		return nil, fmt.Errorf("program headers of %d bytes, not %d", phent, phentsize)
	}
	count := uint64(phnum)
	if phnum == 0xffff { // PN_XNUM: the count is section header 0's sh_info
		shsize := uint64(40)
		if c.is64 {
			shsize = 64
		}
		if shnum == 0 && shoff == 0 || uint64(shent) != shsize || !within(shoff, shsize) {
			return nil, fmt.Errorf("%d or more program headers (PN_XNUM), but no section header 0 holds their count", phnum)
		}
		sh := make([]byte, shsize)
		if _, err := r.ReadAt(sh, int64(shoff)); err != nil {
			return nil, fmt.Errorf("section header 0: %w", err)
		}
		if c.is64 {
			count = uint64(bo.Uint32(sh[44:]))
		} else {
			count = uint64(bo.Uint32(sh[28:]))
		}
	}
	if count > MaxCoreSegments {
		return nil, fmt.Errorf("%d program headers, more than gprobes reads (%d)", count, MaxCoreSegments)
	}
	if !within(phoff, count*phentsize) {
		return nil, fmt.Errorf("%d program headers of %d bytes at offset %#x lie past the end of the %d-byte file", count, phentsize, phoff, size)
	}
	ph := make([]byte, count*phentsize)
	if _, err := r.ReadAt(ph, int64(phoff)); err != nil {
		return nil, fmt.Errorf("program headers: %w", err)
	}
	var loads []segment
	var loaded, noted uint64
	for i := uint64(0); i < count; i++ {
		b := ph[i*phentsize:]
		var s segment
		if c.is64 {
			s = segment{typ: elf.ProgType(bo.Uint32(b)), off: bo.Uint64(b[8:]), vaddr: bo.Uint64(b[16:]), filesz: bo.Uint64(b[32:]), memsz: bo.Uint64(b[40:])}
		} else {
			s = segment{typ: elf.ProgType(bo.Uint32(b)), off: uint64(bo.Uint32(b[4:])), vaddr: uint64(bo.Uint32(b[8:])), filesz: uint64(bo.Uint32(b[16:])), memsz: uint64(bo.Uint32(b[20:]))}
		}
		if s.typ != elf.PT_LOAD && s.typ != elf.PT_NOTE || s.filesz == 0 {
			continue
		}
		if !within(s.off, s.filesz) {
			return nil, fmt.Errorf("segment %d (%s at %#x): %d bytes at offset %#x lie past the end of the %d-byte file", i, s.typ, s.vaddr, s.filesz, s.off, size)
		}
		if s.typ == elf.PT_NOTE {
			if noted += s.filesz; noted > MaxCoreNotes {
				return nil, fmt.Errorf("more than %d bytes of notes", MaxCoreNotes)
			}
			n := make([]byte, s.filesz)
			if _, err := r.ReadAt(n, int64(s.off)); err != nil {
				return nil, fmt.Errorf("notes at offset %#x: %w", s.off, err)
			}
			c.notes = append(c.notes, n)
			continue
		}
		if s.filesz > s.memsz {
			return nil, fmt.Errorf("segment %d at %#x: %d bytes in the file, more than its %d in memory", i, s.vaddr, s.filesz, s.memsz)
		}
		if s.vaddr+s.filesz-1 < s.vaddr {
			return nil, fmt.Errorf("segment %d at %#x: %d bytes wrap past the end of the address space", i, s.vaddr, s.filesz)
		}
		// segments share no bytes of the file in a core: the memory
		// read is at most the file
		if loaded += s.filesz; loaded > fsize {
			return nil, fmt.Errorf("the dumped segments add up to more bytes than the %d-byte file holds: they overlap in the file", size)
		}
		loads = append(loads, s)
	}
	sort.Slice(loads, func(i, j int) bool { return loads[i].vaddr < loads[j].vaddr })
	for i := 1; i < len(loads); i++ {
		if p, s := loads[i-1], loads[i]; s.vaddr < p.vaddr+p.filesz {
			return nil, fmt.Errorf("segments at %#x (%d bytes) and %#x overlap", p.vaddr, p.filesz, s.vaddr)
		}
	}
	c.mem = make([]region, 0, len(loads))
	for _, s := range loads {
		data := make([]byte, s.filesz)
		if _, err := r.ReadAt(data, int64(s.off)); err != nil {
			return nil, fmt.Errorf("segment at %#x: %w", s.vaddr, err)
		}
		c.mem = append(c.mem, region{s.vaddr, data})
	}
	return c, nil
}

// noteState is what coreNotes has seen so far.
type noteState struct {
	threads int  // NT_PRSTATUS notes
	pid     bool // the pid came from NT_PRPSINFO (the first thread's id is the fallback)
}

func (e *Env) coreNotes(b []byte, bo binary.ByteOrder, is64 bool, st *noteState) error {
	for len(b) >= 12 {
		namesz, descsz, typ := bo.Uint32(b), bo.Uint32(b[4:]), bo.Uint32(b[8:])
		b = b[12:]
		nlen := (uint64(namesz) + 3) &^ 3
		dlen := (uint64(descsz) + 3) &^ 3
		if nlen > uint64(len(b)) || uint64(descsz) > uint64(len(b))-nlen {
			return fmt.Errorf("malformed note")
		}
		desc := b[nlen : nlen+uint64(descsz)]
		if nlen+dlen > uint64(len(b)) {
			b = nil
		} else {
			b = b[nlen+dlen:]
		}
		switch elf.NType(typ) {
		case elf.NT_PRSTATUS:
			st.threads++
			if st.threads > 1 {
				continue
			}
			regs, pidOff, regOff, size := coreRegs32, prstatusPID32, prstatusReg32, 4
			if is64 {
				regs, pidOff, regOff, size = coreRegs64, prstatusPID64, prstatusReg64, 8
			}
			if len(desc) < regOff+len(regs)*size {
				return fmt.Errorf("NT_PRSTATUS note of %d bytes is too short", len(desc))
			}
			e.SetSys(rpn.SysTID, uint64(bo.Uint32(desc[pidOff:])))
			if !st.pid {
				e.SetSys(rpn.SysPID, uint64(bo.Uint32(desc[pidOff:])))
			}
			for i, r := range regs {
				if r == 0xffff {
					continue
				}
				var v uint64
				if size == 8 {
					v = bo.Uint64(desc[regOff+8*i:])
				} else {
					v = uint64(bo.Uint32(desc[regOff+4*i:]))
				}
				e.regs[r] = v
			}
		case ntFile:
			if is64 {
				e.files = parseNTFile(desc, bo)
			}
		case elf.NT_PRPSINFO:
			off := prpsinfoPID32
			if is64 {
				off = prpsinfoPID64
			}
			if len(desc) >= off+4 {
				e.SetSys(rpn.SysPID, uint64(bo.Uint32(desc[off:])))
				st.pid = true
			}
		}
	}
	return nil
}

// ntFile is NT_FILE ("FILE"): the files mapped in the process.
const ntFile elf.NType = 0x46494c45

// parseNTFile reads a 64-bit NT_FILE note: count and page size, count
// (start, end, offset in pages), then the count paths, NUL-terminated;
// nil when it is malformed.
func parseNTFile(desc []byte, bo binary.ByteOrder) unwind.Modules {
	if len(desc) < 16 {
		return nil
	}
	count, page := bo.Uint64(desc), bo.Uint64(desc[8:])
	if count > uint64(len(desc)-16)/24 {
		return nil
	}
	names := desc[16+24*count:]
	var mods unwind.Modules
	for i := uint64(0); i < count; i++ {
		e := desc[16+24*i:]
		end := bytes.IndexByte(names, 0)
		if end < 0 {
			return nil
		}
		mods = append(mods, unwind.Mapping{Start: bo.Uint64(e), End: bo.Uint64(e[8:]), Offset: bo.Uint64(e[16:]) * page, Path: string(names[:end])})
		names = names[end+1:]
	}
	mods.Sort()
	return mods
}
