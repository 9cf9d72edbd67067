package symbols

import (
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
)

// nmSym is one line of "nm" output.
type nmSym struct {
	addr uint64
	size uint64
	kind byte
	name string
}

// nmSymbols runs nm with args and returns the defined symbols. With -S the
// size column is parsed too.
func nmSymbols(t *testing.T, args ...string) []nmSym {
	t.Helper()
	var syms []nmSym
	sized := false
	for _, a := range args {
		sized = sized || a == "-S"
	}
	for _, line := range strings.Split(run(t, "nm", args...), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue // undefined: no address
		}
		var s nmSym
		var err error
		if s.addr, err = strconv.ParseUint(f[0], 16, 64); err != nil {
			t.Fatalf("nm line %q: %v", line, err)
		}
		if sized && len(f) == 4 {
			s.size, _ = strconv.ParseUint(f[1], 16, 64)
			f = f[1:]
		}
		s.kind, s.name = f[1][0], f[2]
		syms = append(syms, s)
	}
	return syms
}

// TestELFAgainstNM is the differential oracle for ELF symbols: every
// definition nm lists must be found at nm's address with nm's letter, or be
// reported ambiguous when nm lists it at several addresses.
func TestELFAgainstNM(t *testing.T) {
	f := needFixtures(t)
	for _, tc := range []struct {
		file string
		nm   []string
	}{
		{f.prog, []string{"-S"}},
		{f.nopie, []string{"-S"}},
		{f.lib, []string{"-S"}},
		{f.lib, []string{"-D", "-S"}},
		{f.strip, []string{"-D", "-S"}},
	} {
		tb := mustOpen(t, tc.file)
		if tb.Format() != FormatELF {
			t.Errorf("%s: Format = %q", tc.file, tb.Format())
		}
		s := NewSet(tb)
		byName := map[string][]nmSym{}
		for _, ns := range nmSymbols(t, append(tc.nm, tc.file)...) {
			byName[ns.name] = append(byName[ns.name], ns)
		}
		checked := 0
		for name, defs := range byName {
			addrs := map[uint64]bool{}
			for _, d := range defs {
				addrs[d.addr] = true
			}
			got, err := s.Lookup(name)
			if len(addrs) > 1 {
				globals := map[uint64]bool{}
				for _, d := range defs {
					if 'A' <= d.kind && d.kind <= 'Z' {
						globals[d.addr] = true
					}
				}
				var amb *AmbiguousError
				if len(globals) == 1 {
					if err != nil || !globals[got.Addr] {
						t.Errorf("%s nm %v: Lookup(%s) = %+v, %v; want the one global of %+v", tc.file, tc.nm, name, got, err, defs)
					}
				} else if !errors.As(err, &amb) || len(amb.Choices) != len(addrs) {
					t.Errorf("%s nm %v: Lookup(%s) = %+v, %v; want an AmbiguousError with %d choices", tc.file, tc.nm, name, got, err, len(addrs))
				}
				continue
			}
			d := defs[0]
			if err != nil {
				t.Errorf("%s nm %v: Lookup(%s): %v", tc.file, tc.nm, name, err)
				continue
			}
			if got.Addr != d.addr || got.Kind != d.kind || (d.size != 0 && got.Size != d.size) {
				t.Errorf("%s nm %v: Lookup(%s) = %#x %c size %d; nm says %#x %c size %d", tc.file, tc.nm, name, got.Addr, got.Kind, got.Size, d.addr, d.kind, d.size)
			}
			checked++
		}
		if checked < 5 {
			t.Errorf("%s nm %v: only %d symbols compared", tc.file, tc.nm, checked)
		}
	}
}

// TestELFLookupRules is the lookup rules, one case per line.
func TestELFLookupRules(t *testing.T) {
	f := needFixtures(t)
	prog, lib, strip := mustOpen(t, f.prog), mustOpen(t, f.lib), mustOpen(t, f.strip)
	// addr is nm's address for name, the global definition if there is one.
	addr := func(tb *Table, name string) uint64 {
		found, a := false, uint64(0)
		for _, ns := range append(nmSymbols(t, tb.Path()), nmSymbols(t, "-D", tb.Path())...) {
			if ns.name == name && (!found || 'A' <= ns.kind && ns.kind <= 'Z') {
				found, a = true, ns.addr
			}
		}
		if found {
			return a
		}
		t.Fatalf("nm lists no %s in %s", name, tb.Path())
		return 0
	}
	tests := []struct {
		set  *Set
		name string
		want uint64 // 0: an error is expected
		err  string
	}{
		// A global and a static of one name: the global wins.
		{NewSet(prog), "counter", addr(prog, "counter"), ""},
		// Two statics of one name: ambiguous, both listed.
		{NewSet(prog), "helper", 0, `symbol "helper" is ambiguous: 2 definitions at different addresses`},
		// IFUNC and weak symbols.
		{NewSet(prog), "fast", addr(prog, "fast"), ""},
		{NewSet(prog), "weak_hook", addr(prog, "weak_hook"), ""},
		// Versioned names: the bare name is the default version.
		{NewSet(lib), "lib_func", addr(lib, "lib_func@@VERS_2"), ""},
		{NewSet(lib), "lib_func@@VERS_2", addr(lib, "lib_func@@VERS_2"), ""},
		{NewSet(lib), "lib_func@VERS_1", addr(lib, "lib_func@VERS_1"), ""},
		{NewSet(lib), "lib_plain", addr(lib, "lib_plain"), ""},
		{NewSet(lib), "lib_value", addr(lib, "lib_value"), ""},
		// Stripped: .dynsym only.
		{NewSet(strip), "lib_func", addr(lib, "lib_func@@VERS_2"), ""},
		{NewSet(strip), "lib_func_v1", 0, `symbol "lib_func_v1" not found in ` + f.strip + ` (did you mean "lib_func`},
		// A misspelling.
		{NewSet(prog), "caller_on", 0, `(did you mean "caller_one"?)`},
		{NewSet(prog), "calle_two", 0, `(did you mean "caller_two"?)`},
		// No files.
		{NewSet(), "main", 0, `symbol "main" not found: no symbol file was given (pass --symbols FILE)`},
	}
	for _, tt := range tests {
		got, err := tt.set.Lookup(tt.name)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Lookup(%s) = %+v, %v; want an error containing %q", tt.name, got, err, tt.err)
			}
			continue
		}
		if err != nil || got.Addr != tt.want {
			t.Errorf("Lookup(%s) = %+v, %v; want address %#x", tt.name, got, err, tt.want)
		}
	}

	// A relocatable object gives no addresses, and says why.
	obj := mustOpen(t, f.obj)
	if _, err := NewSet(obj).Lookup("caller_two"); err == nil || !strings.Contains(err.Error(), "relocatable object") || !errors.Is(err, ErrNotLinked) {
		t.Errorf("Lookup in a .o = %v; want an error explaining relocatable objects, wrapping ErrNotLinked", err)
	}
	// a name it does not define is not found, and not "not linked"
	if _, err := NewSet(obj).Lookup("no_such_function_here"); err == nil || errors.Is(err, ErrNotLinked) {
		t.Errorf("Lookup of an unknown name in a .o = %v; want not found, not ErrNotLinked", err)
	}
}

func TestBuildID(t *testing.T) {
	f := needFixtures(t)
	testkit.Tool(t, "readelf")
	for _, path := range []string{f.prog, f.lib, f.strip} {
		out := run(t, "readelf", "-n", path)
		_, after, ok := strings.Cut(out, "Build ID: ")
		if !ok {
			t.Fatalf("readelf -n %s shows no build ID", path)
		}
		want := strings.Fields(after)[0]
		tb := mustOpen(t, path)
		if got := hex.EncodeToString(tb.BuildID()); got != want {
			t.Errorf("%s: BuildID = %s, readelf says %s", path, got, want)
		}
	}
	s := NewSet(mustOpen(t, "testdata/kallsyms"), mustOpen(t, f.prog))
	if s.BuildID() == nil {
		t.Error("Set.BuildID is nil; want the ELF file's")
	}
}

// TestSymbolAt compares the enclosing function with nm -S sizes: every
// address inside a sized function belongs to it, and the padding after it to
// no function.
func TestSymbolAt(t *testing.T) {
	f := needFixtures(t)
	s := NewSet(mustOpen(t, f.prog))
	n := 0
	for _, ns := range nmSymbols(t, "-S", f.prog) {
		if ns.size == 0 || (ns.kind != 'T' && ns.kind != 't' && ns.kind != 'W' && ns.kind != 'i') {
			continue
		}
		for _, a := range []uint64{ns.addr, ns.addr + ns.size/2, ns.addr + ns.size - 1} {
			fn, ok := s.SymbolAt(a)
			if !ok || fn.Addr != ns.addr || fn.Size != ns.size {
				t.Errorf("SymbolAt(%#x) = %+v, %v; want %s [%#x, %#x)", a, fn, ok, ns.name, ns.addr, ns.addr+ns.size)
			}
			sym, off, ok := s.Nearest(a)
			if !ok || sym.Addr != ns.addr || off != a-ns.addr {
				t.Errorf("Nearest(%#x) = %s+%#x, %v; want %s+%#x", a, sym.Name, off, ok, ns.name, a-ns.addr)
			}
		}
		n++
	}
	if n < 8 {
		t.Errorf("only %d functions checked", n)
	}
	if fn, ok := s.SymbolAt(0); ok {
		t.Errorf("SymbolAt(0) = %+v; want none", fn)
	}
}

func TestStripped(t *testing.T) {
	f := needFixtures(t)
	tb := mustOpen(t, f.strip)
	if tb.HasDWARF() {
		t.Error("stripped binary HasDWARF")
	}
	s := NewSet(tb)
	if _, _, err := s.LineAddr("lib.c", 1); !errors.Is(err, ErrNoDWARF) {
		t.Errorf("LineAddr on stripped = %v; want ErrNoDWARF", err)
	}
	if _, err := s.Sizeof("int"); !errors.Is(err, ErrNoDWARF) || !strings.Contains(err.Error(), "built with -g") {
		t.Errorf("Sizeof on stripped = %v; want ErrNoDWARF", err)
	}
}

func TestCorruptELF(t *testing.T) {
	f := needFixtures(t)
	b, err := os.ReadFile(f.prog)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		data []byte
		err  string
	}{
		{"magic only", []byte("\x7fELF"), "read ELF"},
		{"truncated header", b[:40], "read ELF"},
		{"bad class", append([]byte("\x7fELF\x09"), b[5:64]...), "read ELF"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
		if err := os.WriteFile(path, tc.data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Open(path)
		if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: Open = %v; want an error naming the file and containing %q", tc.name, err, tc.err)
		}
	}

	// The file changes between Open and the first DWARF query.
	path := filepath.Join(dir, "changing")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	tb := mustOpen(t, path)
	other, err := os.ReadFile(f.nopie)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, other, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := NewSet(tb).Sizeof("int"); !errors.Is(err, ErrChanged) {
		t.Errorf("Sizeof after the file changed = %v; want ErrChanged", err)
	}
}
