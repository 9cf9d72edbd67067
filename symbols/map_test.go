package symbols

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKallsyms(t *testing.T) {
	tb := mustOpen(t, "testdata/kallsyms")
	if tb.Format() != FormatKallsyms {
		t.Errorf("Format = %q, want %q", tb.Format(), FormatKallsyms)
	}
	if tb.BuildID() != nil || tb.HasDWARF() {
		t.Errorf("BuildID = %x, HasDWARF = %v; want nil, false", tb.BuildID(), tb.HasDWARF())
	}
	s := NewSet(tb)
	tests := []struct {
		name   string
		module string // "-" for Lookup, else LookupModule
		want   Symbol
		err    string // substring of the error, "" for success
	}{
		{name: "do_fork", module: "-", want: Symbol{Name: "do_fork", Addr: 0xffffffff810b0f90, Kind: 'T'}},
		{name: "jiffies", module: "-", want: Symbol{Name: "jiffies", Addr: 0xffffffff82000000, Kind: 'D'}},
		{name: "ext4_file_open", module: "-", want: Symbol{Name: "ext4_file_open", Addr: 0xffffffffc0a01000, Kind: 't', Module: "ext4"}},
		{name: "init_module", module: "xfs", want: Symbol{Name: "init_module", Addr: 0xffffffffc0b00000, Kind: 't', Module: "xfs"}},
		{name: "do_fork", module: "xfs", want: Symbol{Name: "do_fork", Addr: 0xffffffffc0b00200, Kind: 't', Module: "xfs"}},
		{name: "static_twin", module: "vmlinux", err: `symbol "static_twin" is ambiguous: 2 definitions`},
		{name: "static_twin", module: "ext4", want: Symbol{Name: "static_twin", Addr: 0xffffffffc0a00000, Kind: 't', Module: "ext4"}},
		{name: "init_module", module: "-", err: `0xffffffffc0a02000 t [ext4] (testdata/kallsyms), 0xffffffffc0b00000 t [xfs]`},
		{name: "static_twin", module: "-", err: `symbol "static_twin" is ambiguous: 3 definitions`},
		{name: "do_frok", module: "-", err: `symbol "do_frok" not found in testdata/kallsyms (did you mean "do_fork"?)`},
		{name: "ext4_file_open", module: "xfs", err: `searched module [xfs] only`},
	}
	for _, tt := range tests {
		var got Symbol
		var err error
		if tt.module == "-" {
			got, err = s.Lookup(tt.name)
		} else {
			got, err = s.LookupModule(tt.module, tt.name)
		}
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("lookup %s in %q: error %v, want one containing %q", tt.name, tt.module, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("lookup %s in %q = %+v, %v; want %+v", tt.name, tt.module, got, err, tt.want)
		}
	}

	var amb *AmbiguousError
	if _, err := s.Lookup("init_module"); !errors.As(err, &amb) || len(amb.Choices) != 2 || amb.Choices[1].Module != "xfs" {
		t.Errorf("Lookup(init_module) = %v; want an *AmbiguousError with modules ext4 and xfs", err)
	}
	var nf *NotFoundError
	if _, err := s.Lookup("do_frok"); !errors.As(err, &nf) || len(nf.Suggestions) == 0 || nf.Suggestions[0] != "do_fork" {
		t.Errorf("Lookup(do_frok) = %v; want a *NotFoundError suggesting do_fork", err)
	}

	// Reverse lookups: no sizes, so the preceding symbol; absolute symbols
	// never answer.
	rev := []struct {
		addr   uint64
		near   string
		off    uint64
		fn     string // SymbolAt; "" for none
		nearOK bool
	}{
		{0xffffffff810b0f90, "do_fork", 0, "do_fork", true},
		{0xffffffff810b0fa0, "do_fork", 0x10, "do_fork", true},
		{0xffffffff82000010, "jiffies", 0x10, "arch_hook", true},
		{0xffffffffc0a01004, "ext4_file_open", 4, "ext4_file_open", true},
		{0x1000, "", 0, "", false},
	}
	for _, r := range rev {
		sym, off, ok := s.Nearest(r.addr)
		if ok != r.nearOK || sym.Name != r.near || off != r.off {
			t.Errorf("Nearest(%#x) = %s+%#x, %v; want %s+%#x, %v", r.addr, sym.Name, off, ok, r.near, r.off, r.nearOK)
		}
		fn, ok := s.SymbolAt(r.addr)
		if fn.Name != r.fn || ok != (r.fn != "") {
			t.Errorf("SymbolAt(%#x) = %s, %v; want %q", r.addr, fn.Name, ok, r.fn)
		}
	}
}

func TestKallsymsZero(t *testing.T) {
	_, err := Open("testdata/kallsyms-zero")
	if !errors.Is(err, ErrZeroAddresses) {
		t.Fatalf("Open(kallsyms-zero) = %v; want ErrZeroAddresses", err)
	}
	for _, want := range []string{"testdata/kallsyms-zero", "CAP_SYSLOG", "kptr_restrict"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// TestMapErrors covers malformed and unrecognised text files, one case per
// line: the file content and the expected error.
func TestMapErrors(t *testing.T) {
	tests := []struct {
		name, content string
		err           string // the whole message, with PATH for the file
		is            error  // a sentinel errors.Is must find, or nil
	}{
		{"empty", "", "open PATH: " + ErrUnknownFormat.Error() + "; the file is empty", ErrUnknownFormat},
		{"blank", "\n  \n", "open PATH: " + ErrUnknownFormat.Error() + "; the file is empty", ErrUnknownFormat},
		{"prose", "hello world\n", "open PATH: " + ErrUnknownFormat.Error() + `; line 1 is "hello world"`, ErrUnknownFormat},
		{"json", "{\"a\": 1}\n", "", ErrUnknownFormat},
		{"binary", "\x89PNG\r\n\x1a\n\x00\x00", "", ErrUnknownFormat},
		{"bad address", "ffffffff81000000 T _text\nzzzz T foo\n", `PATH:2: address "zzzz" is not a hexadecimal number of at most 16 digits`, nil},
		{"long address", "ffffffff81000000 T _text\n1ffffffff81000000 T foo\n", `PATH:2: address "1ffffffff81000000" is not a hexadecimal number of at most 16 digits`, nil},
		{"bad type", "ffffffff81000000 T _text\nffffffff81000001 TT foo\n", `PATH:2: type "TT" is not an nm type letter (T, t, D, d, B, b, R, r, W, ...)`, nil},
		{"bad type char", "ffffffff81000000 T _text\nffffffff81000001 % foo\n", `PATH:2: type "%" is not an nm type letter (T, t, D, d, B, b, R, r, W, ...)`, nil},
		{"two fields", "ffffffff81000000 T _text\nffffffff81000001 T\n", `PATH:2: want ADDR TYPE NAME [module], found 2 fields`, nil},
		{"bad module", "ffffffff81000000 T _text\nffffffff81000001 t foo ext4\n", `PATH:2: unexpected "ext4" after the name: want a module as "[name]"`, nil},
		{"five fields", "ffffffff81000000 T _text\nffffffff81000001 t foo [ext4] x\n", `PATH:2: unexpected "x" after the module: want ADDR TYPE NAME [module]`, nil},
		{"missing address", "ffffffff81000000 T _text\n                 T foo\n", `PATH:2: missing address before type "T"`, nil},
		{"several", "ffffffff81000000 T _text\nx T a\n\nffffffff81000001 T b\ny T c\n", "PATH:2: address \"x\" is not a hexadecimal number of at most 16 digits\nPATH:5: address \"y\" is not a hexadecimal number of at most 16 digits", nil},
		{"only undefined", "                 U puts\n                 w __gmon_start__\n", "open PATH: " + ErrNoSymbols.Error(), ErrNoSymbols},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_"))
		if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Open(path)
		if err == nil {
			t.Errorf("%s: Open succeeded; want an error", tt.name)
			continue
		}
		if want := strings.ReplaceAll(tt.err, "PATH", path); tt.err != "" && err.Error() != want {
			t.Errorf("%s: error\n%s\nwant\n%s", tt.name, err, want)
		}
		if tt.is != nil && !errors.Is(err, tt.is) {
			t.Errorf("%s: error %v is not %v", tt.name, err, tt.is)
		}
		var pe *ParseError
		if tt.is == nil && !errors.As(err, &pe) {
			t.Errorf("%s: error %v carries no *ParseError", tt.name, err)
		}
	}
}

func TestMapTooManyErrors(t *testing.T) {
	content := "ffffffff81000000 T _text\n" + strings.Repeat("x T y\n", 50)
	path := filepath.Join(t.TempDir(), "map")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path)
	var list ErrorList
	if !errors.As(err, &list) || len(list) != maxErrors {
		t.Fatalf("Open = %v; want an ErrorList of %d errors", err, maxErrors)
	}
}

func TestOpenMissing(t *testing.T) {
	_, err := Open("testdata/no-such-file")
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "testdata/no-such-file") {
		t.Errorf("Open(missing) = %v; want a not-exist error naming the file", err)
	}
}

// TestSystemMapFromNM reads "nm -n" output of a fixture program as a
// System.map and checks it agrees with the ELF file itself.
func TestSystemMapFromNM(t *testing.T) {
	f := needFixtures(t)
	m := mustOpen(t, f.sysmap)
	if m.Format() != FormatSystemMap {
		t.Errorf("Format = %q, want %q", m.Format(), FormatSystemMap)
	}
	e := mustOpen(t, f.prog)
	ms, es := NewSet(m), NewSet(e)
	for _, name := range []string{"main", "caller_one", "caller_two", "counter", "global_layout", "fast", "weak_hook", "fs_open", "big"} {
		a, err := ms.Lookup(name)
		if err != nil {
			t.Errorf("map Lookup(%s): %v", name, err)
			continue
		}
		b, err := es.Lookup(name)
		if err != nil {
			t.Errorf("ELF Lookup(%s): %v", name, err)
			continue
		}
		if a.Addr != b.Addr || a.Kind != b.Kind {
			t.Errorf("%s: map says %#x %c, ELF says %#x %c", name, a.Addr, a.Kind, b.Addr, b.Kind)
		}
		if a.Size != 0 {
			t.Errorf("%s: map symbol has size %d; want 0", name, a.Size)
		}
	}
	var amb *AmbiguousError
	if _, err := ms.Lookup("helper"); !errors.As(err, &amb) || len(amb.Choices) != 2 {
		t.Errorf("map Lookup(helper) = %v; want ambiguity between two static functions", err)
	}
	// Without sizes, SymbolAt takes the preceding text symbol.
	main, _ := es.Lookup("main")
	if fn, ok := ms.SymbolAt(main.Addr + 5); !ok || fn.Name != "main" {
		t.Errorf("map SymbolAt(main+5) = %v, %v; want main", fn, ok)
	}
	// Both at once: the same addresses are not ambiguous, and the ELF
	// definition (with a size) is the one returned.
	both := NewSet(m, e)
	if s, err := both.Lookup("main"); err != nil || s.Size == 0 {
		t.Errorf("Lookup(main) in map+ELF = %+v, %v; want the sized ELF symbol", s, err)
	}
	if got := both.Files(); len(got) != 2 || got[0] != f.sysmap || got[1] != f.prog {
		t.Errorf("Files = %q", got)
	}
}

// TestNameIndexLarge looks up every name of a map large enough for the radix
// sort, and a few that are missing.
func TestNameIndexLarge(t *testing.T) {
	path := writeMap(t, 5000, true)
	tb := mustOpen(t, path)
	s := NewSet(tb)
	for i, e := range tb.syms {
		got, err := s.Lookup(e.Name)
		if err != nil || got != e.Symbol {
			t.Fatalf("Lookup(%s) = %+v, %v; want %+v (line %d)", e.Name, got, err, e.Symbol, i+1)
		}
	}
	for _, name := range []string{"", "do_sys_open", "do_sys_open_5000", "tcp_v4_rcv_4"} {
		if _, err := s.Lookup(name); err == nil {
			t.Errorf("Lookup(%q) succeeded", name)
		}
	}
}
