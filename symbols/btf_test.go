package symbols

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf/btf"
	"github.com/gprobes/gprobes/internal/testkit"
	"github.com/gprobes/gprobes/lab/qemulab"
)

// BTF fixtures, built from the C fixtures by two independent producers:
//
//   - gcc -gbtf (GCC 12 and later) on main.c and other.c: relocatable objects
//     with a .BTF section and no DWARF, and their .BTF sections dumped to raw
//     files. gcc cannot link .BTF sections, so each unit is a file.
//   - pahole -J (dwarves) from the DWARF of the linked program, as the kernel
//     build makes vmlinux's .BTF: the program with .BTF and its DWARF
//     stripped, the program with both, and a raw file
//     (--btf_encode_detached). Optional: skipped without pahole.
type btfFixtures struct {
	gccObjs    []string // main.o, other.o with .BTF only
	gccRaw     []string // their .BTF sections as raw files
	gccSkip    string   // why the gcc builds are missing
	pahole     string   // prog: .BTF and symbols, no DWARF
	paholeBoth string   // prog: .BTF and DWARF
	paholeRaw  string   // raw BTF of prog
	paholeSkip string   // why the pahole builds are missing
}

var btfFix struct {
	once sync.Once
	f    *btfFixtures
	err  error
}

func needBTFFixtures(t testing.TB) *btfFixtures {
	t.Helper()
	f := needFixtures(t)
	testkit.Tool(t, "objcopy")
	btfFix.once.Do(func() { btfFix.f, btfFix.err = buildBTFFixtures(f) })
	if btfFix.err != nil {
		t.Fatal(btfFix.err)
	}
	return btfFix.f
}

func buildBTFFixtures(f *fixtures) (*btfFixtures, error) {
	b := &btfFixtures{}
	runIn := func(args ...string) error {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = f.src
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	for _, src := range []string{"main.c", "other.c"} {
		obj := filepath.Join(f.dir, strings.TrimSuffix(src, ".c")+"-btf.o")
		raw := strings.TrimSuffix(obj, ".o") + ".btf"
		if err := runIn("gcc", "-gbtf", "-O0", "-c", "-o", obj, src); err != nil {
			b.gccSkip = "gcc cannot emit BTF (GCC 12 or later can): " + err.Error()
			b.gccObjs, b.gccRaw = nil, nil
			break
		}
		if err := runIn("objcopy", "--dump-section", ".BTF="+raw, obj); err != nil {
			return nil, err
		}
		b.gccObjs = append(b.gccObjs, obj)
		b.gccRaw = append(b.gccRaw, raw)
	}
	if _, err := exec.LookPath("pahole"); err != nil {
		b.paholeSkip = "pahole not found (Debian package dwarves)"
		return b, nil
	}
	both := filepath.Join(f.dir, "prog-pahole-dwarf")
	only := filepath.Join(f.dir, "prog-pahole")
	raw := filepath.Join(f.dir, "prog-pahole.btf")
	for _, step := range [][]string{
		{"cp", f.prog, both},
		{"pahole", "-J", both},
		{"objcopy", "--strip-debug", both, only},
		{"pahole", "--btf_encode_detached=" + raw, f.prog},
	} {
		if err := runIn(step...); err != nil {
			return nil, err
		}
	}
	b.pahole, b.paholeBoth, b.paholeRaw = only, both, raw
	return b, nil
}

// optionalTool returns the path of a tool the test can do without, or ""
// with the reason logged. bpftool and pahole are not among the packages
// scripts/test installs, so their absence skips a witness even under CI;
// the hand-rolled reader of btforacle_test.go always runs.
func optionalTool(t testing.TB, tool, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		t.Logf("%s not found (Debian package %s): that witness is skipped", tool, pkg)
		return ""
	}
	return p
}

// multiDim says why a layout line about the two-dimensional grid member
// cannot agree with C in BTF: pahole writes int grid[2][3] as int grid[6]
// (https://github.com/acmel/dwarves/issues/33), GCC before the fix of PR debug/114186 as int
// grid[3][2]. The outer size and offset are right; indexes are not.
func multiDim(kind, typ, field string) string {
	if strings.HasPrefix(field, "grid[") {
		return "BTF producers do not keep the dimensions of int grid[2][3]"
	}
	return ""
}

// TestBTFLayoutAgainstC checks the BTF fixtures against the C program's
// numbers, as TestLayoutAgainstC does for DWARF.
func TestBTFLayoutAgainstC(t *testing.T) {
	b := needBTFFixtures(t)
	if b.gccSkip != "" {
		t.Log(b.gccSkip)
	} else {
		for _, files := range [][]string{b.gccObjs, b.gccRaw} {
			s := NewSet()
			for _, p := range files {
				tb := mustOpen(t, p)
				if !tb.HasBTF() || tb.HasDWARF() {
					t.Fatalf("%s: HasBTF %v, HasDWARF %v", p, tb.HasBTF(), tb.HasDWARF())
				}
				s.Add(tb)
			}
			checkLayout(t, strings.Join(files, "+"), s, multiDim)
		}
		if tb := mustOpen(t, b.gccRaw[0]); tb.Format() != FormatBTF || tb.Len() != 0 {
			t.Errorf("%s: Format %q, Len %d; want btf, 0", b.gccRaw[0], tb.Format(), tb.Len())
		}
	}
	if b.paholeSkip != "" {
		t.Log(b.paholeSkip)
		return
	}
	for _, p := range []string{b.pahole, b.paholeRaw} {
		s := NewSet(mustOpen(t, p))
		checkLayout(t, p, s, multiDim)
		// pahole flattens: grid is int[6].
		if v, err := s.Offsetof("struct layout", "grid[5]"); err != nil || v != 116 {
			t.Errorf("%s: Offsetof(grid[5]) = %d, %v; want 116 (flattened)", p, v, err)
		}
		if _, err := s.Offsetof("struct layout", "grid[1][2]"); err == nil || !strings.Contains(err.Error(), "grid[1] is int, not an array") {
			t.Errorf("%s: Offsetof(grid[1][2]) = %v; want the flattened array refused", p, err)
		}
	}
	// An ELF file with both answers from its DWARF: all lines agree,
	// grid[1][2] included.
	tb := mustOpen(t, b.paholeBoth)
	if !tb.HasBTF() || !tb.HasDWARF() {
		t.Fatalf("%s: HasBTF %v, HasDWARF %v; want both", b.paholeBoth, tb.HasBTF(), tb.HasDWARF())
	}
	checkLayout(t, b.paholeBoth, NewSet(tb), nil)
	tb.mu.Lock()
	if tb.bt != nil || tb.dw == nil {
		t.Errorf("%s: BTF loaded %v, DWARF loaded %v; want DWARF only", b.paholeBoth, tb.bt != nil, tb.dw != nil)
	}
	tb.mu.Unlock()
}

// TestBTFTypeErrors: the BTF builds give the errors of TestTypeErrors.
func TestBTFTypeErrors(t *testing.T) {
	b := needBTFFixtures(t)
	// Each case is a set of BTF files and the one that declares struct
	// opaque: gcc writes each unit's types to its own object.
	type btfCase struct {
		files []string
		decl  string
	}
	var cases []btfCase
	if b.gccSkip == "" {
		cases = append(cases, btfCase{b.gccObjs, b.gccObjs[1]}, btfCase{b.gccRaw, b.gccRaw[1]})
	}
	if b.paholeSkip == "" {
		cases = append(cases, btfCase{[]string{b.pahole}, b.pahole}, btfCase{[]string{b.paholeRaw}, b.paholeRaw})
	}
	if len(cases) == 0 {
		testkit.SkipOrFail(t, "%s; %s", b.gccSkip, b.paholeSkip)
	}
	for _, c := range cases {
		s := NewSet(mustOpen(t, "testdata/kallsyms"))
		for _, p := range c.files {
			s.Add(mustOpen(t, p))
		}
		file, decl := strings.Join(c.files, ", "), c.decl
		tests := []struct {
			typ, field string
			err        string
			is         error
		}{
			{"struct layout", "flag_a", "offsetof(struct layout, flag_a): field flag_a is 3 bits wide: bit-field has no byte offset", ErrBitField},
			{"struct layout", "flag_b", "field flag_b is 5 bits wide", ErrBitField},
			{"struct opaque", "", "sizeof(struct opaque): struct opaque is declared in " + decl + " but defined nowhere", ErrIncompleteType},
			{"struct opaque", "x", "struct opaque is declared in", ErrIncompleteType},
			{"struct layou", "", `sizeof(struct layou): type "struct layou" not found in ` + file + ` (did you mean "struct layout"?)`, nil},
			{"struct layout", "pdi", `offsetof(struct layout, pdi): field "pdi" not found in struct layout (did you mean "pid"`, nil},
			{"struct layout", "hdr.nmae", `field "nmae" not found in struct hdr (did you mean "name"`, nil},
			{"struct layout", "lw", `(did you mean "lo"`, nil},
			{"struct layout", "in.tag", "in is an array: index it before selecting .tag", nil},
			{"struct layout", "c[1]", "c is char, not an array: it cannot be indexed", nil},
			{"struct layout", "in[3]", "index 3 out of range: in has 3 elements", nil},
			{"struct layout", "pid.x", `pid is int, not a struct or union: it has no member "x"`, nil},
			{"struct layout", "next.c", `next is a pointer, not a struct or union`, nil},
			{"pid_like_t", "x", `pid_like_t is int, not a struct or union`, nil},
			{"struct layout *", "c", "struct layout * is a pointer: offsetof needs a struct or union", nil},
			{"unsigned long long", "", `type "unsigned long long" not found`, nil},
			{"class layout", "", `type "class layout" not found`, nil},
			{"struct layout", "tail[1000000]", "", nil},
			{"struct layout", "in [ 1 ] . tag", "", nil},
			{"long unsigned int", "", "", nil},
			{"unsigned long", "", "", nil},
			{"const volatile ulong_t", "", "", nil},
			{"enum colour", "", "", nil},
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
					t.Errorf("%s: (%s, %s): %v", file, tt.typ, tt.field, err)
				}
				continue
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: (%s, %s): error %v; want one containing %q", file, tt.typ, tt.field, err, tt.err)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("%s: (%s, %s): error %v is not %v", file, tt.typ, tt.field, err, tt.is)
			}
		}
		// BTF cannot tell char tail[] from char tail[0]: size 0.
		if off, size, err := s.Field("struct layout", "tail"); err != nil || off != 128 || size != 0 {
			t.Errorf("%s: Field(tail) = %d, %d, %v; want 128, 0", file, off, size, err)
		}
		// Lookup still answers from kallsyms; a set of only BTF says why not.
		if _, err := s.Lookup("do_fork"); err != nil {
			t.Errorf("%s: Lookup(do_fork) with kallsyms: %v", file, err)
		}
	}
}

// TestFieldDWARF: Field's errors and sizes on DWARF.
func TestFieldDWARF(t *testing.T) {
	f := needFixtures(t)
	s := NewSet(mustOpen(t, f.prog))
	if _, _, err := s.Field("struct layout", "tail"); err == nil || !strings.Contains(err.Error(), "field(struct layout, tail): size of field tail: an array of unknown length has no size") {
		t.Errorf("Field(tail) = %v; want a size error", err)
	}
	if v, err := s.Offsetof("struct layout", "tail"); err != nil || v != 128 {
		t.Errorf("Offsetof(tail) = %d, %v; want 128", v, err)
	}
	if _, _, err := s.Field("struct layout", "flag_a"); !errors.Is(err, ErrBitField) {
		t.Errorf("Field(flag_a) = %v; want ErrBitField", err)
	}
	if _, _, err := s.Field("struct layout *", "c"); err == nil {
		t.Error("Field on a pointer type: no error")
	}
	if _, _, err := NewSet(mustOpen(t, "testdata/kallsyms")).Field("struct layout", "c"); !errors.Is(err, ErrNoTypes) || !errors.Is(err, ErrNoDWARF) || !strings.Contains(err.Error(), "/sys/kernel/btf/vmlinux") {
		t.Errorf("Field with only kallsyms = %v; want ErrNoTypes", err)
	}
}

// TestBTFOpen: recognition by content, header errors, and the hint of a
// symbol lookup in a set without symbols.
func TestBTFOpen(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hdr := func(version byte, hdrLen, typeLen, strLen uint32, total int) []byte {
		b := make([]byte, total)
		b[0], b[1], b[2] = 0x9f, 0xeb, version
		le := func(off int, v uint32) {
			b[off], b[off+1], b[off+2], b[off+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		}
		le(4, hdrLen)
		le(8, 0)
		le(12, typeLen)
		le(16, typeLen)
		le(20, strLen)
		return b
	}
	// The smallest valid BTF: no types, a string table of one NUL.
	ok := write("tiny.btf", hdr(1, 24, 0, 1, 25))
	tb, err := Open(ok)
	if err != nil {
		t.Fatal(err)
	}
	if tb.Format() != FormatBTF || !tb.HasBTF() || tb.HasDWARF() || tb.Len() != 0 || tb.BuildID() != nil {
		t.Errorf("tiny.btf: Format %q HasBTF %v HasDWARF %v Len %d", tb.Format(), tb.HasBTF(), tb.HasDWARF(), tb.Len())
	}
	s := NewSet(tb)
	if _, err := s.Sizeof("int"); err == nil || !strings.Contains(err.Error(), `type "int" not found in `+ok) {
		t.Errorf("Sizeof(int) on empty BTF = %v", err)
	}
	var nf *NotFoundError
	if _, err := s.Lookup("jiffies"); !errors.As(err, &nf) || !strings.Contains(err.Error(), "carries types (BTF) but no symbols: add a System.map") {
		t.Errorf("Lookup on BTF only = %v; want a NotFoundError saying the file has no symbols", err)
	}
	s.Add(mustOpen(t, "testdata/kallsyms"))
	if _, err := s.Lookup("no_such_symbol"); err == nil || strings.Contains(err.Error(), "carries types") {
		t.Errorf("Lookup with kallsyms too = %v; want a plain not found", err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		err  string
	}{
		{"v2.btf", hdr(2, 24, 0, 1, 25), "unknown format"}, // not recognised as BTF: version 1 only
		{"short.btf", hdr(1, 24, 0, 1, 25)[:20], "BTF header: 20 bytes"},
		{"hdrlen.btf", hdr(1, 8, 0, 1, 25), "header length 8"},
		{"past.btf", hdr(1, 24, 100, 1, 25), "runs past the end"},
	} {
		_, err := Open(write(tc.name, tc.b))
		if tc.err == "unknown format" {
			if !errors.Is(err, ErrUnknownFormat) {
				t.Errorf("%s: %v; want ErrUnknownFormat", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: Open = %v; want %q", tc.name, err, tc.err)
		}
	}
	// A header that passes Open but types that cilium refuses: the first
	// query says so.
	bad := hdr(1, 24, 12, 1, 24+12+1)
	bad[24+7] = 0x7f // kind 31: unknown
	tb, err = Open(write("badtypes.btf", bad))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewSet(tb).Sizeof("int"); err == nil || !strings.Contains(err.Error(), "read BTF of") {
		t.Errorf("Sizeof on bad types = %v; want a read BTF error", err)
	}
}

// TestBTFChanged: the file must be the one Open saw.
func TestBTFChanged(t *testing.T) {
	b := needBTFFixtures(t)
	if b.gccSkip != "" {
		testkit.SkipOrFail(t, "%s", b.gccSkip)
	}
	p := filepath.Join(t.TempDir(), "x.btf")
	data, err := os.ReadFile(b.gccRaw[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	tb := mustOpen(t, p)
	if err := os.WriteFile(p, append(data, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := NewSet(tb).Sizeof("struct layout"); !errors.Is(err, ErrChanged) {
		t.Errorf("Sizeof after the file grew = %v; want ErrChanged", err)
	}
}

// kernelBTF copies this machine's /sys/kernel/btf/vmlinux (about 5 MB; not
// committed) into a temporary file. It skips the test when the kernel has
// none, except under CI=true.
func kernelBTF(t testing.TB) string {
	t.Helper()
	const sys = "/sys/kernel/btf/vmlinux"
	in, err := os.Open(sys)
	if err != nil {
		testkit.SkipOrFail(t, "%s: %v (a kernel built without CONFIG_DEBUG_INFO_BTF)", sys, err)
	}
	defer in.Close()
	p := filepath.Join(t.TempDir(), "vmlinux.btf")
	out, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// labArtifacts returns the QEMU lab's output folder: a Debian 6.1 vmlinux
// with .BTF and no symbols, and its System.map.
func labArtifacts(t testing.TB) string {
	t.Helper()
	qemulab.Require(t)
	dir, err := qemulab.Artifacts()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// checkAgainstOracle compares every struct and union of a kernel's BTF with
// the hand-rolled reader: Sizeof, and for every member reachable by name
// (through anonymous members), Field's offset and size, or ErrBitField for
// a bit-field. Also Sizeof of every typedef and enum.
func checkAgainstOracle(t *testing.T, s *Set, r *rawBTF) {
	t.Helper()
	start := time.Now()
	seen := map[string]bool{}
	var nTypes, nFields, nBits, nTypedefs int
	for id := 1; id < len(r.types); id++ {
		ty := r.types[id]
		var key string
		switch ty.kind {
		case rkStruct:
			key = "struct " + ty.name
		case rkUnion:
			key = "union " + ty.name
		case rkTypedef:
			key = ty.name
		case rkEnum, rkEnum64:
			if ty.vlen == 0 {
				continue // a forward declaration; a later one may define it
			}
			key = "enum " + ty.name
		default:
			continue
		}
		if ty.name == "" || seen[key] {
			continue // the first definition answers
		}
		seen[key] = true
		want, ok := r.sizeof(uint32(id))
		got, err := s.Sizeof(key)
		switch {
		case !ok:
			if err == nil {
				t.Errorf("Sizeof(%s) = %d; the oracle finds no size", key, got)
			}
		case err != nil || got != want:
			t.Errorf("Sizeof(%s) = %d, %v; oracle %d", key, got, err, want)
		}
		if ty.kind == rkTypedef {
			nTypedefs++
			continue
		}
		nTypes++
		if ty.kind != rkStruct && ty.kind != rkUnion {
			continue
		}
		for _, fl := range r.fields(uint32(id)) {
			off, size, err := s.Field(key, fl.name)
			if fl.bitfield {
				nBits++
				if !errors.Is(err, ErrBitField) {
					t.Errorf("Field(%s, %s) = %d, %d, %v; the oracle says bit-field", key, fl.name, off, size, err)
				}
				continue
			}
			nFields++
			wsize, ok := r.sizeof(fl.typ)
			if err != nil || off != fl.bitOff/8 || ok && size != wsize {
				t.Errorf("Field(%s, %s) = %d, %d, %v; oracle %d, %d", key, fl.name, off, size, err, fl.bitOff/8, wsize)
			}
		}
	}
	t.Logf("oracle: %d structs, unions and enums, %d typedefs, %d fields, %d bit-fields agree (%v)", nTypes, nTypedefs, nFields, nBits, time.Since(start).Round(time.Millisecond))
	if nTypes < 1000 || nFields < 10000 {
		t.Errorf("only %d types and %d fields compared", nTypes, nFields)
	}
}

// bpftoolStructs parses "bpftool btf dump file F format raw": for the first
// struct or union of each name, its size and its direct named members that
// are not bit-fields, in bytes.
func bpftoolStructs(t *testing.T, bpftool, file string) map[string]struct {
	size    uint64
	members map[string]uint64
} {
	t.Helper()
	out := run(t, bpftool, "btf", "dump", "file", file, "format", "raw")
	head := regexp.MustCompile(`^\[\d+\] (STRUCT|UNION) '([^']*)' size=(\d+) vlen=\d+$`)
	mem := regexp.MustCompile(`^\t'([^']*)' type_id=\d+ bits_offset=(\d+)( bitfield_size=(\d+))?$`)
	res := map[string]struct {
		size    uint64
		members map[string]uint64
	}{}
	cur := ""
	for _, line := range strings.Split(out, "\n") {
		if m := head.FindStringSubmatch(line); m != nil {
			cur = ""
			key := strings.ToLower(m[1]) + " " + m[2]
			if _, dup := res[key]; m[2] == "(anon)" || dup {
				continue
			}
			size, _ := strconv.ParseUint(m[3], 10, 64)
			res[key] = struct {
				size    uint64
				members map[string]uint64
			}{size, map[string]uint64{}}
			cur = key
			continue
		}
		if !strings.HasPrefix(line, "\t") {
			cur = ""
			continue
		}
		if m := mem.FindStringSubmatch(line); m != nil && cur != "" && m[1] != "(anon)" && (m[4] == "" || m[4] == "0") {
			bits, _ := strconv.ParseUint(m[2], 10, 64)
			if bits%8 == 0 {
				res[cur].members[m[1]] = bits / 8
			}
		}
	}
	return res
}

// checkAgainstBpftool compares every struct and union, and their direct
// members, with bpftool's dump of the same file.
func checkAgainstBpftool(t *testing.T, s *Set, file string) {
	t.Helper()
	bpftool := optionalTool(t, "bpftool", "bpftool")
	if bpftool == "" {
		return
	}
	structs := bpftoolStructs(t, bpftool, file)
	n := 0
	for key, st := range structs {
		if got, err := s.Sizeof(key); err != nil || got != st.size {
			t.Errorf("bpftool: Sizeof(%s) = %d, %v; bpftool says %d", key, got, err, st.size)
		}
		for name, off := range st.members {
			if got, err := s.Offsetof(key, name); err != nil || got != off {
				t.Errorf("bpftool: Offsetof(%s, %s) = %d, %v; bpftool says %d", key, name, got, err, off)
			}
			n++
		}
	}
	t.Logf("bpftool: %d structs and unions, %d members agree", len(structs), n)
	if len(structs) < 1000 {
		t.Errorf("bpftool: only %d structs parsed", len(structs))
	}
}

// paholeMembers runs "pahole -C NAME FILE" and returns the offset and size
// pahole prints for each top-level member that is not a bit-field.
func paholeMembers(t *testing.T, pahole, file, name string) map[string][2]uint64 {
	t.Helper()
	out := run(t, pahole, "-C", name, file)
	re := regexp.MustCompile(`^\t[^\t].*?[ *](\w+)(\[\d+\])*;\s+/\*\s+(\d+)\s+(\d+)\s+\*/`)
	res := map[string][2]uint64{}
	for _, line := range strings.Split(out, "\n") {
		if m := re.FindStringSubmatch(line); m != nil {
			off, _ := strconv.ParseUint(m[3], 10, 64)
			size, _ := strconv.ParseUint(m[4], 10, 64)
			res[m[1]] = [2]uint64{off, size}
		}
	}
	if len(res) == 0 {
		t.Fatalf("pahole -C %s %s: no members parsed:\n%s", name, file, out)
	}
	return res
}

// checkAgainstPahole compares the members of task_struct and pt_regs that
// the guest-kernel code reads with pahole's listing of the same file.
func checkAgainstPahole(t *testing.T, s *Set, file string) {
	t.Helper()
	pahole := optionalTool(t, "pahole", "dwarves")
	if pahole == "" {
		return
	}
	for _, tc := range []struct {
		typ    string
		fields []string // nil: every top-level member
	}{
		{"task_struct", []string{"pid", "tgid", "stack", "comm", "real_parent", "mm", "flags"}},
		{"pt_regs", nil},
	} {
		members := paholeMembers(t, pahole, file, tc.typ)
		fields := tc.fields
		if fields == nil {
			for name := range members {
				fields = append(fields, name)
			}
		}
		for _, name := range fields {
			want, ok := members[name]
			if !ok {
				t.Errorf("pahole -C %s: no member %s", tc.typ, name)
				continue
			}
			off, size, err := s.Field("struct "+tc.typ, name)
			if err != nil || off != want[0] || size != want[1] {
				t.Errorf("pahole: Field(struct %s, %s) = %d, %d, %v; pahole says %d, %d", tc.typ, name, off, size, err, want[0], want[1])
			}
		}
		t.Logf("pahole: struct %s: %d members agree", tc.typ, len(fields))
	}
}

// ptRegs is the x86-64 struct pt_regs (arch/x86/include/asm/ptrace.h): the
// order in which the entry code pushes the general registers, then orig_ax,
// then the frame the CPU pushes on an interrupt (ip, cs, flags, sp, ss).
// It is kernel ABI (ptrace's PTRACE_GETREGS offsets in the kernel's view,
// the unwinders, BPF's PT_REGS_* macros) and has not changed since the i386
// and x86_64 trees merged in 2.6.25; 6.9 turned cs and ss into unions with
// FRED bits, keeping the offsets and the size, 168.
var ptRegs = []string{"r15", "r14", "r13", "r12", "bp", "bx", "r11", "r10", "r9", "r8",
	"ax", "cx", "dx", "si", "di", "orig_ax", "ip", "cs", "flags", "sp", "ss"}

func checkPtRegs(t *testing.T, s *Set, wantSizes bool) {
	t.Helper()
	if v, err := s.Sizeof("struct pt_regs"); err != nil || v != 168 {
		t.Errorf("Sizeof(struct pt_regs) = %d, %v; want 168", v, err)
	}
	for i, name := range ptRegs {
		off, size, err := s.Field("struct pt_regs", name)
		if err != nil || off != uint64(8*i) || wantSizes && size != 8 {
			t.Errorf("Field(struct pt_regs, %s) = %d, %d, %v; want %d, 8", name, off, size, err, 8*i)
		}
	}
}

// TestBTFRunningKernel reads this machine's kernel BTF (a copy of
// /sys/kernel/btf/vmlinux) and checks it against the hand-rolled reader,
// bpftool and pahole.
func TestBTFRunningKernel(t *testing.T) {
	testkit.SkipShort(t, "reads the whole kernel BTF")
	p := kernelBTF(t)
	tb := mustOpen(t, p)
	if tb.Format() != FormatBTF || !tb.HasBTF() || tb.Len() != 0 {
		t.Fatalf("%s: Format %q, HasBTF %v, Len %d", p, tb.Format(), tb.HasBTF(), tb.Len())
	}
	s := NewSet(tb)
	var nf *NotFoundError
	if _, err := s.Lookup("jiffies"); !errors.As(err, &nf) || !strings.Contains(err.Error(), p+" carries types (BTF) but no symbols") {
		t.Errorf("Lookup(jiffies) on BTF only = %v", err)
	}
	if runtime.GOARCH == "amd64" {
		checkPtRegs(t, s, false) // cs and ss are unions since 6.9
	}
	checkAgainstOracle(t, s, readRawBTF(t, p))
	checkAgainstBpftool(t, s, p)
	checkAgainstPahole(t, s, p)
	// Opening the sysfs file itself works too.
	if v, err := NewSet(mustOpen(t, "/sys/kernel/btf/vmlinux")).Sizeof("struct task_struct"); err != nil || v == 0 {
		t.Errorf("Sizeof(struct task_struct) from /sys/kernel/btf/vmlinux = %d, %v", v, err)
	}
}

// TestBTFLabKernel reads the lab's Debian 6.1 vmlinux: an ELF with .BTF, no
// symbol table and no DWARF, with its System.map.
func TestBTFLabKernel(t *testing.T) {
	testkit.SkipShort(t, "reads the whole kernel BTF")
	dir := labArtifacts(t)
	vmlinux, sysmap := filepath.Join(dir, "vmlinux"), filepath.Join(dir, "System.map")
	vt := mustOpen(t, vmlinux)
	if vt.Format() != FormatELF || !vt.HasBTF() || vt.HasDWARF() || vt.Len() != 0 || vt.BuildID() == nil {
		t.Fatalf("%s: Format %q, HasBTF %v, HasDWARF %v, Len %d, build ID %x", vmlinux, vt.Format(), vt.HasBTF(), vt.HasDWARF(), vt.Len(), vt.BuildID())
	}
	s := NewSet(vt)
	checkPtRegs(t, s, true)
	checkAgainstOracle(t, s, readRawBTF(t, vmlinux))
	checkAgainstBpftool(t, s, vmlinux)
	checkAgainstPahole(t, s, vmlinux)

	// Only vmlinux: types yes, symbols no, and the error says what to add.
	if _, err := s.Lookup("jiffies"); err == nil || !strings.Contains(err.Error(), "carries types (BTF) but no symbols: add a System.map") {
		t.Errorf("Lookup(jiffies) on vmlinux alone = %v", err)
	}

	// With the System.map, in either order: symbols from the map, types
	// from the BTF.
	want := mapAddress(t, sysmap, "jiffies")
	pid := oracleOffset(t, readRawBTF(t, vmlinux), "task_struct", "pid")
	for _, set := range []*Set{NewSet(vt, mustOpen(t, sysmap)), NewSet(mustOpen(t, sysmap), mustOpen(t, vmlinux))} {
		sym, err := set.Lookup("jiffies")
		if err != nil || sym.Addr != want {
			t.Errorf("Lookup(jiffies) = %#x, %v; System.map says %#x", sym.Addr, err, want)
		}
		if off, err := set.Offsetof("struct task_struct", "pid"); err != nil || off != pid {
			t.Errorf("Offsetof(struct task_struct, pid) = %d, %v; oracle %d", off, err, pid)
		}
		if got, off, ok := set.Nearest(want + 4); !ok || got.Addr != want || off != 4 {
			t.Errorf("Nearest(jiffies+4) = %+v+%d, %v", got, off, ok)
		}
	}

	// The running kernel's BTF says the same when it is the same kernel.
	kver := buildInfo(t, dir, "KVER")
	if rel := unameRelease(t); rel != kver {
		t.Logf("running kernel %s is not the lab's %s: its BTF is not compared with the lab's", rel, kver)
		return
	}
	rs := NewSet(mustOpen(t, kernelBTF(t)))
	for _, q := range [][2]string{{"struct task_struct", "pid"}, {"struct task_struct", "tgid"}, {"struct task_struct", "stack"}, {"struct pt_regs", "ss"}} {
		o1, s1, e1 := s.Field(q[0], q[1])
		o2, s2, e2 := rs.Field(q[0], q[1])
		if e1 != nil || e2 != nil || o1 != o2 || s1 != s2 {
			t.Errorf("Field(%s, %s): vmlinux %d, %d, %v; running kernel %d, %d, %v", q[0], q[1], o1, s1, e1, o2, s2, e2)
		}
	}
}

// oracleOffset is the byte offset of a direct member of the first struct
// of that name, by the hand-rolled reader.
func oracleOffset(t *testing.T, r *rawBTF, typ, member string) uint64 {
	t.Helper()
	id, ok := r.structID(rkStruct, typ)
	if !ok {
		t.Fatalf("oracle: no struct %s", typ)
	}
	for _, f := range r.fields(id) {
		if f.name == member {
			return f.bitOff / 8
		}
	}
	t.Fatalf("oracle: struct %s has no member %s", typ, member)
	return 0
}

// mapAddress reads name's address from a System.map with plain string
// handling, independent of the package's parser.
func mapAddress(t *testing.T, path, name string) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[2] == name {
			v, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("%s: no %s", path, name)
	return 0
}

func buildInfo(t *testing.T, dir, key string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "BUILDINFO"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+"="); ok {
			return v
		}
	}
	t.Fatalf("BUILDINFO has no %s", key)
	return ""
}

func unameRelease(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// BenchmarkBTFCost measures the costs docs/symbols.md reports, on this
// machine's kernel BTF (or SYMBOLS_BTF=FILE), once (cold caches):
//
//	go test -run '^$' -bench BTFCost -benchtime 1x -v ./symbols/
func BenchmarkBTFCost(b *testing.B) {
	t := b
	p := os.Getenv("SYMBOLS_BTF")
	if p == "" {
		p = kernelBTF(t)
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc >> 20
	}
	base := heap()
	step := func(what string, f func() string) {
		start := time.Now()
		res := f()
		t.Logf("%-45s %10v  heap +%3d MiB  %s", what, time.Since(start).Round(time.Microsecond), heap()-base, res)
	}
	var tb *Table
	step("Open", func() string { tb = mustOpen(t, p); return "" })
	s := NewSet(tb)
	step("parse BTF (cilium LoadSpecFromReader)", func() string {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		if _, err := tb.loadBTF(); err != nil {
			t.Fatal(err)
		}
		return ""
	})
	result := func(v uint64, err error) string {
		if err != nil {
			return "error: " + err.Error()
		}
		return "= " + itoa(v)
	}
	step("first Sizeof(struct task_struct)", func() string { return result(s.Sizeof("struct task_struct")) })
	step("Offsetof(struct task_struct, pid)", func() string { return result(s.Offsetof("struct task_struct", "pid")) })
	step("Offsetof(struct task_struct, pid) again", func() string { return result(s.Offsetof("struct task_struct", "pid")) })
	step("Offsetof(struct sk_buff, len) (new type)", func() string { return result(s.Offsetof("struct sk_buff", "len")) })
	step("Sizeof(unsigned long)", func() string { return result(s.Sizeof("unsigned long")) })
	step("Sizeof(struct task_strct) (decodes all)", func() string { return result(s.Sizeof("struct task_strct")) })
	step("Sizeof(struct no_such_type) (after)", func() string { return result(s.Sizeof("struct no_such_type")) })
	runtime.KeepAlive(s)
}

// BenchmarkBTFLoad is Open and the first query of a kernel's BTF.
func BenchmarkBTFLoad(b *testing.B) {
	p := kernelBTF(b)
	b.ReportAllocs()
	for b.Loop() {
		s := NewSet(mustOpen(b, p))
		if _, err := s.Offsetof("struct task_struct", "pid"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBTFField is a cached Field query.
func BenchmarkBTFField(b *testing.B) {
	s := NewSet(mustOpen(b, kernelBTF(b)))
	if _, _, err := s.Field("struct task_struct", "pid"); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, _, err := s.Field("struct task_struct", "pid"); err != nil {
			b.Fatal(err)
		}
	}
}

// marshalBTF encodes types as raw BTF with cilium's encoder: test input
// that no compiler writes (cycles, shared anonymous members, huge arrays).
func marshalBTF(t testing.TB, types ...btf.Type) []byte {
	t.Helper()
	b, err := btf.NewBuilder(types, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := b.Marshal(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// hostileBTF is BTF that a careless walk would loop on or take forever with.
func hostileBTF(t testing.TB) []byte {
	i32 := &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}
	// struct loop { struct loop; struct loop; int b; }: contains itself
	// through anonymous members.
	loop := &btf.Struct{Name: "loop", Size: 4}
	loop.Members = []btf.Member{{Type: loop}, {Type: loop}, {Name: "b", Type: i32}}
	// 40 levels, each with two anonymous members of the next: 2^40 paths.
	var next btf.Type = &btf.Struct{Name: "", Size: 4, Members: []btf.Member{{Name: "leaf", Type: i32}}}
	for range 40 {
		next = &btf.Struct{Size: 4, Members: []btf.Member{{Type: next}, {Type: next}}}
	}
	deep := &btf.Struct{Name: "deep", Size: 4, Members: []btf.Member{{Type: next}}}
	// typedef a -> typedef b -> typedef a.
	ta := &btf.Typedef{Name: "ta"}
	tb := &btf.Typedef{Name: "tb", Type: ta}
	ta.Type = tb
	// A struct whose array member would be 2^64 bytes.
	big := &btf.Struct{Name: "big", Size: 0xffffffff}
	huge := &btf.Struct{Name: "huge", Size: 8, Members: []btf.Member{
		{Name: "a", Type: &btf.Array{Index: i32, Type: big, Nelems: 0xffffffff}},
	}}
	return marshalBTF(t, loop, deep, tb, huge)
}

// TestBTFHostile: cycles and blow-ups end at once with an error: the
// member walks visit each type once a query (the file has 50 types; a walk
// without its memory would take 2^40 paths through struct deep). The
// queries run aside while the test watches the walks' count, so that a
// blow-up fails at once, with its count, instead of running till the
// test's timeout.
func TestBTFHostile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "hostile.btf")
	if err := os.WriteFile(p, hostileBTF(t), 0o644); err != nil {
		t.Fatal(err)
	}
	tb := mustOpen(t, p)
	tb.mu.Lock()
	bi, err := tb.loadBTF()
	tb.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	const queries, types = 8, 50
	const bound = queries * (types + 1)
	s := NewSet(tb)
	errs := make(chan []string, 1)
	go func() {
		var e []string
		if v, err := s.Offsetof("struct loop", "b"); err != nil || v != 0 {
			e = append(e, fmt.Sprintf("Offsetof(loop, b) = %d, %v", v, err))
		}
		var nf *NotFoundError
		if _, err := s.Offsetof("struct loop", "x"); !errors.As(err, &nf) {
			e = append(e, fmt.Sprintf("Offsetof(loop, x) = %v; want not found", err))
		}
		if v, err := s.Offsetof("struct deep", "leaf"); err != nil || v != 0 {
			e = append(e, fmt.Sprintf("Offsetof(deep, leaf) = %d, %v", v, err))
		}
		if _, err := s.Offsetof("struct deep", "leaff"); !errors.As(err, &nf) || nf.Suggestions[0] != "leaf" {
			e = append(e, fmt.Sprintf("Offsetof(deep, leaff) = %v; want not found, suggesting leaf", err))
		}
		if _, err := s.Sizeof("ta"); err == nil || !strings.Contains(err.Error(), "typedef chain longer than") {
			e = append(e, fmt.Sprintf("Sizeof(ta) = %v; want a chain error", err))
		}
		if _, err := s.Sizeof("struct huge"); err != nil {
			e = append(e, fmt.Sprintf("Sizeof(huge) = %v", err))
		}
		if _, _, err := s.Field("struct huge", "a"); err == nil || !strings.Contains(err.Error(), "overflows") {
			e = append(e, fmt.Sprintf("Field(huge, a) = %v; want an overflow", err))
		}
		if _, err := s.Offsetof("struct huge", "a[4294967294]"); err == nil || !strings.Contains(err.Error(), "overflows") {
			e = append(e, fmt.Sprintf("Offsetof(huge, a[max]) = %v; want an overflow", err))
		}
		errs <- e
	}()
	for {
		select {
		case e := <-errs:
			for _, m := range e {
				t.Error(m)
			}
			if n := bi.visits.Load(); n > bound {
				t.Errorf("the member walks took %d steps, more than %d", n, bound)
			}
			t.Logf("%d member-walk steps", bi.visits.Load())
			return
		default:
		}
		if n := bi.visits.Load(); n > bound {
			t.Fatalf("the member walks are past %d steps (%d): a blow-up", bound, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// FuzzBTF feeds arbitrary bytes to the BTF header check and, when it
// passes, to cilium's parser and the layout walk: nothing may panic.
func FuzzBTF(f *testing.F) {
	f.Add(hostileBTF(f))
	i32 := &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}
	inner := &btf.Struct{Size: 8, Members: []btf.Member{{Name: "x", Type: i32}, {Name: "bits", Type: i32, Offset: 32, BitfieldSize: 3}}}
	f.Add(marshalBTF(f, &btf.Struct{Name: "a", Size: 16, Members: []btf.Member{
		{Name: "b", Type: &btf.Array{Index: i32, Type: i32, Nelems: 2}},
		{Type: inner, Offset: 64},
	}}, &btf.Typedef{Name: "a_t", Type: &btf.Const{Type: i32}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		if !isBTF(data) || checkBTFHeader(data, int64(len(data))) != nil {
			return
		}
		bi, err := newBTFInfo(data, 8)
		if err != nil {
			return
		}
		tb := &Table{path: "fuzz", format: FormatBTF, hasBTF: true, ptrSize: 8, bt: bi}
		s := NewSet(tb)
		for _, q := range [][2]string{{"struct a", ""}, {"struct a", "b[1]"}, {"struct a", "x"}, {"struct a", "bits"}, {"a_t", ""}, {"struct loop", "x"}, {"int", ""}, {"unsigned long", ""}} {
			if q[1] == "" {
				s.Sizeof(q[0])
			} else {
				s.Field(q[0], q[1])
			}
		}
		s.Sizeof("struct no_such_type") // suggestions decode every type
	})
}
