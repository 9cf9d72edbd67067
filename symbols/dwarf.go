package symbols

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/go-delve/delve/pkg/dwarf/line"
)

// dwarfInfo is the DWARF of one ELF file, read on the first query that needs
// it. debug/elf decompresses SHF_COMPRESSED (zlib, zstd) and .zdebug_*
// sections and applies the relocations of ET_REL objects; debug/dwarf reads
// versions 2 to 5. Line tables are parsed per compile unit with delve's
// pkg/dwarf/line, types are indexed per compile unit as lookups need them.
type dwarfInfo struct {
	data         *dwarf.Data
	reader       *dwarf.Reader // shared; the Table's mutex serialises its use
	units        []*unitInfo   // compile, partial and type units, in file order
	debugLine    []byte
	debugLineStr []byte
	ptrSize      int

	typeUnits  bool // types in .debug_types (-fdebug-types-section): not searched
	splitDWARF bool // skeleton units whose types are in .dwo files: not read

	linesParsed bool
	badLines    int // units whose line table could not be parsed

	types typeIndex
}

// unitInfo is one unit of .debug_info.
type unitInfo struct {
	off      dwarf.Offset // the unit's root entry
	tag      dwarf.Tag
	name     string
	compDir  string
	stmtList int64 // offset in .debug_line, -1 when the unit has none
	addrSize int

	lines     *line.DebugLineInfo // parsed by parseLines
	files     []fileName          // the line table's file entries
	codeLines map[string][]int    // file path -> sorted lines with is_stmt code
}

// attrGNUDwoName is DW_AT_GNU_dwo_name, the pre-DWARF 5 split-DWARF link.
const attrGNUDwoName = dwarf.Attr(0x2130)

// fileName is a line-table file entry: as delve's parser spells it (the key
// of its lookups), and cleaned and made absolute with the unit's compilation
// directory (DWARF 5 directory entries may be relative to it).
type fileName struct {
	raw  string
	norm string
}

// normPath cleans a line-table path and joins a relative one to compDir.
func normPath(p, compDir string) string {
	if !path.IsAbs(p) && compDir != "" {
		return path.Join(compDir, p)
	}
	return path.Clean(p)
}

// loadDWARF reads the DWARF of t, once. The caller holds t.mu. The file is
// opened again by path (Open keeps no descriptor) and must still be the file
// that was opened: same size and build ID.
func (t *Table) loadDWARF() (*dwarfInfo, error) {
	if t.dw != nil || t.dwErr != nil {
		return t.dw, t.dwErr
	}
	t.dw, t.dwErr = readDWARF(t)
	if t.dwErr != nil {
		t.dwErr = fmt.Errorf("read DWARF of %s: %w", t.path, t.dwErr)
	}
	return t.dw, t.dwErr
}

func readDWARF(t *Table) (*dwarfInfo, error) {
	f, err := os.Open(t.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() != t.fileSize {
		return nil, ErrChanged
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, err
	}
	if id := buildID(ef); !bytes.Equal(id, t.buildID) {
		return nil, ErrChanged
	}
	dw := &dwarfInfo{ptrSize: t.ptrSize}
	if ef.Type == elf.ET_REL {
		// debug/elf applies the relocations a .o or .ko needs.
		if dw.data, err = ef.DWARF(); err != nil {
			return nil, err
		}
	} else if dw.data, err = readSections(ef, f, t.fileSize, dw); err != nil {
		return nil, err
	}
	data := dw.data
	dw.reader = data.Reader()
	if dw.debugLine == nil {
		dw.debugLine = sectionData(ef, "line")
		dw.debugLineStr = sectionData(ef, "line_str")
	}

	r := data.Reader()
	for {
		e, err := r.Next()
		if err != nil {
			return nil, fmt.Errorf("read units: %w", err)
		}
		if e == nil {
			break
		}
		u := &unitInfo{off: e.Offset, tag: e.Tag, stmtList: -1, addrSize: r.AddressSize()}
		u.name, _ = e.Val(dwarf.AttrName).(string)
		u.compDir, _ = e.Val(dwarf.AttrCompDir).(string)
		if v, ok := e.Val(dwarf.AttrStmtList).(int64); ok {
			u.stmtList = v
		}
		if e.Tag == dwarf.TagSkeletonUnit || e.Val(dwarf.AttrDwoName) != nil || e.Val(attrGNUDwoName) != nil {
			dw.splitDWARF = true
		}
		dw.units = append(dw.units, u)
		r.SkipChildren()
	}
	return dw, nil
}

// dwarfSections are the sections readSections loads: what type and line
// lookups use. Location lists, range lists, frames and macros, which can be
// most of a vmlinux's debug information, are left on disk.
var dwarfSections = []string{"abbrev", "info", "str", "line", "line_str", "str_offsets", "addr", "types"}

// readSections builds the dwarf.Data of a linked file from the sections
// lookups need, each read with one ReadAt into a buffer of its size
// (Section.Data grows its buffer step by step, which doubled the load time
// of a 100 MB .debug_info), or decompressed by debug/elf when compressed.
func readSections(ef *elf.File, f *os.File, fileSize int64, dw *dwarfInfo) (*dwarf.Data, error) {
	dat := map[string][]byte{}
	var types [][]byte
	for _, s := range ef.Sections {
		var name string
		switch {
		case strings.HasPrefix(s.Name, ".debug_"):
			name = s.Name[len(".debug_"):]
		case strings.HasPrefix(s.Name, ".zdebug_"):
			name = s.Name[len(".zdebug_"):]
		default:
			continue
		}
		if !slices.Contains(dwarfSections, name) || s.Type == elf.SHT_NOBITS {
			continue
		}
		var b []byte
		var err error
		if s.Flags&elf.SHF_COMPRESSED != 0 || strings.HasPrefix(s.Name, ".zdebug_") {
			b, err = s.Data()
		} else {
			if s.Offset > uint64(fileSize) || s.Size > uint64(fileSize)-s.Offset {
				return nil, fmt.Errorf("section %s runs past the end of the file", s.Name)
			}
			b = make([]byte, s.Size)
			_, err = f.ReadAt(b, int64(s.Offset))
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", s.Name, err)
		}
		if name == "types" {
			types = append(types, b)
			continue
		}
		dat[name] = b
	}
	d, err := dwarf.New(dat["abbrev"], nil, nil, dat["info"], dat["line"], nil, nil, dat["str"])
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"line_str", "str_offsets", "addr"} {
		if b := dat[name]; b != nil {
			if err := d.AddSection(".debug_"+name, b); err != nil {
				return nil, err
			}
		}
	}
	dw.typeUnits = len(types) > 0
	for i, b := range types {
		if err := d.AddTypes(fmt.Sprintf("types-%d", i), b); err != nil {
			return nil, err
		}
	}
	dw.debugLine, dw.debugLineStr = dat["line"], dat["line_str"]
	return d, nil
}

// sectionData returns the uncompressed .debug_NAME (or .zdebug_NAME)
// section, nil when absent.
func sectionData(ef *elf.File, name string) []byte {
	s := ef.Section(".debug_" + name)
	if s == nil {
		s = ef.Section(".zdebug_" + name)
	}
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil
	}
	b, err := s.Data()
	if err != nil {
		return nil
	}
	return b
}

// dwarfTables returns the tables of s that can answer DWARF queries.
func (s *Set) dwarfTables() []*Table {
	var ts []*Table
	for _, t := range s.tables {
		if t.hasDWARF {
			ts = append(ts, t)
		}
	}
	return ts
}

// dwarfSources names the files a DWARF query searched.
func dwarfSources(ts []*Table) []string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.path
	}
	return names
}
