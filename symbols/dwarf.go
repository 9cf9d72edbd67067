package symbols

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"fmt"
	"os"
	"path"

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
	data, err := ef.DWARF()
	if err != nil {
		return nil, err
	}
	dw := &dwarfInfo{data: data, reader: data.Reader(), ptrSize: t.ptrSize}
	dw.debugLine = sectionData(ef, "line")
	dw.debugLineStr = sectionData(ef, "line_str")

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
		dw.units = append(dw.units, u)
		r.SkipChildren()
	}
	return dw, nil
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
