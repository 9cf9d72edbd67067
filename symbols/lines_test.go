package symbols

import (
	"debug/dwarf"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
)

// gdbInfoLine asks gdb where each line starts ("info line FILE:N") and
// returns, per query, the addresses it prints (several for a line with code
// in several places; none for a line without code).
func gdbInfoLine(t *testing.T, binary string, queries []string) map[string][]uint64 {
	t.Helper()
	testkit.Tool(t, "gdb")
	args := []string{"-batch", "-nx"}
	for _, q := range queries {
		args = append(args, "-ex", "echo @@"+q+"\\n", "-ex", "info line "+q)
	}
	out := run(t, "gdb", append(args, binary)...)
	re := regexp.MustCompile(`starts at address (0x[0-9a-f]+)`)
	res := map[string][]uint64{}
	cur := ""
	for _, line := range strings.Split(out, "\n") {
		if q, ok := strings.CutPrefix(line, "@@"); ok {
			cur = q
			res[cur] = nil
			continue
		}
		if m := re.FindStringSubmatch(line); m != nil && cur != "" {
			a, _ := strconv.ParseUint(m[1], 0, 64)
			res[cur] = append(res[cur], a)
		}
	}
	return res
}

// TestLineAddrGDB compares LineAddr with gdb's "info line" for the marked
// lines of the fixture, which each have code in one function.
func TestLineAddrGDB(t *testing.T) {
	f := needFixtures(t)
	names := []string{"main_first", "after_nocode", "printf", "caller_one", "helper_main", "other_return", "fs_open", "xfs_open"}
	for _, bin := range []string{f.prog, f.nopie} {
		s := NewSet(mustOpen(t, bin))
		var queries []string
		for _, n := range names {
			m := f.marker(t, n)
			queries = append(queries, fmt.Sprintf("%s:%d", m.file, m.line))
		}
		want := gdbInfoLine(t, bin, queries)
		for i, n := range names {
			m := f.marker(t, n)
			addrs := want[queries[i]]
			if len(addrs) != 1 {
				t.Fatalf("%s: gdb info line %s gave %#x; want one address", bin, queries[i], addrs)
			}
			addr, line, err := s.LineAddr(m.file, m.line)
			if err != nil || addr != addrs[0] || line != m.line {
				t.Errorf("%s: LineAddr(%s) = %#x, %d, %v; gdb says %#x", bin, queries[i], addr, line, err, addrs[0])
			}
		}
	}
}

// decodedLine is one row of objdump --dwarf=decodedline.
type decodedLine struct {
	file string // base name
	line int
	addr uint64
	stmt bool
}

func objdumpLines(t *testing.T, binary string) []decodedLine {
	t.Helper()
	testkit.Tool(t, "objdump")
	var rows []decodedLine
	for _, l := range strings.Split(run(t, "objdump", "--dwarf=decodedline", binary), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || !strings.HasPrefix(f[2], "0x") {
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			continue // end of sequence: "-"
		}
		a, err := strconv.ParseUint(f[2], 0, 64)
		if err != nil {
			t.Fatalf("objdump line %q: %v", l, err)
		}
		rows = append(rows, decodedLine{f[0], n, a, f[len(f)-1] == "x"})
	}
	if len(rows) == 0 {
		t.Fatalf("objdump --dwarf=decodedline %s: no rows", binary)
	}
	return rows
}

// TestLineAddrObjdump is the exhaustive differential test: for every line of
// main.c, other.c and fixture.h up to the last with code, the expected answer
// is computed from objdump's decoded line table and nm's function sizes: the
// next line with is_stmt rows, its lowest address if they fall in one
// function, an AmbiguousError if in several.
func TestLineAddrObjdump(t *testing.T) {
	f := needFixtures(t)
	for _, bin := range f.builds(t, f.prog, f.nopie, f.zlib, f.zdebug) {
		rows := objdumpLines(t, bin)
		var funcs []nmSym
		for _, ns := range nmSymbols(t, "-S", bin) {
			if ns.size > 0 && strings.ContainsRune("tTWi", rune(ns.kind)) {
				funcs = append(funcs, ns)
			}
		}
		fnOf := func(a uint64) uint64 {
			for _, fn := range funcs {
				if a >= fn.addr && a < fn.addr+fn.size {
					return fn.addr
				}
			}
			t.Fatalf("%s: no function contains %#x", bin, a)
			return 0
		}
		s := NewSet(mustOpen(t, bin))
		checked, ambiguous := 0, 0
		for _, file := range []string{"main.c", "other.c", "fixture.h"} {
			// line -> function start -> lowest address
			code := map[int]map[uint64]uint64{}
			last := 0
			for _, r := range rows {
				if r.file != file || !r.stmt {
					continue
				}
				fn := fnOf(r.addr)
				if code[r.line] == nil {
					code[r.line] = map[uint64]uint64{}
				}
				if a, ok := code[r.line][fn]; !ok || r.addr < a {
					code[r.line][fn] = r.addr
				}
				last = max(last, r.line)
			}
			for n := 1; n <= last; n++ {
				next := n
				for code[next] == nil {
					next++
				}
				addr, got, err := s.LineAddr(file, n)
				if len(code[next]) > 1 {
					var amb *AmbiguousError
					if !errors.As(err, &amb) || len(amb.Choices) != len(code[next]) {
						t.Errorf("%s: LineAddr(%s:%d) = %#x, %d, %v; want an AmbiguousError with %d functions", bin, file, n, addr, got, err, len(code[next]))
					}
					ambiguous++
					continue
				}
				var want uint64
				for _, a := range code[next] {
					want = a
				}
				if err != nil || addr != want || got != next {
					t.Errorf("%s: LineAddr(%s:%d) = %#x, %d, %v; want %#x, %d", bin, file, n, addr, got, err, want, next)
				}
				checked++
			}
			if _, _, err := s.LineAddr(file, last+1); !errors.Is(err, ErrNoCode) || !strings.Contains(err.Error(), fmt.Sprintf("its last line with code is %d", last)) {
				t.Errorf("%s: LineAddr(%s:%d) past the end = %v; want ErrNoCode naming line %d", bin, file, last+1, err, last)
			}
		}
		if checked < 30 || ambiguous == 0 {
			t.Errorf("%s: %d lines checked, %d ambiguous; the fixture should give more", bin, checked, ambiguous)
		}
	}
}

func TestLineAddrRules(t *testing.T) {
	f := needFixtures(t)
	s := NewSet(mustOpen(t, f.prog))
	inl := f.marker(t, "inlined")
	nocode := f.marker(t, "nocode")
	after := f.marker(t, "after_nocode")
	fsOpen, xfsOpen := f.marker(t, "fs_open"), f.marker(t, "xfs_open")
	caller1, _ := s.Lookup("caller_one")
	caller2, _ := s.Lookup("caller_two")
	fsFn, _ := s.Lookup("fs_open")
	xfsFn, _ := s.Lookup("xfs_open")

	// A line with no code moves to the next line that has some.
	if _, line, err := s.LineAddr("main.c", nocode.line); err != nil || line != after.line {
		t.Errorf("LineAddr(main.c:%d) actual line = %d, %v; want %d", nocode.line, line, err, after.line)
	}

	// An always-inline function: its line has code in both callers.
	_, _, err := s.LineAddr("fixture.h", inl.line)
	var amb *AmbiguousError
	if !errors.As(err, &amb) || amb.What != "line" || len(amb.Choices) != 2 ||
		amb.Choices[0].Name != "caller_one" || amb.Choices[1].Name != "caller_two" ||
		amb.Choices[0].Addr-amb.Choices[0].Off != caller1.Addr || amb.Choices[1].Addr-amb.Choices[1].Off != caller2.Addr {
		t.Errorf("LineAddr(fixture.h:%d) = %v; want ambiguity between caller_one and caller_two", inl.line, err)
	} else if !strings.Contains(err.Error(), "<caller_one+0x") || !strings.Contains(err.Error(), "FUNCTION+OFFSET") {
		t.Errorf("ambiguity message %q does not show function+offset and the fix", err)
	}

	// File names match on whole path components.
	tests := []struct {
		file string
		line int
		fn   uint64 // expected enclosing function; 0 when an error is expected
		err  string
	}{
		{"fs/open.c", fsOpen.line, fsFn.Addr, ""},
		{"xfs/open.c", xfsOpen.line, xfsFn.Addr, ""},
		{"./fs/open.c", fsOpen.line, fsFn.Addr, ""},
		{filepath.Join(f.src, "fs/open.c"), fsOpen.line, fsFn.Addr, ""},
		{"/src/fs/open.c", fsOpen.line, 0, `source file "/src/fs/open.c" not found`},
		{"open.c", 1, 0, `source file "open.c" is ambiguous: it matches ` + f.src + `/fs/open.c, ` + f.src + `/xfs/open.c: give more of the path`},
		{"s/open.c", fsOpen.line, 0, `source file "s/open.c" not found in ` + f.prog},
		{"mian.c", 3, 0, `(did you mean "main.c"?)`},
		{"main.c", 0, 0, "line numbers start at 1"},
		{"", 3, 0, "want a source file name"},
	}
	for _, tt := range tests {
		addr, _, err := s.LineAddr(tt.file, tt.line)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("LineAddr(%s:%d) = %#x, %v; want an error containing %q", tt.file, tt.line, addr, err, tt.err)
			}
			continue
		}
		fn, ok := s.SymbolAt(addr)
		if err != nil || !ok || fn.Addr != tt.fn {
			t.Errorf("LineAddr(%s:%d) = %#x (in %s), %v; want an address in the function at %#x", tt.file, tt.line, addr, fn.Name, err, tt.fn)
		}
	}

	// The no-PIE fixture was compiled by absolute path: an absolute name
	// matches exactly.
	abs := NewSet(mustOpen(t, f.nopie))
	if _, line, err := abs.LineAddr(filepath.Join(f.src, "main.c"), after.line); err != nil || line != after.line {
		t.Errorf("LineAddr(absolute main.c) = %d, %v", line, err)
	}

	// Two files with DWARF: both are searched, the code of one function
	// is still one answer when the files agree.
	two := NewSet(mustOpen(t, "testdata/kallsyms"), mustOpen(t, f.prog), mustOpen(t, f.zlib))
	a1, _, err1 := s.LineAddr("main.c", after.line)
	a2, _, err2 := two.LineAddr("main.c", after.line)
	if err1 != nil || err2 != nil || a1 != a2 {
		t.Errorf("LineAddr over two identical binaries = %#x, %v; want %#x, %v", a2, err2, a1, err1)
	}
}

func TestLineAddrRelocatable(t *testing.T) {
	f := needFixtures(t)
	s := NewSet(mustOpen(t, f.obj))
	_, _, err := s.LineAddr("other.c", 3)
	if err == nil || !strings.Contains(err.Error(), "relocatable objects") {
		t.Errorf("LineAddr on a .o = %v; want an error explaining relocatable objects", err)
	}
}

// TestLineTablesAgree checks delve's line-table parser against the standard
// library's for every unit of every fixture: the is_stmt addresses of each
// line of each file must be the same.
func TestLineTablesAgree(t *testing.T) {
	f := needFixtures(t)
	for _, bin := range f.builds(t, f.prog, f.nopie, f.zlib, f.zdebug, f.lib) {
		compared := 0
		tb := mustOpen(t, bin)
		tb.mu.Lock()
		dw, err := tb.loadDWARF()
		if err != nil {
			tb.mu.Unlock()
			t.Fatal(err)
		}
		dw.parseLines()
		for _, u := range dw.units {
			for _, fn := range u.files {
				file := fn.norm
				lines, err := dw.codeLines(u, file)
				if err != nil {
					t.Fatal(err)
				}
				std := stdStmtRows(t, dw, u, file)
				if len(std) != len(lines) {
					t.Errorf("%s: %s: %d lines with code, debug/dwarf rows have %d", bin, file, len(lines), len(std))
				}
				for _, n := range lines {
					pcs, err := lineToPCs(u.lines, fn.raw, n)
					if err != nil {
						t.Fatal(err)
					}
					var stmts []uint64
					for _, p := range pcs {
						if p.Stmt {
							stmts = append(stmts, p.PC)
						}
					}
					slices.Sort(stmts)
					if !slices.Equal(stmts, std[n]) {
						t.Errorf("%s: %s:%d: delve gives %#x, debug/dwarf %#x", bin, file, n, stmts, std[n])
					}
					compared++
				}
			}
		}
		if dw.badLines != 0 {
			t.Errorf("%s: %d line tables failed to parse", bin, dw.badLines)
		}
		if compared < 5 {
			t.Errorf("%s: only %d lines compared", bin, compared)
		}
		tb.mu.Unlock()
	}
}

// stdStmtRows reads the is_stmt rows of one file in one unit with
// debug/dwarf: line -> sorted addresses.
func stdStmtRows(t *testing.T, dw *dwarfInfo, u *unitInfo, file string) map[int][]uint64 {
	t.Helper()
	r := dw.data.Reader()
	r.Seek(u.off)
	cu, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	lr, err := dw.data.LineReader(cu)
	if err != nil || lr == nil {
		t.Fatalf("LineReader: %v", err)
	}
	rows := map[int][]uint64{}
	var le dwarf.LineEntry
	for lr.Next(&le) == nil {
		if le.IsStmt && !le.EndSequence && le.File != nil && normPath(le.File.Name, u.compDir) == file {
			rows[le.Line] = append(rows[le.Line], le.Address)
		}
	}
	for n := range rows {
		slices.Sort(rows[n])
		rows[n] = slices.Compact(rows[n])
	}
	return rows
}
