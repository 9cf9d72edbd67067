package symbols

import (
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
)

// Symbol is one named address from a symbol source.
type Symbol struct {
	Name string
	// Addr is the value the file gives: for ET_DYN objects (PIE executables,
	// shared libraries) the link-time address, without the load bias.
	Addr   uint64
	Size   uint64 // 0 when the source does not say (System.map, kallsyms)
	Kind   byte   // nm-style type letter: 'T' 't' 'D' 'd' 'B' 'b' 'R' 'r' 'W' 'w' 'A' 'i' (IFUNC) ...; uppercase = global
	Module string // kernel module name from a kallsyms "[mod]" suffix; "" for the main image
}

// entry is a Symbol with the facts the lookup rules need.
type entry struct {
	Symbol
	global bool  // STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE, or an uppercase map letter
	fn     bool  // a function: STT_FUNC / STT_GNU_IFUNC, or a text letter in a map
	dyn    bool  // from .dynsym
	ver    uint8 // verNone, verDefault ("name@@V"), verHidden ("name@V")
}

const (
	verNone = iota
	verDefault
	verHidden
)

// Formats returned by Table.Format.
const (
	FormatELF       = "elf"
	FormatSystemMap = "system.map"
	FormatKallsyms  = "kallsyms"
	FormatBTF       = "btf"   // raw BTF, as in /sys/kernel/btf/vmlinux: types, no symbols
	FormatNotes     = "notes" // ELF notes, as in /sys/kernel/notes: a build ID, no symbols
)

// Table holds what one file says: symbols, and for ELF files with DWARF, line
// tables and types; types from BTF (a raw BTF file, or the .BTF section of an
// ELF file without DWARF). A Table is safe for concurrent use; the DWARF and
// the BTF are read on the first query that needs them, and whatever is
// parsed is kept.
type Table struct {
	path    string
	format  string
	buildID []byte

	// ELF facts.
	relocatable bool   // ET_REL: symbol values are section offsets, not addresses
	btfBase     string // a .ko's split BTF is on this file's (Set.splitBases)
	ptrSize     int    // 4 or 8; 0 for text formats
	fileSize    int64  // checked when the file is opened again for DWARF
	hasDWARF    bool
	hasBTF      bool  // a raw BTF file, or an ELF file with a .BTF section
	btfOff      int64 // where the BTF is in the file
	btfLen      int64
	raw         []byte // the BTF of a table made from memory (NewBTF): no file to read again

	syms  []entry
	names nameIndex
	reloc map[string]bool // names defined in a relocatable object, which has no addresses

	mu     sync.Mutex
	byAddr []int32 // indices of addressable symbols, sorted by address; built lazily
	fns    []int32 // indices of function symbols, sorted by address; built lazily
	sorted bool
	dw     *dwarfInfo // loaded on first DWARF query
	dwErr  error
	bt     *btfInfo // loaded on first BTF query
	btErr  error
}

// Open reads a symbol source, recognising the format from the content, not
// the file name: an ELF file (.symtab, .dynsym, .note.gnu.build-id, DWARF and
// .BTF if present), a System.map, a copy of /proc/kallsyms (the same "ADDR
// TYPE NAME [module]" text; tabs or spaces), or raw BTF (magic 0xEB9F, what
// /sys/kernel/btf/vmlinux holds: types, no symbols), or ELF notes with a
// GNU build ID (a copy of /sys/kernel/notes or of a module's
// /sys/module/NAME/notes/.note.gnu.build-id: the build ID, no symbols).
// Anything else is an error wrapping ErrUnknownFormat.
//
// Addresses are the values in the file: for ET_DYN objects (PIE executables
// and shared libraries) they are link-time addresses, and the caller adds the
// load bias. Relocatable objects (.o, .ko) contribute types only.
func Open(path string) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open symbols: %w", err)
	}
	defer f.Close()
	var magic [4]byte
	n, _ := io.ReadFull(f, magic[:])
	if n == 4 && string(magic[:]) == "\x7fELF" {
		return openELF(path, f)
	}
	if n == 4 && isBTF(magic[:]) && magic[2] == 1 {
		head := make([]byte, btfHeaderLen)
		m, _ := f.ReadAt(head, 0)
		return openBTF(path, f, head[:m])
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	var size int64
	if st, err := f.Stat(); err == nil {
		size = st.Size()
	}
	if n == 4 && size <= maxNotes && magic[1] == 0 && magic[2] == 0 && magic[3] == 0 {
		// a note's name size, a small little-endian u32: text never
		// starts with three NULs
		b, err := io.ReadAll(io.LimitReader(f, maxNotes))
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
		if id := NotesBuildID(b); id != nil {
			return &Table{path: path, format: FormatNotes, buildID: id}, nil
		}
		return nil, fmt.Errorf("open %s: %w: ELF notes without a GNU build ID", path, ErrUnknownFormat)
	}
	return parseMap(path, f, size)
}

// Path is the file name the table was opened with.
func (t *Table) Path() string { return t.path }

// Format is FormatELF, FormatSystemMap, FormatKallsyms or FormatBTF. System.map and
// kallsyms parse the same way; a file is called kallsyms when a line carries
// a "[module]" suffix or every address is zero.
func (t *Table) Format() string { return t.format }

// Relocatable reports whether the table is a relocatable object (a .o, a
// kernel module's .ko): its symbols have no addresses until it is loaded.
func (t *Table) Relocatable() bool { return t.relocatable }

// BuildID is the ELF build ID (the NT_GNU_BUILD_ID note), nil if none.
func (t *Table) BuildID() []byte { return t.buildID }

// HasDWARF reports whether the file has a .debug_info section. The DWARF
// itself is read on the first query that needs it.
func (t *Table) HasDWARF() bool { return t.hasDWARF }

// HasBTF reports whether the file carries BTF: a raw BTF file, or an ELF
// file with a .BTF section. Type queries use it when the file has no DWARF
// (HasDWARF). It is parsed on the first query that needs it.
func (t *Table) HasBTF() bool { return t.hasBTF }

// Len is the number of symbol definitions the table holds.
func (t *Table) Len() int { return len(t.syms) }

// newTable returns an empty table sized for about n symbols.
func newTable(path, format string, n int) *Table {
	return &Table{path: path, format: format, syms: make([]entry, 0, n)}
}

// add appends a definition; names.build, run once after the last add, makes
// the definitions visible to lookups.
func (t *Table) add(e entry) {
	t.syms = append(t.syms, e)
}

// candidates returns the definitions name has in this table: exact names
// first; failing those, the default version of a versioned name; failing
// that, every hidden version. .symtab definitions hide .dynsym ones.
func (t *Table) candidates(name string) []entry {
	var exact, dflt, hidden []entry
	t.names.lookup(t.syms, name, func(i int32) {
		e := t.syms[i]
		switch {
		case e.Name == name:
			exact = append(exact, e)
		case e.ver == verDefault:
			dflt = append(dflt, e)
		default:
			hidden = append(hidden, e)
		}
	})
	pick := exact
	if len(pick) == 0 {
		pick = dflt
	}
	if len(pick) == 0 {
		pick = hidden
	}
	hasStatic := false
	for _, e := range pick {
		if !e.dyn {
			hasStatic = true
			break
		}
	}
	if hasStatic {
		pick = slices.DeleteFunc(pick, func(e entry) bool { return e.dyn })
	}
	return pick
}

// addressable reports whether a symbol names a place in the address space,
// which Nearest may answer with.
func addressable(k byte) bool {
	switch k {
	case 'a', 'A', 'N', 'n', 'U', '-', '?':
		return false
	}
	return true
}

// textKind reports whether an nm letter from a map names code.
func textKind(k byte) bool {
	switch k {
	case 't', 'T', 'w', 'W', 'i', 'I':
		return true
	}
	return false
}

// sortIndex builds the address-sorted views used by Nearest and SymbolAt.
func (t *Table) sortIndex() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sorted {
		return
	}
	t.sorted = true
	for i := range t.syms {
		e := &t.syms[i]
		if !addressable(e.Kind) {
			continue
		}
		t.byAddr = append(t.byAddr, int32(i))
		if e.fn {
			t.fns = append(t.fns, int32(i))
		}
	}
	cmp := func(a, b int32) int {
		x, y := t.syms[a].Addr, t.syms[b].Addr
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return int(a - b)
	}
	if !slices.IsSortedFunc(t.byAddr, cmp) {
		slices.SortFunc(t.byAddr, cmp)
	}
	if !slices.IsSortedFunc(t.fns, cmp) {
		slices.SortFunc(t.fns, cmp)
	}
}

// NewTable is a table of the given symbols, read by the caller from
// somewhere other than a file (a guest kernel module's kallsyms in guest
// memory); name stands for the file in messages. An uppercase kind is a
// global symbol, a text kind ('t', 'T', 'w', 'W') a function; a Size of
// 0 means unknown, as in a map.
func NewTable(name string, syms []Symbol) *Table {
	t := newTable(name, FormatKallsyms, len(syms))
	for _, s := range syms {
		k := s.Kind
		t.add(entry{Symbol: s, global: ('A' <= k && k <= 'Z') || k == 'u', fn: textKind(k)})
	}
	t.names.build(t.syms)
	return t
}
