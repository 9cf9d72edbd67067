package symbols

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// ELF constants debug/elf does not name.
const (
	stbGNUUnique = elf.SymBind(10) // STB_GNU_UNIQUE
	ntGNUBuildID = 3               // NT_GNU_BUILD_ID
)

// openELF reads the symbols, build ID and section facts of an ELF file. The
// DWARF is read later, on demand (see dwarfInfo).
func openELF(path string, f *os.File) (*Table, error) {
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, fmt.Errorf("open %s: read ELF: %w", path, err)
	}
	t := newTable(path, FormatELF, 0)
	t.relocatable = ef.Type == elf.ET_REL
	t.ptrSize = 8
	if ef.Class == elf.ELFCLASS32 {
		t.ptrSize = 4
	}
	if st, err := f.Stat(); err == nil {
		t.fileSize = st.Size()
	}
	t.buildID = buildID(ef)
	for _, s := range ef.Sections {
		if (s.Name == ".debug_info" || s.Name == ".zdebug_info") && s.Type != elf.SHT_NOBITS && s.Size > 0 {
			t.hasDWARF = true
		}
	}

	syms, err := ef.Symbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, fmt.Errorf("open %s: read .symtab: %w", path, err)
	}
	dsyms, err := ef.DynamicSymbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, fmt.Errorf("open %s: read .dynsym: %w", path, err)
	}
	if err := elfBTF(t, ef); err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if len(syms) == 0 && len(dsyms) == 0 && !t.hasDWARF && !t.hasBTF {
		return nil, fmt.Errorf("open %s: %w", path, ErrStripped)
	}
	n := len(syms) + len(dsyms)
	t.syms = make([]entry, 0, n)
	if t.relocatable {
		// Symbol values in a .o or .ko are offsets in their sections; the
		// addresses exist only once the object is loaded. Keep the names so
		// that a failed lookup can say so.
		t.reloc = map[string]bool{}
		for _, s := range syms {
			if defined(s) {
				t.reloc[s.Name] = true
			}
		}
		return t, nil
	}
	for _, s := range syms {
		if !defined(s) {
			continue
		}
		t.add(elfEntry(ef, s, false))
	}
	for _, s := range dsyms {
		if !defined(s) {
			continue
		}
		e := elfEntry(ef, s, true)
		if s.Version != "" && !strings.Contains(s.Name, "@") {
			// nm -D spells it name@@VERSION (default) or name@VERSION.
			if s.VersionIndex.IsHidden() {
				e.Name += "@" + s.Version
				e.ver = verHidden
			} else {
				e.Name += "@@" + s.Version
				e.ver = verDefault
			}
		}
		t.add(e)
	}
	t.names.build(t.syms)
	return t, nil
}

// defined reports whether an ELF symbol is a definition with an address.
// Section and file symbols, undefined symbols and TLS symbols (whose values
// are offsets in the TLS block, not addresses) are left out.
func defined(s elf.Symbol) bool {
	if s.Name == "" || s.Section == elf.SHN_UNDEF {
		return false
	}
	switch elf.ST_TYPE(s.Info) {
	case elf.STT_SECTION, elf.STT_FILE, elf.STT_TLS:
		return false
	}
	return true
}

// elfEntry converts an ELF symbol, computing its nm letter the way GNU nm
// does (bfd_decode_symclass): IFUNC 'i', weak 'W'/'V', unique 'u', absolute
// 'a', common 'c', then by section flags; uppercase for STB_GLOBAL.
func elfEntry(ef *elf.File, s elf.Symbol, dyn bool) entry {
	bind, typ := elf.ST_BIND(s.Info), elf.ST_TYPE(s.Info)
	e := entry{
		Symbol: Symbol{Name: s.Name, Addr: s.Value, Size: s.Size},
		global: bind == elf.STB_GLOBAL || bind == elf.STB_WEAK || bind == stbGNUUnique,
		fn:     typ == elf.STT_FUNC || typ == elf.STT_GNU_IFUNC,
		dyn:    dyn,
	}
	if i := strings.Index(s.Name, "@"); i > 0 {
		// A versioned name written into .symtab by the assembler (.symver).
		e.ver = verHidden
		if strings.HasPrefix(s.Name[i:], "@@") {
			e.ver = verDefault
		}
	}
	var c byte
	switch {
	case typ == elf.STT_GNU_IFUNC:
		c = 'i'
	case bind == elf.STB_WEAK && typ == elf.STT_OBJECT:
		c = 'V'
	case bind == elf.STB_WEAK:
		c = 'W'
	case bind == stbGNUUnique:
		c = 'u'
	case s.Section == elf.SHN_ABS:
		c = 'a'
	case s.Section == elf.SHN_COMMON:
		c = 'c'
	case int(s.Section) < len(ef.Sections):
		c = sectionLetter(ef.Sections[s.Section])
	default:
		c = '?'
	}
	if bind == elf.STB_GLOBAL && 'a' <= c && c <= 'z' && c != 'i' && c != 'u' {
		c -= 'a' - 'A'
	}
	e.Kind = c
	return e
}

// sectionLetter is binutils' decode_section_type for ELF sections: code,
// then loaded data (read-only or not), then no contents, then debugging.
func sectionLetter(s *elf.Section) byte {
	switch {
	case s.Flags&elf.SHF_EXECINSTR != 0:
		return 't'
	case s.Flags&elf.SHF_ALLOC != 0 && s.Type != elf.SHT_NOBITS:
		if s.Flags&elf.SHF_WRITE == 0 {
			return 'r'
		}
		return 'd'
	case s.Type == elf.SHT_NOBITS:
		return 'b'
	case strings.HasPrefix(s.Name, ".debug") || strings.HasPrefix(s.Name, ".zdebug") || strings.HasPrefix(s.Name, ".stab"):
		return 'N'
	case s.Flags&elf.SHF_WRITE == 0:
		return 'n'
	}
	return '?'
}

// buildID returns the NT_GNU_BUILD_ID note from any SHT_NOTE section (the
// kernel keeps it in ".notes"), or from a PT_NOTE segment.
func buildID(ef *elf.File) []byte {
	for _, s := range ef.Sections {
		if s.Type != elf.SHT_NOTE {
			continue
		}
		if b, err := s.Data(); err == nil {
			if id := findBuildID(b, ef.ByteOrder); id != nil {
				return id
			}
		}
	}
	for _, p := range ef.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > 1<<20 {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err == nil {
			if id := findBuildID(b, ef.ByteOrder); id != nil {
				return id
			}
		}
	}
	return nil
}

// maxNotes bounds a notes file (the kernel's /sys/kernel/notes is a few
// hundred bytes).
const maxNotes = 64 << 10

// NotesBuildID returns the GNU build ID (NT_GNU_BUILD_ID) among the
// little-endian ELF notes b, as /sys/kernel/notes, a module's
// /sys/module/NAME/notes/.note.gnu.build-id and a kernel's .notes section
// in memory hold them; nil if there is none.
func NotesBuildID(b []byte) []byte { return findBuildID(b, binary.LittleEndian) }

// findBuildID walks ELF notes: namesz, descsz, type, name and desc, each of
// the last two padded to 4 bytes.
func findBuildID(b []byte, bo binary.ByteOrder) []byte {
	for len(b) >= 12 {
		namesz, descsz, typ := uint64(bo.Uint32(b)), uint64(bo.Uint32(b[4:])), bo.Uint32(b[8:])
		b = b[12:]
		nameEnd := (namesz + 3) &^ 3
		descEnd := nameEnd + (descsz+3)&^3
		if nameEnd > uint64(len(b)) || descEnd > uint64(len(b)) {
			return nil
		}
		name := b[:namesz]
		if typ == ntGNUBuildID && bytes.Equal(bytes.TrimRight(name, "\x00"), []byte("GNU")) && descsz > 0 {
			return bytes.Clone(b[nameEnd : nameEnd+descsz])
		}
		b = b[descEnd:]
	}
	return nil
}
