package symbols

import (
	"bytes"
	"cmp"
	"debug/dwarf"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/go-delve/delve/pkg/dwarf/line"
)

// LineAddr resolves a source line "file:line" through the DWARF line tables.
//
// file matches a line-table path by suffix on path-component boundaries:
// "fs/open.c" matches "/build/linux/fs/open.c" but not "/build/linux/xfs/open.c";
// an absolute file must match exactly. Several different matching paths are
// an *AmbiguousError. Only is_stmt rows count. When the line has no code, the
// next line of that file that has code is used, and returned as actualLine
// (as gdb does). The addresses of the line are grouped by the function symbol
// that contains them; the lowest address of the one function is the answer,
// and code in more than one function (inlined or duplicated) is an
// *AmbiguousError listing each function and address. The address is not moved
// past a function's prologue: a function's opening line is its entry.
//
// Like symbol addresses, the result is a link-time address.
func (s *Set) LineAddr(file string, lineNo int) (addr uint64, actualLine int, err error) {
	where := fmt.Sprintf("%s:%d", file, lineNo)
	if lineNo <= 0 {
		return 0, 0, fmt.Errorf("find line %s: line numbers start at 1", where)
	}
	q := path.Clean(file)
	if file == "" || q == "." || q == "/" || strings.HasSuffix(file, "/") {
		return 0, 0, fmt.Errorf("find line %s: want a source file name such as fs/open.c", where)
	}
	tables := s.dwarfTables()
	if len(tables) == 0 {
		return 0, 0, fmt.Errorf("find line %s: %w", where, ErrNoDWARF)
	}

	// Match the file against every line table's file entries.
	type match struct {
		t   *Table
		u   *unitInfo
		raw string // the file as the unit's line table spells it
	}
	var (
		matches  []match
		paths    = map[string]bool{}
		badUnits int
		relocs   []string
	)
	for _, t := range tables {
		if t.relocatable {
			relocs = append(relocs, t.path)
			continue
		}
		t.mu.Lock()
		dw, err := t.loadDWARF()
		if err == nil {
			dw.parseLines()
			badUnits += dw.badLines
			for _, u := range dw.units {
				for _, fn := range u.files {
					if matchPath(fn.norm, q) {
						matches = append(matches, match{t, u, fn.raw})
						paths[fn.norm] = true
					}
				}
			}
		}
		t.mu.Unlock()
		if err != nil {
			return 0, 0, fmt.Errorf("find line %s: %w", where, err)
		}
	}
	switch len(paths) {
	case 0:
		return 0, 0, s.fileNotFound(file, q, tables, badUnits, relocs)
	case 1:
	default:
		e := &AmbiguousError{What: "source file", Name: file}
		for _, p := range slices.Sorted(maps.Keys(paths)) {
			e.Choices = append(e.Choices, Choice{Name: p})
		}
		return 0, 0, e
	}
	var fpath string
	for p := range paths {
		fpath = p
	}

	// The lines of this file that have code, from every unit that lists it.
	var code []int
	for _, m := range matches {
		m.t.mu.Lock()
		lines, err := m.t.dw.codeLines(m.u, fpath)
		m.t.mu.Unlock()
		if err != nil {
			return 0, 0, fmt.Errorf("find line %s: %w", where, err)
		}
		code = append(code, lines...)
	}
	slices.Sort(code)
	code = slices.Compact(code)
	i := sort.SearchInts(code, lineNo)
	if i == len(code) {
		if len(code) == 0 {
			return 0, 0, fmt.Errorf("find line %s: %w in %s: the file has no code in the line tables", where, ErrNoCode, fpath)
		}
		return 0, 0, fmt.Errorf("find line %s: %w in %s: its last line with code is %d", where, ErrNoCode, fpath, code[len(code)-1])
	}

	// The addresses of the first line, at or after lineNo, for which
	// delve's line table gives is_stmt rows.
	var pcs []uint64
	var owners []*Table
	for ; i < len(code) && len(pcs) == 0; i++ {
		actualLine = code[i]
		for _, m := range matches {
			m.t.mu.Lock()
			stmts, err := lineToPCs(m.u.lines, m.raw, actualLine)
			m.t.mu.Unlock()
			if err != nil {
				return 0, 0, fmt.Errorf("find line %s: %w", where, err)
			}
			for _, st := range stmts {
				if st.Stmt {
					pcs = append(pcs, st.PC)
					owners = append(owners, m.t)
				}
			}
		}
	}
	if len(pcs) == 0 {
		return 0, 0, fmt.Errorf("find line %s: %w in %s", where, ErrNoCode, fpath)
	}

	// Group by enclosing function; the lowest address of each.
	type group struct {
		fn    Symbol
		known bool
		addr  uint64
		src   string
	}
	var groups []group
	for k, pc := range pcs {
		// The function comes from the file that has the line, so that files
		// with overlapping link-time addresses (a PIE and a shared library)
		// do not mix; failing that, from any file (vmlinux with System.map).
		fn, ok := NewSet(owners[k]).SymbolAt(pc)
		if !ok {
			fn, ok = s.SymbolAt(pc)
		}
		found := false
		for g := range groups {
			if ok && groups[g].known && groups[g].fn.Addr == fn.Addr && groups[g].fn.Name == fn.Name {
				groups[g].addr = min(groups[g].addr, pc)
				found = true
				break
			}
			if !ok && !groups[g].known && groups[g].addr == pc {
				found = true
				break
			}
		}
		if !found {
			groups = append(groups, group{fn: fn, known: ok, addr: pc, src: owners[k].path})
		}
	}
	if len(groups) == 1 {
		return groups[0].addr, actualLine, nil
	}
	slices.SortFunc(groups, func(a, b group) int { return cmp.Compare(a.addr, b.addr) })
	e := &AmbiguousError{What: "line", Name: fmt.Sprintf("%s:%d", fpath, actualLine)}
	for _, g := range groups {
		c := Choice{Name: g.fn.Name, Addr: g.addr, Line: actualLine, Source: g.src, Kind: g.fn.Kind, Module: g.fn.Module}
		if g.known {
			c.Off = g.addr - g.fn.Addr
		} else {
			c.Name = "?"
		}
		e.Choices = append(e.Choices, c)
	}
	return 0, 0, e
}

// matchPath reports whether the line-table path p is the file q: equal, or,
// for a relative q, ending in "/"+q.
func matchPath(p, q string) bool {
	if p == q {
		return true
	}
	return !strings.HasPrefix(q, "/") && strings.HasSuffix(p, q) && p[len(p)-len(q)-1] == '/'
}

// fileNotFound suggests line-table paths whose last components are close to
// the query.
func (s *Set) fileNotFound(file, q string, tables []*Table, badUnits int, relocs []string) error {
	e := &NotFoundError{What: "source file", Name: file, Sources: dwarfSources(tables)}
	depth := strings.Count(q, "/") + 1
	sg := newSuggester(q, false)
	for _, t := range tables {
		t.mu.Lock()
		if t.dw != nil {
			for _, u := range t.dw.units {
				for _, fn := range u.files {
					sg.add(lastComponents(fn.norm, depth))
				}
			}
		}
		t.mu.Unlock()
	}
	e.Suggestions = sg.names()
	var hints []string
	if badUnits > 0 {
		hints = append(hints, fmt.Sprintf("%d line tables could not be parsed", badUnits))
	}
	if len(relocs) > 0 {
		hints = append(hints, "relocatable objects ("+strings.Join(relocs, ", ")+") have no line addresses until loaded")
	}
	e.Hint = strings.Join(hints, "; ")
	return e
}

// lastComponents returns the last n slash-separated components of p.
func lastComponents(p string, n int) string {
	i := len(p)
	for ; n > 0 && i > 0; n-- {
		i = strings.LastIndexByte(p[:i], '/')
		if i < 0 {
			return p
		}
	}
	return p[i+1:]
}

// parseLines parses the line table header of every compile unit with
// delve's line package, once. The caller holds the table's mutex.
func (dw *dwarfInfo) parseLines() {
	if dw.linesParsed {
		return
	}
	dw.linesParsed = true
	for _, u := range dw.units {
		if u.stmtList < 0 || u.tag == dwarf.TagTypeUnit {
			continue
		}
		if u.stmtList >= int64(len(dw.debugLine)) {
			dw.badLines++
			continue
		}
		li, err := parseLineTable(u.compDir, dw.debugLine[u.stmtList:], dw.debugLineStr, u.addrSize)
		if err != nil || li == nil {
			dw.badLines++
			continue
		}
		u.lines = li
		seen := map[string]bool{}
		for _, fe := range li.FileNames {
			if !seen[fe.Path] {
				seen[fe.Path] = true
				u.files = append(u.files, fileName{raw: fe.Path, norm: normPath(fe.Path, u.compDir)})
			}
		}
	}
}

// parseLineTable runs line.Parse, which panics on some malformed input.
func parseLineTable(compDir string, b, lineStr []byte, addrSize int) (li *line.DebugLineInfo, err error) {
	defer func() {
		if r := recover(); r != nil {
			li, err = nil, fmt.Errorf("malformed line table: %v", r)
		}
	}()
	return line.Parse(compDir, bytes.NewBuffer(b), lineStr, nil, 0, false, addrSize), nil
}

// lineToPCs runs delve's LineToPCs, which panics on some malformed input.
func lineToPCs(li *line.DebugLineInfo, file string, n int) (pcs []line.PCStmt, err error) {
	if li == nil {
		return nil, nil
	}
	defer func() {
		if r := recover(); r != nil {
			pcs, err = nil, fmt.Errorf("malformed line table: %v", r)
		}
	}()
	return li.LineToPCs(file, n), nil
}

// codeLines returns the sorted lines of file that have is_stmt code in unit
// u, read with debug/dwarf's line reader (delve's line package answers
// line-to-address but cannot list the lines that have code). The caller holds
// the table's mutex.
func (dw *dwarfInfo) codeLines(u *unitInfo, file string) ([]int, error) {
	if lines, ok := u.codeLines[file]; ok {
		return lines, nil
	}
	if u.codeLines == nil {
		u.codeLines = map[string][]int{}
	}
	dw.reader.Seek(u.off)
	cu, err := dw.reader.Next()
	if err != nil || cu == nil {
		return nil, fmt.Errorf("read unit at %#x: %v", u.off, err)
	}
	lr, err := dw.data.LineReader(cu)
	if err != nil || lr == nil {
		return nil, fmt.Errorf("read line table of %s: %v", u.name, err)
	}
	clean := map[*dwarf.LineFile]bool{}
	var lines []int
	var le dwarf.LineEntry
	for {
		err := lr.Next(&le)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read line table of %s: %w", u.name, err)
		}
		if le.EndSequence || !le.IsStmt || le.File == nil {
			continue
		}
		is, ok := clean[le.File]
		if !ok {
			is = normPath(le.File.Name, u.compDir) == file
			clean[le.File] = is
		}
		if is {
			lines = append(lines, le.Line)
		}
	}
	slices.Sort(lines)
	lines = slices.Compact(lines)
	u.codeLines[file] = lines
	return lines, nil
}
