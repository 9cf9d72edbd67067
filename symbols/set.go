package symbols

import (
	"cmp"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Set combines several tables (a repeatable --symbols flag). Lookups search
// all of them. A Set is safe for concurrent lookups; Add must not run
// concurrently with anything else.
type Set struct {
	tables []*Table
}

// NewSet returns a set of the given tables, searched in that order.
func NewSet(tables ...*Table) *Set {
	s := &Set{}
	for _, t := range tables {
		s.Add(t)
	}
	return s
}

// Add appends a table; nil is ignored.
func (s *Set) Add(t *Table) {
	if t != nil {
		s.tables = append(s.tables, t)
		s.splitBases()
	}
}

// splitBases gives each kernel module (.ko) with BTF the base its split
// BTF needs: the first table of the set with a kernel's BTF, a vmlinux
// (an ELF executable with .BTF) or /sys/kernel/btf/vmlinux's raw BTF.
func (s *Set) splitBases() {
	base := ""
	for _, t := range s.tables {
		if t.hasBTF && !t.relocatable && (t.format == FormatELF || filepath.Base(t.path) == "vmlinux") {
			base = t.path
			break
		}
	}
	for _, t := range s.tables {
		if t.relocatable && t.hasBTF {
			t.mu.Lock()
			if t.btfBase != base {
				t.btfBase, t.bt, t.btErr = base, nil, nil
			}
			t.mu.Unlock()
		}
	}
}

// Tables returns the tables in the order they were added.
func (s *Set) Tables() []*Table { return slices.Clone(s.tables) }

// Files returns every file read, in order, for make dependency output.
func (s *Set) Files() []string {
	files := make([]string, len(s.tables))
	for i, t := range s.tables {
		files[i] = t.path
	}
	return files
}

// BuildID returns the first non-nil build ID of the set's tables.
func (s *Set) BuildID() []byte {
	for _, t := range s.tables {
		if t.buildID != nil {
			return t.buildID
		}
	}
	return nil
}

// sourced is a definition and the table it came from.
type sourced struct {
	entry
	t *Table
}

// Lookup resolves a symbol name to one address.
//
// The name must match exactly; a versioned name ("malloc@@GLIBC_2.2.5") also
// answers to its bare name, the default version (@@) before hidden ones (@).
// Within an ELF file .symtab definitions hide .dynsym ones. When the name is
// defined at several different addresses, the one global definition (STB_GLOBAL
// or STB_WEAK; an uppercase letter in a map) wins; with none or several global
// the result is an *AmbiguousError. The same address defined several times is
// not ambiguous. An unknown name is a *NotFoundError with close names.
//
// Addresses are the values in the file: link-time addresses for PIE
// executables and shared libraries, to which the caller adds the load bias.
func (s *Set) Lookup(name string) (Symbol, error) {
	return s.lookup(name, "", false)
}

// LookupModule is Lookup restricted to one kernel module of a kallsyms file;
// module "" (or "vmlinux", "kernel") means the main image and every ELF file.
func (s *Set) LookupModule(module, name string) (Symbol, error) {
	if module == "vmlinux" || module == "kernel" {
		module = ""
	}
	return s.lookup(name, module, true)
}

func (s *Set) lookup(name, module string, byModule bool) (Symbol, error) {
	var defs []sourced
	for _, t := range s.tables {
		for _, e := range t.candidates(name) {
			if byModule && e.Module != module {
				continue
			}
			defs = append(defs, sourced{e, t})
		}
	}
	if len(defs) == 0 {
		return Symbol{}, s.notFound(name, module, byModule)
	}
	if best, ok := oneAddress(defs); ok {
		return best.Symbol, nil
	}
	var globals []sourced
	for _, d := range defs {
		if d.global {
			globals = append(globals, d)
		}
	}
	if best, ok := oneAddress(globals); ok {
		return best.Symbol, nil
	}
	// Ambiguous: list each distinct address once, with its best definition.
	slices.SortStableFunc(defs, func(a, b sourced) int { return cmp.Compare(a.Addr, b.Addr) })
	e := &AmbiguousError{What: "symbol", Name: name}
	for i := 0; i < len(defs); {
		j := i
		for j < len(defs) && defs[j].Addr == defs[i].Addr {
			j++
		}
		d := bestOf(defs[i:j])
		e.Choices = append(e.Choices, Choice{Name: d.Name, Addr: d.Addr, Kind: d.Kind, Module: d.Module, Source: d.t.path})
		i = j
	}
	return Symbol{}, e
}

// oneAddress returns the best definition when all of defs share one address.
func oneAddress(defs []sourced) (sourced, bool) {
	if len(defs) == 0 {
		return sourced{}, false
	}
	for _, d := range defs[1:] {
		if d.Addr != defs[0].Addr {
			return sourced{}, false
		}
	}
	return bestOf(defs), true
}

// bestOf picks among definitions of one address: one with a size, then
// global, then not from .dynsym, then the earliest table and position.
func bestOf(defs []sourced) sourced {
	best := defs[0]
	for _, d := range defs[1:] {
		if rank(d.entry) > rank(best.entry) {
			best = d
		}
	}
	return best
}

func rank(e entry) int {
	r := 0
	if e.Size > 0 {
		r += 8
	}
	if e.global {
		r += 4
	}
	if e.fn {
		r += 2
	}
	if !e.dyn {
		r++
	}
	return r
}

// notFound builds the NotFoundError for name, with suggestions from every
// table.
func (s *Set) notFound(name, module string, byModule bool) error {
	e := &NotFoundError{What: "symbol", Name: name, Sources: s.Files()}
	sg := newSuggester(name, false)
	var reloc []string
	for _, t := range s.tables {
		for i := range t.syms {
			sg.add(t.syms[i].Name)
			if t.syms[i].ver != verNone {
				sg.add(bareName(t.syms[i].Name))
			}
		}
		for n := range t.reloc {
			sg.add(n)
		}
		if t.reloc[name] {
			reloc = append(reloc, t.path)
		}
	}
	e.Suggestions = sg.names()
	var typeOnly []string // files with types and no symbols: raw BTF, a vmlinux with only .BTF
	nsyms := 0
	for _, t := range s.tables {
		nsyms += len(t.syms)
		if len(t.syms) == 0 && t.hasBTF && !t.relocatable {
			typeOnly = append(typeOnly, t.path)
		}
	}
	e.NotLinked = len(reloc) > 0
	switch {
	case nsyms == 0 && len(typeOnly) > 0 && len(reloc) == 0:
		e.Hint = strings.Join(typeOnly, ", ") + " carries types (BTF) but no symbols: add a System.map, a copy of /proc/kallsyms or a vmlinux with a symbol table"
	case len(reloc) > 0:
		e.Hint = strings.Join(reloc, ", ") + " defines it, but a relocatable object (.o, .ko) has no addresses until it is loaded: pass a copy of /proc/kallsyms taken while it is loaded, or the linked binary"
	case byModule && module != "":
		e.Hint = "searched module [" + module + "] only"
	}
	return e
}

// Nearest is the reverse lookup: the symbol at or preceding addr (the last
// one whose address is not above addr), and addr's offset from it. Absolute
// ('A'), debugging ('N') and undefined symbols are not considered. Among
// tables, the closest symbol wins: the reverse lookups take the files of a
// set to share one address space (vmlinux, its System.map, kallsyms with
// modules). A program and its shared libraries have overlapping link-time
// addresses; ask a Set of the one file.
func (s *Set) Nearest(addr uint64) (sym Symbol, off uint64, ok bool) {
	var best sourced
	found := false
	for _, t := range s.tables {
		t.sortIndex()
		idx := t.byAddr
		i := sort.Search(len(idx), func(i int) bool { return t.syms[idx[i]].Addr > addr }) - 1
		if i < 0 {
			continue
		}
		a := t.syms[idx[i]].Addr
		for j := i; j >= 0 && t.syms[idx[j]].Addr == a; j-- {
			e := sourced{t.syms[idx[j]], t}
			if !found || e.Addr > best.Addr || e.Addr == best.Addr && rank(e.entry) > rank(best.entry) {
				best, found = e, true
			}
		}
	}
	if !found {
		return Symbol{}, 0, false
	}
	return best.Symbol, addr - best.Addr, true
}

// symbolAtScan bounds how many earlier functions SymbolAt examines for one
// that contains addr when the closest one ends before it.
const symbolAtScan = 64

// SymbolAt returns the function whose [Addr, Addr+Size) contains addr (ELF
// function symbols carry a size), or, for sources without sizes, the
// preceding text symbol; used to find the function enclosing a probe
// address. An address in the padding after a sized function has none.
func (s *Set) SymbolAt(addr uint64) (Symbol, bool) {
	var (
		exact, guess   sourced
		haveExact      bool
		haveGuess      bool
		lastSizedStart uint64 // highest start of a sized function at or below addr
		haveSized      bool
	)
	for _, t := range s.tables {
		t.sortIndex()
		idx := t.fns
		i := sort.Search(len(idx), func(i int) bool { return t.syms[idx[i]].Addr > addr }) - 1
		for j, n := i, 0; j >= 0 && n < symbolAtScan; j, n = j-1, n+1 {
			e := sourced{t.syms[idx[j]], t}
			if e.Size == 0 {
				if j == i || e.Addr == t.syms[idx[i]].Addr {
					if !haveGuess || e.Addr > guess.Addr || e.Addr == guess.Addr && rank(e.entry) > rank(guess.entry) {
						guess, haveGuess = e, true
					}
				}
				continue
			}
			if !haveSized || e.Addr > lastSizedStart {
				lastSizedStart, haveSized = e.Addr, true
			}
			if addr-e.Addr < e.Size {
				if !haveExact || e.Addr > exact.Addr || e.Addr == exact.Addr && rank(e.entry) > rank(exact.entry) {
					exact, haveExact = e, true
				}
			}
		}
	}
	switch {
	case haveExact:
		return exact.Symbol, true
	case haveGuess && (!haveSized || guess.Addr > lastSizedStart):
		return guess.Symbol, true
	}
	return Symbol{}, false
}
