// Package entries finds, in an ELF file, every address where code may be
// entered other than by falling through from the instruction before it:
// the targets of the direct branches of all its code, the symbols, the
// starts of unwind-table entries, the landing pads exception handling
// jumps to, and the entries of the jump tables it can find.
//
// A jump pad's 5-byte jump covers more than the probed instruction when
// that is shorter; a thread that enters the covered bytes past their first
// byte runs the middle of the jump (docs/engine.md, "Never harm the
// target"). x86.PlanJump checks the probed function's own
// branches; this package checks the rest of the file, once per file.
package entries

import (
	"cmp"
	"debug/elf"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"golang.org/x/arch/x86/x86asm"

	"github.com/gprobes/gprobes/x86"
)

// Kind says how code may be entered at an address.
type Kind uint8

const (
	KindBranch     Kind = iota + 1 // a direct jmp, jcc, call, loop or jrcxz, or xbegin's abort address
	KindSymbol                     // a symbol's address (any code may call or jump there)
	KindUnwind                     // the start of a range of the unwind table (.eh_frame): a function or a part of one
	KindLandingPad                 // an exception landing pad (.gcc_except_table): the unwinder jumps there
	KindJumpTable                  // an entry of a jump table found next to an indirect jump
)

// Entry is one address where code may be entered, and from where.
type Entry struct {
	To   uint64
	From uint64 // the branch, the jump table's indirect jump, the landing pad's call; 0 for symbols and unwind entries
	Kind Kind
	Name string // a symbol's name (Inside fills it)
}

// entry is an Entry as a Set keeps it.
type entry struct {
	to, from uint64
	kind     Kind
}

// Describe says what enters at e.To, with the file's addresses moved by
// bias (where the file is loaded); name, if not nil, names a link-time
// address ("c_func.cold+4"), or returns "".
func (e Entry) Describe(bias uint64, name func(uint64) string) string {
	to := e.To + bias
	from := fmt.Sprintf("%#x", e.From+bias)
	if name != nil {
		if n := name(e.From); n != "" {
			from += " (" + n + ")"
		}
	}
	switch e.Kind {
	case KindBranch:
		return fmt.Sprintf("a branch at %s lands inside the covered bytes (at %#x)", from, to)
	case KindSymbol:
		return fmt.Sprintf("symbol %s starts inside the covered bytes (at %#x)", e.Name, to)
	case KindUnwind:
		return fmt.Sprintf("an unwind-table entry (a function or a part of one) starts inside the covered bytes (at %#x)", to)
	case KindLandingPad:
		return fmt.Sprintf("an exception landing pad (of the call at %s) is inside the covered bytes (at %#x)", from, to)
	case KindJumpTable:
		return fmt.Sprintf("a jump table of the indirect jump at %s has an entry inside the covered bytes (at %#x)", from, to)
	}
	return fmt.Sprintf("code may be entered inside the covered bytes (at %#x)", to)
}

// Set is every entry of a file, by address (the file's link-time
// addresses).
type Set struct {
	entries []entry // sorted by to, kind, from
	names   map[uint64]string
	Stats   Stats
}

// Stats says what a scan did.
type Stats struct {
	CodeBytes    int // bytes of executable sections
	Decoded      int // bytes decoded as instructions
	Skipped      int // bytes that did not decode
	Branches     int
	Symbols      int
	Unwind       int // unwind-table ranges
	LandingPads  int
	JumpTables   int // indirect jumps with a table found
	TableEntries int
	Took         time.Duration
}

// Inside returns an entry whose address is in [lo, hi) (link-time
// addresses), the lowest one.
func (s *Set) Inside(lo, hi uint64) (Entry, bool) {
	i := sort.Search(len(s.entries), func(i int) bool { return s.entries[i].to >= lo })
	if i < len(s.entries) && s.entries[i].to < hi {
		return s.All(s.entries[i].to, s.entries[i].to+1)[0], true
	}
	return Entry{}, false
}

// All returns every entry in [lo, hi), by address.
func (s *Set) All(lo, hi uint64) []Entry {
	var out []Entry
	i := sort.Search(len(s.entries), func(i int) bool { return s.entries[i].to >= lo })
	for ; i < len(s.entries) && s.entries[i].to < hi; i++ {
		e := s.entries[i]
		x := Entry{To: e.to, From: e.from, Kind: e.kind}
		if e.kind == KindSymbol {
			x.Name = s.names[e.to]
		}
		out = append(out, x)
	}
	return out
}

// Len is the number of entries (an address entered several ways counts
// once per way).
func (s *Set) Len() int { return len(s.entries) }

// Open scans the ELF file at path.
func Open(path string) (*Set, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Scan(f)
}

// Scan finds every entry of an x86-64 ELF file.
func Scan(f *elf.File) (*Set, error) {
	t0 := time.Now()
	if f.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("not an x86-64 file (%v)", f.Machine)
	}
	s := &Set{names: map[uint64]string{}}
	img := newImage(f)
	var code []*elf.Section
	for _, sec := range f.Sections {
		if sec.Type == elf.SHT_PROGBITS && sec.Flags&elf.SHF_EXECINSTR != 0 && sec.Flags&elf.SHF_ALLOC != 0 && sec.Size > 0 {
			code = append(code, sec)
		}
	}
	type span struct{ lo, hi uint64 }
	var spans []span
	if len(code) == 0 {
		// no section headers (stripped hard): the executable segments
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Filesz > 0 {
				spans = append(spans, span{p.Vaddr, p.Vaddr + p.Filesz})
			}
		}
		if len(spans) == 0 {
			return nil, errors.New("no executable section or segment")
		}
	} else {
		for _, sec := range code {
			spans = append(spans, span{sec.Addr, sec.Addr + sec.Size})
		}
	}
	inCode := func(a uint64) bool {
		for _, sp := range spans {
			if a >= sp.lo && a < sp.hi {
				return true
			}
		}
		return false
	}

	// symbols: every one in the code (any of them may be called or
	// jumped to from elsewhere), and the sync points of the decoding
	var syncs []uint64
	for _, get := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		syms, err := get()
		if err != nil {
			continue // no such table
		}
		for _, sym := range syms {
			switch elf.ST_TYPE(sym.Info) {
			case elf.STT_SECTION, elf.STT_FILE, elf.STT_TLS:
				continue
			}
			if sym.Section == elf.SHN_UNDEF || sym.Value == 0 || !inCode(sym.Value) {
				continue
			}
			s.entries = append(s.entries, entry{to: sym.Value, kind: KindSymbol})
			if _, ok := s.names[sym.Value]; !ok {
				s.names[sym.Value] = sym.Name
			}
			s.Stats.Symbols++
			syncs = append(syncs, sym.Value)
		}
	}

	// the unwind table: the start of each range (sync points too), and
	// the landing pads of their exception tables
	eh, err := readEHFrame(f, img)
	if err != nil {
		return nil, fmt.Errorf("read .eh_frame: %w", err)
	}
	for _, fde := range eh {
		if !inCode(fde.begin) {
			continue
		}
		s.entries = append(s.entries, entry{to: fde.begin, kind: KindUnwind})
		s.Stats.Unwind++
		syncs = append(syncs, fde.begin)
		if fde.lsda == 0 {
			continue
		}
		pads, err := landingPads(img, fde)
		if err != nil {
			return nil, fmt.Errorf("read the exception table at %#x (of the code at %#x): %w", fde.lsda, fde.begin, err)
		}
		for _, p := range pads {
			s.entries = append(s.entries, entry{to: p.pad, from: p.call, kind: KindLandingPad})
			s.Stats.LandingPads++
		}
	}
	slices.Sort(syncs)
	syncs = slices.Compact(syncs)

	// every direct branch of the code, and the jump tables found
	for _, sp := range spans {
		b, ok := img.read(sp.lo, sp.hi-sp.lo)
		if !ok {
			return nil, fmt.Errorf("read the code at %#x (%d bytes)", sp.lo, sp.hi-sp.lo)
		}
		s.Stats.CodeBytes += len(b)
		cs := x86.ScanCode(b, sp.lo, 64, syncs)
		s.Stats.Decoded += cs.Decoded
		s.Stats.Skipped += cs.Skipped
		for _, br := range cs.Branches {
			s.entries = append(s.entries, entry{to: br.To, from: br.From, kind: KindBranch})
		}
		s.Stats.Branches += len(cs.Branches)
		for _, ij := range cs.Indirect {
			tos := jumpTable(img, ij, inCode)
			if len(tos) > 0 {
				s.Stats.JumpTables++
				s.Stats.TableEntries += len(tos)
			}
			for _, to := range tos {
				s.entries = append(s.entries, entry{to: to, from: ij.At, kind: KindJumpTable})
			}
		}
	}
	s.sort()
	s.Stats.Took = time.Since(t0)
	return s, nil
}

// New is a set of the given entries, from somewhere other than an ELF
// file's scan (a target that knows its code's entries another way, the
// engine's fake target).
func New(list []Entry) *Set {
	s := &Set{names: map[uint64]string{}}
	for _, e := range list {
		s.entries = append(s.entries, entry{to: e.To, from: e.From, kind: e.Kind})
		if e.Kind == KindSymbol && e.Name != "" {
			s.names[e.To] = e.Name
		}
	}
	s.sort()
	return s
}

func (s *Set) sort() {
	slices.SortFunc(s.entries, func(a, b entry) int {
		if c := cmp.Compare(a.to, b.to); c != 0 {
			return c
		}
		if c := cmp.Compare(a.kind, b.kind); c != 0 {
			return c
		}
		return cmp.Compare(a.from, b.from)
	})
	s.entries = slices.Compact(s.entries)
}

// jumpTable finds the table of an indirect jump from the instructions
// before it: gcc's and clang's position-independent form (`lea T(%rip),
// %rX; movslq (%rX,%rI,4),%rY; add %rX,%rY; jmp *%rY`: 32-bit offsets
// from T) and the absolute one (`jmp *T(,%rI,8)`, or a load of
// `T(,%rI,8)` before `jmp *%reg`). The table's length is not known: its
// entries are read while they land in the code (at most maxTable), which
// may take a few words after the table too: more entries, never fewer.
func jumpTable(img *image, ij x86.IndirectJump, inCode func(uint64) bool) []uint64 {
	var out []uint64
	seen := map[uint64]bool{}
	try := func(table uint64, rel bool) {
		if seen[table] {
			return
		}
		seen[table] = true
		for i := uint64(0); i < maxTable; i++ {
			var to uint64
			if rel {
				b, ok := img.read(table+4*i, 4)
				if !ok {
					return
				}
				to = table + uint64(int64(int32(uint32(b[0])|uint32(b[1])<<8|uint32(b[2])<<16|uint32(b[3])<<24)))
			} else {
				b, ok := img.read(table+8*i, 8)
				if !ok {
					return
				}
				for k := 7; k >= 0; k-- {
					to = to<<8 | uint64(b[k])
				}
			}
			if !inCode(to) {
				return
			}
			out = append(out, to)
		}
	}
	for _, at := range append(append([]uint64(nil), ij.Before...), ij.At) {
		b, ok := img.read(at, 15)
		if !ok {
			b, ok = img.readUpTo(at, 15)
			if !ok {
				continue
			}
		}
		in, err := x86.Decode(b, at, 64)
		if err != nil || !in.Known() {
			continue
		}
		for _, a := range in.Inst.Args {
			m, ok := a.(x86asm.Mem)
			if !ok {
				continue
			}
			switch {
			case m.Base == x86asm.RIP && m.Index == 0 && in.Inst.Op == x86asm.LEA:
				try(at+uint64(in.Len)+uint64(m.Disp), true)
			case m.Base == 0 && m.Index != 0 && m.Scale == 8 && m.Disp > 0:
				try(uint64(m.Disp), false)
			}
		}
	}
	return out
}

// maxTable bounds the entries read from one jump table.
const maxTable = 1 << 16
