package symbols

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// TestLayoutAgainstC is the differential oracle for types: the fixture's
// layout program prints sizeof, offsetof and field (offset and size of a
// member) as gcc computes them, and every fixture build (DWARF 5, DWARF 4,
// compressed both ways, a relocatable object) must give the same numbers.
// The BTF builds are checked against the same lines in TestBTFLayoutAgainstC.
func TestLayoutAgainstC(t *testing.T) {
	f := needFixtures(t)
	for _, bin := range f.builds(t, f.prog, f.nopie, f.zlib, f.zdebug, f.obj) {
		checkLayout(t, bin, NewSet(mustOpen(t, bin)), nil)
	}
}

// checkLayout compares s with every line of the layout program's output;
// skip, when it returns a reason, leaves a line out. It returns the lines
// compared.
func checkLayout(t *testing.T, name string, s *Set, skip func(kind, typ, field string) string) int {
	t.Helper()
	f := needFixtures(t)
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(f.layout), "\n") {
		p := strings.Split(line, "|")
		field := ""
		if len(p) > 3 {
			field = p[2]
		}
		if skip != nil {
			if why := skip(p[0], p[1], field); why != "" {
				t.Logf("%s: %s: not compared: %s", name, line, why)
				continue
			}
		}
		nums := make([]uint64, 0, 2)
		for _, v := range p[len(p)-1-btoi(p[0] == "field"):] {
			x, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("layout line %q: %v", line, err)
			}
			nums = append(nums, x)
		}
		var got, size uint64
		var err error
		switch p[0] {
		case "sizeof":
			got, err = s.Sizeof(p[1])
		case "offsetof":
			got, err = s.Offsetof(p[1], p[2])
		case "field":
			got, size, err = s.Field(p[1], p[2])
			if err == nil && size != nums[1] {
				t.Errorf("%s: %s: Field size = %d; C says %d", name, line, size, nums[1])
			}
		default:
			t.Fatalf("layout line %q: unknown kind", line)
		}
		if err != nil || got != nums[0] {
			t.Errorf("%s: %s = %d, %v; C says %d", name, line, got, err, nums[0])
		}
		n++
	}
	if n < 40 {
		t.Fatalf("%s: only %d layout lines compared", name, n)
	}
	return n
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestTypeErrors(t *testing.T) {
	f := needFixtures(t)
	s := NewSet(mustOpen(t, "testdata/kallsyms"), mustOpen(t, f.prog))
	tests := []struct {
		typ, field string // field "" for Sizeof
		err        string // substring of the message
		is         error
	}{
		{"struct layout", "flag_a", "offsetof(struct layout, flag_a): field flag_a is 3 bits wide: bit-field has no byte offset", ErrBitField},
		{"struct layout", "flag_b", "field flag_b is 5 bits wide", ErrBitField},
		{"struct opaque", "", "sizeof(struct opaque): struct opaque is declared in " + f.prog + " but defined nowhere", ErrIncompleteType},
		{"struct opaque", "x", "struct opaque is declared in", ErrIncompleteType},
		{"struct layou", "", `sizeof(struct layou): type "struct layou" not found in ` + f.prog + ` (did you mean "struct layout"?)`, nil},
		{"struct layout", "pdi", `offsetof(struct layout, pdi): field "pdi" not found in struct layout (did you mean "pid"`, nil},
		{"struct layout", "hdr.nmae", `field "nmae" not found in struct hdr (did you mean "name"`, nil},
		{"struct layout", "lw", `(did you mean "lo"`, nil},
		{"struct layout", "in.tag", "in is an array: index it before selecting .tag", nil},
		{"struct layout", "c[1]", "c is char, not an array: it cannot be indexed", nil},
		{"struct layout", "in[3]", "index 3 out of range: in has 3 elements", nil},
		{"struct layout", "grid[1][3]", "index 3 out of range: grid[1] has 3 elements", nil},
		{"struct layout", "pid.x", `pid is int, not a struct or union: it has no member "x"`, nil},
		{"struct layout", "next.c", `next is a pointer, not a struct or union`, nil},
		{"pid_like_t", "x", `pid_like_t is int, not a struct or union`, nil},
		{"struct layout *", "c", "struct layout * is a pointer: offsetof needs a struct or union", nil},
		{"unsigned long long", "", `type "unsigned long long" not found`, nil},
		{"struct layout", "tail[1000000]", "", nil}, // flexible array: any index
		{"struct", "", `type name "struct": want struct NAME`, nil},
		{"struct a b", "", `type name "struct a b": want struct NAME`, nil},
		{"int * x", "", `"x" after '*'`, nil},
		{"", "", "want a type such as", nil},
		{"int-x", "", `"int-x" is not an identifier`, nil},
		{"struct layout", "", "", nil},
		{"struct layout", "", "", nil},
		{"struct layout", "a..b", `want a member name at ".b"`, nil},
		{"struct layout", "[1]", "an index needs a member before it", nil},
		{"struct layout", "in[x]", `index "x" is not a non-negative integer constant`, nil},
		{"struct layout", "in[1", `'[' without ']'`, nil},
		{"struct layout", "in]", `unexpected "]"`, nil},
		{"struct layout", "in [ 1 ] . tag", "", nil},
		{"struct layout", ".c", "starts with '.'", nil},
		{"struct layout", "", "", nil},
	}
	for _, tt := range tests {
		var err error
		if tt.field == "" {
			_, err = s.Sizeof(tt.typ)
		} else {
			_, err = s.Offsetof(tt.typ, tt.field)
		}
		if tt.err == "" {
			if err != nil {
				t.Errorf("(%s, %s): %v", tt.typ, tt.field, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("(%s, %s): error %v; want one containing %q", tt.typ, tt.field, err, tt.err)
		}
		if tt.is != nil && !errors.Is(err, tt.is) {
			t.Errorf("(%s, %s): error %v is not %v", tt.typ, tt.field, err, tt.is)
		}
	}
	var nf *NotFoundError
	if _, err := s.Offsetof("struct layout", "pdi"); !errors.As(err, &nf) || nf.What != "field" || nf.Suggestions[0] != "pid" {
		t.Errorf("Offsetof(pdi) = %v; want a *NotFoundError suggesting pid", err)
	}
	if off, err := s.Offsetof("struct layout", "in [ 1 ] . tag"); err != nil || off != 40 {
		t.Errorf("Offsetof(in [ 1 ] . tag) = %d, %v; want 40", off, err)
	}
	if _, err := NewSet(mustOpen(t, "testdata/kallsyms")).Sizeof("int"); !errors.Is(err, ErrNoDWARF) {
		t.Errorf("Sizeof with only kallsyms = %v; want ErrNoDWARF", err)
	}
}

// TestTypesLazy checks that a type defined in the first compile unit is
// found without indexing the others.
func TestTypesLazy(t *testing.T) {
	f := needFixtures(t)
	tb := mustOpen(t, f.prog)
	s := NewSet(tb)
	if _, err := s.Sizeof("struct layout"); err != nil {
		t.Fatal(err)
	}
	tb.mu.Lock()
	scanned, units := tb.dw.types.scanned, len(tb.dw.units)
	tb.mu.Unlock()
	if scanned != 1 || units < 4 {
		t.Errorf("after one lookup %d of %d units were indexed; want 1", scanned, units)
	}
	// A type only other.c uses needs the second unit.
	if v, err := s.Sizeof("long long"); err != nil || v != 8 {
		t.Errorf("Sizeof(long long) = %d, %v", v, err)
	}
	tb.mu.Lock()
	scanned = tb.dw.types.scanned
	tb.mu.Unlock()
	if scanned != 2 {
		t.Errorf("after the second lookup %d units were indexed; want 2", scanned)
	}
}

func TestParseTypeName(t *testing.T) {
	tests := []struct {
		in  string
		key string
		ptr int
	}{
		{"struct task_struct", "struct task_struct", 0},
		{"  struct   task_struct * ", "struct task_struct", 1},
		{"struct foo**", "struct foo", 2},
		{"const struct foo *", "struct foo", 1},
		{"unsigned long", "unsigned long", 0},
		{"long unsigned int", "unsigned long", 0},
		{"unsigned", "unsigned int", 0},
		{"signed", "int", 0},
		{"long", "long", 0},
		{"long int", "long", 0},
		{"long long unsigned int", "unsigned long long", 0},
		{"short unsigned int", "unsigned short", 0},
		{"signed char", "signed char", 0},
		{"char signed", "signed char", 0},
		{"unsigned char", "unsigned char", 0},
		{"char", "char", 0},
		{"long double", "long double", 0},
		{"__int128 unsigned", "unsigned __int128", 0},
		{"volatile pid_t", "pid_t", 0},
		{"_Bool", "_Bool", 0},
	}
	for _, tt := range tests {
		got, err := parseTypeName(tt.in)
		if err != nil || got.key != tt.key || got.ptr != tt.ptr {
			t.Errorf("parseTypeName(%q) = %+v, %v; want %q with %d pointers", tt.in, got, err, tt.key, tt.ptr)
		}
	}
}

// TestUnsupportedDWARF: type units and split DWARF are not read; the error
// says so and how to rebuild, and line lookups still work.
func TestUnsupportedDWARF(t *testing.T) {
	f := needFixtures(t)
	after := f.marker(t, "after_nocode")
	for _, tc := range []struct{ bin, hint string }{
		{f.typesec, "rebuild it without -fdebug-types-section"},
		{f.split, "rebuild it without -gsplit-dwarf"},
	} {
		s := NewSet(mustOpen(t, tc.bin))
		var nf *NotFoundError
		if _, err := s.Sizeof("struct layout"); !errors.As(err, &nf) || !strings.Contains(err.Error(), tc.hint) {
			t.Errorf("%s: Sizeof = %v; want a NotFoundError saying %q", tc.bin, err, tc.hint)
		}
		if _, line, err := s.LineAddr("main.c", after.line-1); err != nil || line != after.line {
			t.Errorf("%s: LineAddr = %d, %v; want line %d", tc.bin, line, err, after.line)
		}
	}
}
