package ppdf

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/rpn"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// header returns a valid header with the DPDF defaults.
func header(name string) rpn.Header {
	return rpn.Header{
		Name:     name,
		ModType:  rpn.ModUser,
		JmpMax:   rpn.DefaultJmpMax,
		LogMax:   rpn.DefaultLogMax,
		DfltExit: rpn.DefaultDfltExit,
	}
}

// tinyModule is the example of docs/ppdf.md: one probe on main in ./a.out
// whose program is "push r,rdi; log 1; exit 1". Its bytes depend on the
// numbering of rpn opcodes and registers, which the PPDF format freezes.
func tinyModule() *rpn.Module {
	return &rpn.Module{
		Header: header("./a.out"),
		Probes: []rpn.Probe{{
			Loc:   rpn.Location{Text: "main", Kind: rpn.LocExpr, Sum: sym("main"), Addr: 0x401136, Resolved: true},
			Entry: 0,
			End:   7,
			Pos:   rpn.Pos{File: 0, Line: 3, Col: 1},
		}},
		Code: []byte{
			byte(rpn.OpPushR), byte(rpn.RegRDI), 0,
			byte(rpn.OpLogN), 1,
			byte(rpn.OpExit), 1,
		},
		Lines: []rpn.LineEntry{
			{PC: 0, Pos: rpn.Pos{File: 0, Line: 4, Col: 1}},
			{PC: 3, Pos: rpn.Pos{File: 0, Line: 5, Col: 1}},
			{PC: 5, Pos: rpn.Pos{File: 0, Line: 6, Col: 1}},
		},
		Files:   []string{"hello.dpdf"},
		BuildID: nil,
	}
}

// sym is the Sum of a location or relocation that is one symbol.
func sym(name string) rpn.Sum {
	return rpn.Sum{Terms: []rpn.Term{{Kind: rpn.TermSymbol, Factor: 1, Name: name}}}
}

// fullModule sets every field, most of them to extreme values, on i386
// kernel code with a 20-byte build ID and non-ASCII file names: a probe of
// every kind and every location kind, disabled ones, and a field table.
func fullModule() *rpn.Module {
	m := fullModuleV3()
	m.Probes[1].Disabled = true
	m.Probes[4].Disabled = true
	m.Probes = append(m.Probes,
		rpn.Probe{
			Kind:      rpn.ProbeWatch,
			WatchLen:  4,
			WatchMode: rpn.WatchReadWrite,
			Disabled:  true,
			Loc: rpn.Location{Text: "jiffies + offsetof(struct s, f)", Kind: rpn.LocExpr, Addr: 0xc2000004, Resolved: true,
				Sum: rpn.Sum{Terms: []rpn.Term{{Kind: rpn.TermSymbol, Factor: 1, Name: "jiffies"}, {Kind: rpn.TermOffsetof, Factor: 1, Name: "struct s", Field: "f"}}}},
			Minor: 5,
			Entry: 150,
			End:   200,
			Pos:   rpn.Pos{File: 0, Line: 30, Col: 1},
		},
		rpn.Probe{
			Kind:      rpn.ProbeWatch,
			WatchLen:  1,
			WatchMode: rpn.WatchWrite,
			Loc:       rpn.Location{Text: "0xc0100001", Kind: rpn.LocAbsolute, Addr: 0xc0100001, Resolved: true},
			Minor:     math.MaxUint16,
			Entry:     200,
			End:       200,
			Pos:       rpn.Pos{File: 0, Line: 40, Col: 1},
		},
	)
	return m
}

// fullModuleV3 is fullModule as version 3 knew it: no watch probes, none
// disabled. testdata/version3-full.ppdf is its encoding by that version.
func fullModuleV3() *rpn.Module {
	m := fullModuleV2()
	m.Probes = append(m.Probes,
		rpn.Probe{
			Kind:      rpn.ProbeRetprobe,
			MaxActive: rpn.MaxMaxActive,
			Loc:       rpn.Location{Text: "vfs_read", Kind: rpn.LocExpr, Sum: sym("vfs_read"), Addr: 0xc1234560, Resolved: true},
			Minor:     3,
			Entry:     100,
			End:       150,
			Pos:       rpn.Pos{File: 2, Line: 7, Col: 1},
		},
		rpn.Probe{
			Kind:  rpn.ProbeTracepoint,
			Loc:   rpn.Location{Text: "sched:sched_switch", Kind: rpn.LocTracepoint},
			Minor: 4,
			Entry: 150,
			End:   200,
			Pos:   rpn.Pos{File: 0, Line: 20, Col: 1},
		},
	)
	m.Fields = []string{"prev_pid", "next_pid", "Mixed_Case_9", "_"}
	return m
}

// fullModuleV2 is fullModule as version 2 knew it: offset probes only, no
// fields. testdata/version2-full.ppdf is its encoding by that version.
func fullModuleV2() *rpn.Module {
	m := &rpn.Module{
		Header: rpn.Header{
			Name:     "ext4",
			ModType:  rpn.ModKernel,
			Major:    math.MaxUint16,
			JmpMax:   rpn.MaxJmpMax,
			LogMax:   rpn.MaxLogMax,
			DfltExit: rpn.MaxFacility,
			Vars:     rpn.MaxVars,
			GVars:    rpn.MaxGVars,
			Arch:     rpn.ArchI386,
		},
		Files:   []string{"ext4.dpdf", "include/ünïcødé.h", "日本語/パス.h", "bad utf-8 \xff\xfe", ""},
		BuildID: []byte("\x01\x23\x45\x67\x89\xab\xcd\xef\x00\xff\x10\x32\x54\x76\x98\xba\xdc\xfe\x11\x22"),
	}
	m.Code = make([]byte, 200)
	for i := range m.Code {
		m.Code[i] = byte(i*7 + 3)
	}
	m.Probes = []rpn.Probe{
		{
			Loc: rpn.Location{Text: "ext4_file_write_iter+0x1c", Kind: rpn.LocExpr, Addr: math.MaxUint64, Resolved: true,
				Sum: rpn.Sum{Terms: sym("ext4_file_write_iter").Terms, Addend: 0x1c}},
			HasOpcode:  true,
			Opcode:     0xff,
			Minor:      math.MaxUint16,
			PassCount:  math.MaxUint64,
			MaxHits:    math.MaxUint64,
			LogOnFault: true,
			Entry:      0,
			End:        100,
			Pos:        rpn.Pos{File: 4, Line: math.MaxUint32, Col: math.MaxUint32},
		},
		{
			Loc:    rpn.Location{Text: "fs/ext4/ïnode.c:1234", Kind: rpn.LocLine, File: "fs/ext4/ïnode.c", Line: 1234, Addr: 0xdeadbeef},
			Opcode: 0x55, // kept although HasOpcode is false
			Entry:  100,
			End:    200,
			Pos:    rpn.Pos{File: 1, Line: 1},
		},
		{
			Loc:   rpn.Location{Text: "0xc0100000", Kind: rpn.LocAbsolute, Addr: 0xc0100000, Resolved: true},
			Entry: 200,
			End:   200, // empty program at the very end of the code
		},
	}
	m.Lines = []rpn.LineEntry{
		{PC: 0, Pos: rpn.Pos{File: 0, Line: 10, Col: 2}},
		{PC: 0, Pos: rpn.Pos{File: 2, Line: 11}}, // equal PCs are sorted
		{PC: 57, Pos: rpn.Pos{File: 3, Line: math.MaxUint32, Col: math.MaxUint32}},
		{PC: 199, Pos: rpn.Pos{File: 4, Line: 1, Col: 1}},
	}
	m.Relocs = []rpn.Reloc{
		{Off: 1, Expr: "sizeof(struct task_struct)", Value: 0x1d40, Resolved: true,
			Sum: rpn.Sum{Terms: []rpn.Term{{Kind: rpn.TermSizeof, Factor: 1, Name: "struct task_struct"}}}},
		{Off: 9, Expr: "offsetof(struct task_struct, pid)", // unresolved
			Sum: rpn.Sum{Terms: []rpn.Term{{Kind: rpn.TermOffsetof, Factor: 1, Name: "struct task_struct", Field: "pid"}}}},
		{Off: 100, Expr: "2*(jiffies - sizeof(long)) - init_task + ~offsetof(struct s, a[3].b)", Value: 0x1234, Resolved: true,
			Sum: rpn.Sum{Terms: []rpn.Term{
				{Kind: rpn.TermSymbol, Factor: 2, Name: "jiffies"},
				{Kind: rpn.TermSizeof, Factor: math.MaxUint64 - 1, Name: "long"},
				{Kind: rpn.TermSymbol, Factor: math.MaxUint64, Name: "init_task"},
				{Kind: rpn.TermOffsetof, Factor: math.MaxUint64, Name: "struct s", Field: "a[3].b"},
			}, Addend: math.MaxUint64}},
		{Off: 192, Expr: "jiffies", Value: math.MaxUint64, Resolved: true, Sum: sym("jiffies")},
	}
	return m
}

// emptyModule has the smallest valid content: no probes, no code, nothing.
func emptyModule() *rpn.Module {
	return &rpn.Module{Header: header("")}
}

// manyModule has n probes, each with its own code, lines and a reloc.
func manyModule(n int) *rpn.Module {
	m := &rpn.Module{Header: header("/lib/x86_64-linux-gnu/libc.so.6"), Files: []string{"libc.dpdf", "defs.h"}}
	m.Header.Vars, m.Header.GVars = 16, 3
	for i := range n {
		start := uint32(len(m.Code))
		m.Code = append(m.Code, byte(rpn.OpPushD), 0, 0, 0, 0, 0, 0, 0, 0, byte(rpn.OpExit), 1)
		m.Probes = append(m.Probes, rpn.Probe{
			Loc: rpn.Location{Text: fmt.Sprintf("func%d+%#x", i, i), Addr: uint64(0x10000 + i*16), Resolved: i%2 == 0,
				Sum: rpn.Sum{Terms: sym(fmt.Sprintf("func%d", i)).Terms, Addend: uint64(i)}},
			HasOpcode: i%3 == 0, Opcode: byte(i), Minor: uint16(i), PassCount: uint64(i), MaxHits: uint64(i * 2),
			LogOnFault: i%5 == 0,
			Entry:      start, End: uint32(len(m.Code)),
			Pos: rpn.Pos{File: uint16(i % 2), Line: uint32(i + 1), Col: 1},
		})
		m.Lines = append(m.Lines, rpn.LineEntry{PC: start, Pos: rpn.Pos{Line: uint32(i + 2)}})
		m.Relocs = append(m.Relocs, rpn.Reloc{Off: start + 1, Expr: fmt.Sprintf("sym%d", i), Sum: sym(fmt.Sprintf("sym%d", i)), Value: uint64(i), Resolved: i%2 == 1})
	}
	return m
}

// canonical returns a copy of m in the form Decode returns: nil for every
// empty slice.
func canonical(m *rpn.Module) *rpn.Module {
	c := *m
	if len(c.Probes) == 0 {
		c.Probes = nil
	}
	if len(c.Code) == 0 {
		c.Code = nil
	}
	if len(c.Lines) == 0 {
		c.Lines = nil
	}
	if len(c.Files) == 0 {
		c.Files = nil
	}
	if len(c.Relocs) == 0 {
		c.Relocs = nil
	}
	if len(c.BuildID) == 0 {
		c.BuildID = nil
	}
	if len(c.Fields) == 0 {
		c.Fields = nil
	}
	return &c
}

func mustEncode(t testing.TB, m *rpn.Module) []byte {
	t.Helper()
	b, err := Encode(m)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return b
}

func roundTripModules() map[string]*rpn.Module {
	empty := emptyModule()
	emptyNonNil := emptyModule()
	emptyNonNil.Probes, emptyNonNil.Code, emptyNonNil.Lines = []rpn.Probe{}, []byte{}, []rpn.LineEntry{}
	emptyNonNil.Files, emptyNonNil.Relocs, emptyNonNil.BuildID = []string{}, []rpn.Reloc{}, []byte{}

	x86 := tinyModule()
	x86.BuildID = bytes.Repeat([]byte{0xab}, 20)
	i386 := tinyModule()
	i386.Arch = rpn.ArchI386
	i386.ModType = rpn.ModKernel
	i386.Name = "vmlinux"

	long := fullModule()
	long.Name = strings.Repeat("n", MaxString)
	long.Probes[0].Loc.Text = strings.Repeat("é", MaxString/2)
	long.Files[1] = strings.Repeat("/", MaxString)
	long.Relocs[3].Expr = strings.Repeat("x", MaxString)
	long.Relocs[3].Sum.Terms[0].Name = strings.Repeat("y", MaxString)
	long.Probes[1].Loc.File = strings.Repeat("z", MaxString)
	long.Relocs[2].Sum.Terms[3].Field = strings.Repeat("f", MaxString)
	long.Fields[0] = strings.Repeat("F", MaxString)
	long.Probes[4].Loc.Text = strings.Repeat("s", MaxString/2) + ":" + strings.Repeat("e", MaxString/2-1)
	most := fullModule()
	most.Relocs[0].Sum.Terms = nil
	for i := range rpn.MaxTerms {
		most.Relocs[0].Sum.Terms = append(most.Relocs[0].Sum.Terms, rpn.Term{Kind: rpn.TermKind(i % 3), Factor: uint64(i), Name: fmt.Sprint(i), Field: "f"[:i%3/2]})
	}
	long.BuildID = bytes.Repeat([]byte{0x5a}, MaxBuildID)

	files := emptyModule()
	files.Files = make([]string, MaxFiles)
	for i := range files.Files {
		files.Files[i] = fmt.Sprintf("f%d.h", i)
	}
	files.Code = []byte{byte(rpn.OpNop)}
	files.Lines = []rpn.LineEntry{{PC: 0, Pos: rpn.Pos{File: MaxFiles - 1}}}
	files.Probes = []rpn.Probe{{Loc: rpn.Location{Text: "x"}, End: 1, Pos: rpn.Pos{File: MaxFiles - 1}}}

	low := emptyModule()
	low.JmpMax, low.LogMax, low.DfltExit = 1, 1, 0

	fields := emptyModule()
	fields.Fields = make([]string, MaxFields)
	for i := range fields.Fields {
		fields.Fields[i] = fmt.Sprintf("f%d", i)
	}

	usdt := tinyModule()
	usdt.ModType = rpn.ModUser
	usdt.Probes[0].Kind, usdt.Probes[0].Loc = rpn.ProbeUSDT, rpn.Location{Text: "python:audit", Kind: rpn.LocUSDT}

	return map[string]*rpn.Module{
		"usdt":                    usdt,
		"empty":                   empty,
		"empty-non-nil":           emptyNonNil,
		"tiny":                    tinyModule(),
		"x86_64-20-byte-build-id": x86,
		"i386-kernel":             i386,
		"full":                    fullModule(),
		"many":                    manyModule(1000),
		"longest-strings":         long,
		"most-files":              files,
		"most-terms":              most,
		"most-fields":             fields,
		"lowest-limits":           low,
	}
}

func TestRoundTrip(t *testing.T) {
	for name, m := range roundTripModules() {
		t.Run(name, func(t *testing.T) {
			b := mustEncode(t, m)
			if uint64(len(b)) != encodedSize(m) {
				t.Errorf("len(Encode) = %d, encodedSize = %d", len(b), encodedSize(m))
			}
			got, err := Decode(b)
			if err != nil {
				t.Fatalf("Decode(Encode(m)): %v", err)
			}
			if want := canonical(m); !reflect.DeepEqual(got, want) {
				t.Fatalf("Decode(Encode(m)) differs from m:\ngot  %+v\nwant %+v", summarize(got), summarize(want))
			}
			if again := mustEncode(t, got); !bytes.Equal(again, b) {
				t.Fatal("Encode(Decode(b)) != b")
			}
			// The result must not alias the input.
			for i := range b {
				b[i] = 0
			}
			if !reflect.DeepEqual(got, canonical(m)) {
				t.Fatal("the decoded module changed when the input buffer was overwritten")
			}
		})
	}
}

// summarize keeps failure messages readable for large modules.
func summarize(m *rpn.Module) string {
	if m == nil {
		return "<nil>"
	}
	s := fmt.Sprintf("%+v probes=%d code=%d lines=%d files=%d relocs=%d buildid=%x",
		m.Header, len(m.Probes), len(m.Code), len(m.Lines), len(m.Files), len(m.Relocs), m.BuildID)
	if len(s) > 500 {
		s = s[:500] + "..."
	}
	return s
}

func TestDeterministic(t *testing.T) {
	for name, m := range roundTripModules() {
		a := mustEncode(t, m)
		b := mustEncode(t, m)
		// A deep copy lives in other memory: no pointer may leak into the bytes.
		c := mustEncode(t, deepCopy(m))
		if !bytes.Equal(a, b) || !bytes.Equal(a, c) {
			t.Errorf("%s: Encode is not deterministic", name)
		}
	}
}

func deepCopy(m *rpn.Module) *rpn.Module {
	c := *m
	c.Probes = append([]rpn.Probe(nil), m.Probes...)
	c.Code = bytes.Clone(m.Code)
	c.Lines = append([]rpn.LineEntry(nil), m.Lines...)
	c.Files = append([]string(nil), m.Files...)
	c.Relocs = append([]rpn.Reloc(nil), m.Relocs...)
	c.BuildID = bytes.Clone(m.BuildID)
	c.Fields = append([]string(nil), m.Fields...)
	return &c
}

// TestGolden fails when the bytes Encode writes change. If the change is
// intended, bump Version, update docs/ppdf.md and run go test -update.
func TestGolden(t *testing.T) {
	for _, g := range []struct {
		file string
		m    *rpn.Module
	}{
		{"tiny.ppdf", tinyModule()},
		{"full.ppdf", fullModule()},
		{"empty.ppdf", emptyModule()},
	} {
		path := filepath.Join("testdata", g.file)
		got := mustEncode(t, g.m)
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -update to create it)", err)
		}
		if !bytes.Equal(got, want) {
			i := 0
			for i < len(got) && i < len(want) && got[i] == want[i] {
				i++
			}
			t.Errorf("%s: encoding changed at byte %d (len %d, golden %d): if intended, bump Version, update docs/ppdf.md and run go test -update", path, i, len(got), len(want))
			continue
		}
		m, err := Decode(want)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if !reflect.DeepEqual(m, canonical(g.m)) {
			t.Errorf("%s decodes to another module", path)
		}
	}
}

// TestModuleShape fails when rpn's module types gain, lose or rename a
// field: the encoder would silently drop it. Encode it, bump Version, then
// update this list.
func TestModuleShape(t *testing.T) {
	want := map[reflect.Type]string{
		reflect.TypeFor[rpn.Module](): "Header Probes Code Lines Files Relocs BuildID Fields",
		reflect.TypeFor[rpn.Header](): "Name ModType Major JmpMax LogMax DfltExit Vars GVars Arch",
		// Format: the optional section 0x80 (a reader of before skips it);
		// AutoStack: flags bit 4 (a reader of before refuses the file)
		reflect.TypeFor[rpn.Probe]():     "Kind Format MaxActive WatchLen WatchMode Disabled Loc HasOpcode Opcode Minor PassCount MaxHits LogOnFault AutoStack Entry End Pos",
		reflect.TypeFor[rpn.Location]():  "Text Kind Sum File Line Addr Resolved",
		reflect.TypeFor[rpn.Sum]():       "Terms Addend",
		reflect.TypeFor[rpn.Term]():      "Kind Factor Name Field",
		reflect.TypeFor[rpn.Pos]():       "File Line Col",
		reflect.TypeFor[rpn.LineEntry](): "PC Pos",
		reflect.TypeFor[rpn.Reloc]():     "Off Expr Sum Value Resolved",
	}
	for typ, fields := range want {
		var got []string
		for f := range typ.Fields() {
			got = append(got, f.Name)
		}
		if g := strings.Join(got, " "); g != fields {
			t.Errorf("rpn.%s has fields %q, ppdf encodes %q: encode the change and bump ppdf.Version", typ.Name(), g, fields)
		}
	}
}

func TestEveryTruncation(t *testing.T) {
	b := mustEncode(t, fullModule())
	for n := range len(b) {
		m, err := Decode(b[:n])
		if err == nil || m != nil {
			t.Fatalf("Decode of the first %d of %d bytes: m=%v err=%v", n, len(b), m != nil, err)
		}
		var te *TruncatedError
		if !errors.As(err, &te) || !errors.Is(err, ErrTruncated) || !strings.HasPrefix(err.Error(), "truncated: ") {
			t.Fatalf("Decode of the first %d of %d bytes: %v, want a truncation error", n, len(b), err)
		}
		if te.Left >= te.Need {
			t.Fatalf("Decode of the first %d bytes: %v: needs no more than it has", n, err)
		}
	}
	_, err := Decode(b[:len(b)-1])
	if want := fmt.Sprintf("truncated: the file needs %d bytes, %d left", len(b), len(b)-1); err.Error() != want {
		t.Errorf("got %q, want %q", err, want)
	}
	_, err = Decode(nil)
	if want := "truncated: the PPDF magic needs 9 bytes, 0 left"; err.Error() != want {
		t.Errorf("got %q, want %q", err, want)
	}
}

func TestTamper(t *testing.T) {
	b := mustEncode(t, fullModule())
	check := func(i int, c []byte) {
		t.Helper()
		_, err := Decode(c)
		var want error
		switch {
		case i < len(magic):
			want = ErrNotPPDF
		case i < len(magic)+2:
			want = ErrVersion
			// another version this package reads: the checksum tells
			if v := binary.LittleEndian.Uint16(c[len(magic):]); v >= MinVersion && v <= Version {
				want = ErrChecksum
			}
		case i < preambleSize:
			// A changed length field reads as truncation, trailing data or
			// a length too small for any PPDF.
			if errors.Is(err, ErrTruncated) || errors.Is(err, ErrTrailing) || errors.Is(err, ErrInvalid) {
				return
			}
			t.Fatalf("byte %d changed: %v, want a length error", i, err)
		default:
			want = ErrChecksum
		}
		if !errors.Is(err, want) {
			t.Fatalf("byte %d changed: %v, want %v", i, err, want)
		}
	}
	c := bytes.Clone(b)
	for i := range c {
		c[i] ^= 0xff
		check(i, c)
		c[i] ^= 0xff
	}
	// Every single bit of the tiny file.
	b = mustEncode(t, tinyModule())
	c = bytes.Clone(b)
	for i := range c {
		for bit := range 8 {
			c[i] ^= 1 << bit
			check(i, c)
			c[i] ^= 1 << bit
		}
	}
	_, err := Decode(append(bytes.Clone(b[:len(b)-1]), b[len(b)-1]^1))
	if err != ErrChecksum || err.Error() != "checksum mismatch: the file is corrupt or was modified" {
		t.Errorf("got %v", err)
	}
}

func TestNotPPDF(t *testing.T) {
	valid := mustEncode(t, tinyModule())
	for _, tc := range []struct {
		name string
		data []byte
		is   error
		msg  string
	}{
		{"elf", []byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00"), ErrNotPPDF, "not a PPDF file"},
		{"short garbage", []byte("PK"), ErrNotPPDF, "not a PPDF file"},
		{"png", []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR"), ErrNotPPDF, "not a PPDF file"},
		{"dpdf", []byte("// count opens\nname = ./a.out\nmodtype = user\n\noffset = main\n  push r,rdi\n  log 1\n  exit 1\n"), ErrNotPPDF,
			"not a PPDF file: looks like a DPDF source file; use gprobes check/build"},
		{"dpdf upper case, cpp", []byte("#include \"defs.h\"\r\nNAME=vmlinux\r\n"), ErrNotPPDF,
			"not a PPDF file: looks like a DPDF source file; use gprobes check/build"},
		{"other text", []byte("hello, world\n"), ErrNotPPDF, "not a PPDF file"},
		{"crlf to lf", bytes.ReplaceAll(valid, []byte("\r\n"), []byte("\n")), ErrNotPPDF,
			"not a PPDF file: its header was changed in transit (CR/LF or 8-bit conversion): copy the file in binary mode"},
		{"lf to crlf", bytes.ReplaceAll(valid, []byte("\n"), []byte("\r\n")), ErrNotPPDF,
			"not a PPDF file: its header was changed in transit (CR/LF or 8-bit conversion): copy the file in binary mode"},
		{"7-bit", append([]byte{0x09}, valid[1:]...), ErrNotPPDF,
			"not a PPDF file: its header was changed in transit (CR/LF or 8-bit conversion): copy the file in binary mode"},
		{"newer", withVersion(valid, 6), ErrVersion,
			"PPDF version 6 is newer than this gprobes reads (2 to 5): upgrade gprobes or rebuild the PPDF"},
		{"older", withVersion(valid, 0), ErrVersion,
			"PPDF version 0 is older than this gprobes reads (2 to 5): rebuild it from its DPDF with gprobes build"},
		{"newer, short", withVersion(valid, 7)[:len(magic)+2], ErrVersion,
			"PPDF version 7 is newer than this gprobes reads (2 to 5): upgrade gprobes or rebuild the PPDF"},
	} {
		m, err := Decode(tc.data)
		if m != nil || !errors.Is(err, tc.is) || err.Error() != tc.msg {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.msg)
		}
	}
	var ve *VersionError
	if _, err := Decode(withVersion(valid, 7)); !errors.As(err, &ve) || ve.Got != 7 || ve.Want != Version || ve.Oldest != MinVersion {
		t.Errorf("got %#v, want a *VersionError{7, %d}", err, Version)
	}
}

func withVersion(b []byte, v uint16) []byte {
	c := bytes.Clone(b)
	binary.LittleEndian.PutUint16(c[len(magic):], v)
	return c
}

// section is one section of an encoded file, for crafting hostile files.
type section struct {
	tag     uint8
	payload []byte
}

func split(t testing.TB, b []byte) []section {
	t.Helper()
	var secs []section
	body := b[preambleSize : len(b)-checksumSize]
	for len(body) > 0 {
		n := binary.LittleEndian.Uint32(body[1:])
		secs = append(secs, section{body[0], bytes.Clone(body[5 : 5+n])})
		body = body[5+n:]
	}
	return secs
}

// assemble builds a file from sections with a correct length field and a
// valid checksum: only the contents can be wrong.
func assemble(secs []section) []byte {
	b := []byte(magic)
	b = binary.LittleEndian.AppendUint16(b, ModuleVersion)
	b = binary.LittleEndian.AppendUint32(b, 0)
	for _, s := range secs {
		b = append(b, s.tag)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s.payload)))
		b = append(b, s.payload...)
	}
	return seal(b)
}

// seal sets the length field and appends the checksum.
func seal(b []byte) []byte {
	binary.LittleEndian.PutUint32(b[len(magic)+2:], uint32(len(b)+checksumSize))
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// crafted encodes m without validating it.
func crafted(t testing.TB, m *rpn.Module) []byte {
	t.Helper()
	b, err := encode(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// patch returns the tiny file with f applied to its sections.
func patch(t testing.TB, f func(secs []section) []section) []byte {
	t.Helper()
	return assemble(f(split(t, mustEncode(t, tinyModule()))))
}

func TestHostile(t *testing.T) {
	mod := func(f func(m *rpn.Module)) []byte {
		m := fullModule()
		f(m)
		return crafted(t, m)
	}
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	tinyProbeText := len("main")
	tinyProbe := probeSize + tinyProbeText + sumSize + termSize + len("main")     // its text and its Sum, one term "main"
	tinyFlags := 4 + 1 + 4 + tinyProbeText + 1 + sumSize + termSize + len("main") // offset of its flags in the section
	for _, tc := range []struct {
		name string
		data []byte
		is   error
		msg  string
	}{
		{"probe count 0xffffffff", patch(t, func(s []section) []section {
			copy(s[3].payload, u32(math.MaxUint32))
			return s
		}), ErrTruncated, fmt.Sprintf("decode probes: truncated: probe count 4294967295 needs %d bytes, %d left", uint64(math.MaxUint32)*probeSize, tinyProbe)},
		{"line count 0xffffffff", patch(t, func(s []section) []section {
			copy(s[5].payload, u32(math.MaxUint32))
			return s
		}), ErrTruncated, "decode lines: truncated: line entry count 4294967295 needs 60129542130 bytes, 42 left"},
		{"reloc count 1, no reloc", patch(t, func(s []section) []section {
			s[6].payload = u32(1)
			return s
		}), ErrTruncated, "decode relocs: truncated: reloc count 1 needs 27 bytes, 0 left"},
		{"file count 0xffff", patch(t, func(s []section) []section {
			s[2].payload[0], s[2].payload[1] = 0xff, 0xff
			return s
		}), ErrTruncated, "decode files: truncated: file count 65535 needs 262140 bytes, 14 left"},
		{"string past the end", patch(t, func(s []section) []section {
			copy(s[3].payload[5:], u32(0xfffffff0))
			return s
		}), ErrTruncated, fmt.Sprintf("decode probes: truncated: probe 0 location text needs 4294967280 bytes, %d left", tinyProbe-5)},
		{"name past the end", patch(t, func(s []section) []section {
			copy(s[0].payload, u32(1000))
			return s
		}), ErrTruncated, "decode header: truncated: name needs 1000 bytes, 24 left"},
		{"section past the end", func() []byte {
			b := mustEncode(t, tinyModule())
			off := preambleSize
			for _, sec := range split(t, b)[:3] {
				off += sectionHead + len(sec.payload)
			}
			binary.LittleEndian.PutUint32(b[off+1:], 1<<30)
			return seal(b[:len(b)-checksumSize])
		}(), ErrTruncated, fmt.Sprintf("decode sections: truncated: section probes needs 1073741824 bytes, %d left", len(mustEncode(t, tinyModule()))-preambleSize-checksumSize-(3*sectionHead+28+0+16)-sectionHead)},
		{"entry past end", mod(func(m *rpn.Module) { m.Probes[1].Entry = 150; m.Probes[1].End = 120 }), ErrInvalid,
			"decode probes: probe 1: entry 150 is past its end 120"},
		{"end past the code", mod(func(m *rpn.Module) { m.Probes[2].Entry = 200; m.Probes[2].End = 201 }), ErrInvalid,
			"decode probes: probe 2: end 201 is past the end of the code (200 bytes)"},
		{"entry past the code", mod(func(m *rpn.Module) { m.Probes[0].Entry = math.MaxUint32; m.Probes[0].End = math.MaxUint32 }), ErrInvalid,
			"decode probes: probe 0: end 4294967295 is past the end of the code (200 bytes)"},
		{"bad arch", mod(func(m *rpn.Module) { m.Arch = 2 }), ErrInvalid, "decode header: arch 2 is neither x86_64 (0) nor i386 (1)"},
		{"bad modtype", mod(func(m *rpn.Module) { m.ModType = 0xff }), ErrInvalid, "decode header: module type 255 is neither user (0) nor kernel (1)"},
		{"bad location kind", mod(func(m *rpn.Module) { m.Probes[2].Loc.Kind = 5 }), ErrInvalid,
			"decode probes: probe 2: location kind 5 is not symbolic (0), line (1), absolute (2), tracepoint (3) or usdt (4)"},
		{"bad usdt location", mod(func(m *rpn.Module) { m.Probes[2].Loc.Kind = 4 }), ErrInvalid,
			`decode probes: probe 2: usdt location "0xc0100000" is not PROVIDER:NAME (letters, digits and _)`},
		{"bad probe kind", mod(func(m *rpn.Module) { m.Probes[1].Kind = 5 }), ErrInvalid,
			"decode probes: probe 1: kind 5 is not offset (0), retprobe (1), tracepoint (2), watch (3) or usdt (4)"},
		{"watch length 3", mod(func(m *rpn.Module) { m.Probes[5].WatchLen = 3 }), ErrInvalid,
			"decode probes: probe 5: watch length 3 is not 1, 2, 4 or 8 (or 0, off a watch probe)"},
		{"watch length 16", mod(func(m *rpn.Module) { m.Probes[6].WatchLen = 16 }), ErrInvalid,
			"decode probes: probe 6: watch length 16 is not 1, 2, 4 or 8 (or 0, off a watch probe)"},
		{"watch mode 2", mod(func(m *rpn.Module) { m.Probes[5].WatchMode = 2 }), ErrInvalid,
			"decode probes: probe 5: watch mode 2 is not w (1) or rw (3) (or 0, off a watch probe)"},
		{"watch mode 255", mod(func(m *rpn.Module) { m.Probes[0].WatchMode = 255 }), ErrInvalid,
			"decode probes: probe 0: watch mode 255 is not w (1) or rw (3) (or 0, off a watch probe)"},
		{"tracepoint not SUBSYS:EVENT", mod(func(m *rpn.Module) { m.Probes[4].Loc.Text = "../../sched:x" }), ErrInvalid,
			`decode probes: probe 4: tracepoint location "../../sched:x" is not SUBSYS:EVENT (letters, digits and _)`},
		{"maxactive 4097", mod(func(m *rpn.Module) { m.Probes[3].MaxActive = 4097 }), ErrInvalid,
			"decode probes: probe 3: maxactive 4097 is outside 0..4096"},
		{"field name not an identifier", mod(func(m *rpn.Module) { m.Fields[2] = "a\x1b[2J" }), ErrInvalid,
			`decode fields: field 2: name "a\x1b[2J" is not an identifier`},
		{"empty field name", mod(func(m *rpn.Module) { m.Fields[0] = "" }), ErrInvalid,
			`decode fields: field 0: name "" is not an identifier`},
		{"field name over the limit", mod(func(m *rpn.Module) { m.Fields[1] = strings.Repeat("x", MaxString+1) }), ErrLimit,
			"decode fields: field 1: name is 65537 bytes, at most 65536"},
		{"field count 0xffff", patch(t, func(s []section) []section {
			s[7].payload = []byte{0xff, 0xff}
			return s
		}), ErrTruncated, "decode fields: truncated: field count 65535 needs 262140 bytes, 0 left"},
		{"field name past the end", patch(t, func(s []section) []section {
			s[7].payload = append([]byte{1, 0}, u32(10)...)
			return s
		}), ErrTruncated, "decode fields: truncated: field 0 name needs 10 bytes, 0 left"},
		{"jmpmax 0", mod(func(m *rpn.Module) { m.JmpMax = 0 }), ErrInvalid, "decode header: jmpmax 0 is outside 1..65535"},
		{"jmpmax 65536", mod(func(m *rpn.Module) { m.JmpMax = 65536 }), ErrInvalid, "decode header: jmpmax 65536 is outside 1..65535"},
		{"logmax 0", mod(func(m *rpn.Module) { m.LogMax = 0 }), ErrInvalid, "decode header: logmax 0 is outside 1..65536"},
		{"logmax 65537", mod(func(m *rpn.Module) { m.LogMax = 65537 }), ErrInvalid, "decode header: logmax 65537 is outside 1..65536"},
		{"dfltexit 5", mod(func(m *rpn.Module) { m.DfltExit = 5 }), ErrInvalid, "decode header: dfltexit 5 is outside 0..4"},
		{"vars 257", mod(func(m *rpn.Module) { m.Vars = 257 }), ErrInvalid, "decode header: vars 257 is outside 0..256"},
		{"gvars 65535", mod(func(m *rpn.Module) { m.GVars = 65535 }), ErrInvalid, "decode header: gvars 65535 is outside 0..256"},
		{"lines unsorted", mod(func(m *rpn.Module) { m.Lines[3].PC = 56 }), ErrInvalid,
			"decode lines: line entry 3: pc 56 is before the pc 57 of entry 2: entries must be sorted by pc"},
		{"line past the code", mod(func(m *rpn.Module) { m.Lines[3].PC = 200 }), ErrInvalid,
			"decode lines: line entry 3: pc 200 is not inside the code (200 bytes)"},
		{"line file out of range", mod(func(m *rpn.Module) { m.Lines[0].Pos.File = 5 }), ErrInvalid,
			"decode lines: line entry 0: source file index 5 is out of range (5 files)"},
		{"probe file out of range", mod(func(m *rpn.Module) { m.Probes[1].Pos.File = 0xffff }), ErrInvalid,
			"decode probes: probe 1: source file index 65535 is out of range (5 files)"},
		{"probe with no file table", mod(func(m *rpn.Module) { m.Files = nil }), ErrInvalid,
			"decode probes: probe 0: source file index 4 is out of range (0 files)"},
		{"reloc past the code", mod(func(m *rpn.Module) { m.Relocs[2].Off = 193 }), ErrInvalid,
			"decode relocs: reloc 2: the 8 bytes at offset 193 are not inside the code (200 bytes)"},
		{"reloc at 2^32-1", mod(func(m *rpn.Module) { m.Relocs[2].Off = math.MaxUint32 }), ErrInvalid,
			"decode relocs: reloc 2: the 8 bytes at offset 4294967295 are not inside the code (200 bytes)"},
		{"relocs overlap", mod(func(m *rpn.Module) { m.Relocs[1].Off = 8 }), ErrInvalid,
			"decode relocs: reloc 1: offset 8 overlaps or precedes reloc 0 at 1: relocs must be sorted and not overlap"},
		{"relocs unsorted", mod(func(m *rpn.Module) { m.Relocs[1].Off = 0 }), ErrInvalid,
			"decode relocs: reloc 1: offset 0 overlaps or precedes reloc 0 at 1: relocs must be sorted and not overlap"},
		{"string over the limit", mod(func(m *rpn.Module) { m.Relocs[0].Expr = strings.Repeat("x", MaxString+1) }), ErrLimit,
			"decode relocs: reloc 0: expression is 65537 bytes, at most 65536"},
		{"build ID over the limit", mod(func(m *rpn.Module) { m.BuildID = make([]byte, MaxBuildID+1) }), ErrLimit,
			"decode build ID: build ID is 1025 bytes, at most 1024"},
		{"term kind 3", mod(func(m *rpn.Module) { m.Relocs[2].Sum.Terms[1].Kind = 3 }), ErrInvalid,
			"decode relocs: reloc 2: term 1: kind 3 is not symbol (0), sizeof (1) or offsetof (2)"},
		{"term without a name", mod(func(m *rpn.Module) { m.Probes[0].Loc.Sum.Terms[0].Name = "" }), ErrInvalid,
			"decode probes: probe 0: term 0: symbol without a name"},
		{"offsetof without a field", mod(func(m *rpn.Module) { m.Relocs[1].Sum.Terms[0].Field = "" }), ErrInvalid,
			"decode relocs: reloc 1: term 0: offsetof(struct task_struct) without a field"},
		{"sizeof with a field", mod(func(m *rpn.Module) { m.Relocs[0].Sum.Terms[0].Field = "pid" }), ErrInvalid,
			"decode relocs: reloc 0: term 0: a sizeof term has a field: only offsetof has"},
		{"line location at line 0", mod(func(m *rpn.Module) { m.Probes[1].Loc.Line = 0 }), ErrInvalid,
			"decode probes: probe 1: line location fs/ext4/ïnode.c:0: lines count from 1"},
		{"term count over the limit", mod(func(m *rpn.Module) { m.Relocs[0].Sum.Terms = make([]rpn.Term, 0xffff) }), ErrLimit,
			"decode relocs: reloc 0: expression has 65535 terms, at most 256"},
		{"term count past the end", patch(t, func(s []section) []section {
			// the u16 term count of probe 0's location, after its kind,
			// text, location kind and addend
			binary.LittleEndian.PutUint16(s[3].payload[4+1+4+tinyProbeText+1+8:], 200)
			return s
		}), ErrTruncated, fmt.Sprintf("decode probes: truncated: probe 0 location term count 200 needs %d bytes, %d left", 200*termSize, tinyProbe-5-tinyProbeText-1-sumSize)},
		{"unknown probe flags", patch(t, func(s []section) []section {
			s[3].payload[tinyFlags] |= 0x80
			return s
		}), ErrInvalid, "decode probes: probe 0: unknown flags bits 0x80"},
		{"unknown reloc flags", patch(t, func(s []section) []section {
			s[6].payload = append(u32(1), 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
			return s
		}), ErrInvalid, "decode relocs: reloc 0: unknown flags bits 0x02"},
		{"extra bytes in a section", patch(t, func(s []section) []section {
			s[0].payload = append(s[0].payload, 0)
			return s
		}), ErrInvalid, "decode header: 1 bytes of unexpected data after the last field"},
		{"missing section", patch(t, func(s []section) []section { return append(s[:3], s[4:]...) }), ErrInvalid,
			"decode sections: found section code (tag 0x05) where section probes (tag 0x04) belongs"},
		{"missing relocs", patch(t, func(s []section) []section { return s[:6] }), ErrInvalid,
			"decode sections: section relocs (tag 0x07) is missing"},
		{"missing last section", patch(t, func(s []section) []section { return s[:7] }), ErrInvalid,
			"decode sections: section fields (tag 0x08) is missing"},
		{"fields before relocs", patch(t, func(s []section) []section { s[6], s[7] = s[7], s[6]; return s }), ErrInvalid,
			"decode sections: found section fields (tag 0x08) where section relocs (tag 0x07) belongs"},
		{"no sections", patch(t, func(s []section) []section { return nil }), ErrInvalid,
			"decode sections: section header (tag 0x01) is missing"},
		{"repeated section", patch(t, func(s []section) []section { return append(s[:2:2], append([]section{s[1]}, s[2:]...)...) }), ErrInvalid,
			"decode sections: found section build ID (tag 0x02) where section files (tag 0x03) belongs"},
		{"unknown required section", patch(t, func(s []section) []section { return append(s, section{0x09, nil}) }), ErrInvalid,
			"decode sections: found section tag 0x09 after the last required section: only optional sections (tags 0x80..0xfe, ascending) may follow it"},
		{"optional sections out of order", patch(t, func(s []section) []section { return append(s, section{0x90, nil}, section{0x81, nil}) }), ErrInvalid,
			"decode sections: found section tag 0x81 after the last required section: only optional sections (tags 0x80..0xfe, ascending) may follow it"},
		{"tag 0xff", patch(t, func(s []section) []section { return append(s, section{0xff, []byte{1}}) }), ErrInvalid,
			"decode sections: found section tag 0xff after the last required section: only optional sections (tags 0x80..0xfe, ascending) may follow it"},
		{"half a section head", assembleRaw(split(t, mustEncode(t, tinyModule())), []byte{0x80, 1, 0}), ErrTruncated,
			"decode sections: truncated: section length needs 4 bytes, 2 left"},
		{"section longer than the file", assembleRaw(split(t, mustEncode(t, tinyModule())), []byte{0x80, 0xff, 0xff, 0xff, 0xff}), ErrTruncated,
			"decode sections: truncated: an unknown section needs 4294967295 bytes, 0 left"},
		{"trailing data", append(mustEncode(t, tinyModule()), "\n"...), ErrTrailing, "1 bytes of trailing data after the checksum"},
		{"length field too small", func() []byte {
			b := mustEncode(t, tinyModule())
			binary.LittleEndian.PutUint32(b[len(magic)+2:], 46)
			return b
		}(), ErrInvalid, "the file length in the header is 46, less than the 47 bytes of any PPDF"},
	} {
		m, err := Decode(tc.data)
		if m != nil || !errors.Is(err, tc.is) || err.Error() != tc.msg {
			t.Errorf("%s:\ngot  %v\nwant %q (%v)", tc.name, err, tc.msg, tc.is)
		}
	}
}

// assembleRaw is assemble with extra raw bytes after the sections.
func assembleRaw(secs []section, extra []byte) []byte {
	b := assemble(secs)
	b = append(b[:len(b)-checksumSize:len(b)-checksumSize], extra...)
	return seal(b)
}

// TestOptionalSectionsSkipped: a reader skips optional sections it does
// not know, so a newer writer can add one without a version bump.
func TestOptionalSectionsSkipped(t *testing.T) {
	b := patch(t, func(s []section) []section {
		return append(s, section{0x81, []byte("future")}, section{0xfe, nil})
	})
	m, skipped, err := decode(b)
	if err != nil || !skipped {
		t.Fatalf("decode: skipped=%v err=%v", skipped, err)
	}
	if !reflect.DeepEqual(m, canonical(tinyModule())) {
		t.Fatal("a file with optional sections decodes to another module")
	}
}

// TestHostileAllocations: a 4 GiB count in a small file fails before
// anything is allocated for it.
func TestHostileAllocations(t *testing.T) {
	valid := mustEncode(t, tinyModule())
	validAllocs := testing.AllocsPerRun(100, func() { Decode(valid) })
	for _, sec := range []int{2, 3, 5, 6, 7} {
		b := patch(t, func(s []section) []section {
			copy(s[sec].payload, []byte{0xff, 0xff, 0xff, 0xff})
			return s
		})
		if len(b) > 512 {
			t.Fatalf("crafted file is %d bytes", len(b))
		}
		if _, err := Decode(b); !errors.Is(err, ErrTruncated) {
			t.Fatalf("section %d: %v", sec, err)
		}
		// The sections before the hostile one are decoded (a few small
		// strings), then the error and its message are built: a few dozen
		// small allocations, never the 4 GiB (times the entry size) the
		// count asks for.
		allocs := testing.AllocsPerRun(100, func() { Decode(b) })
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range 100 {
			Decode(b)
		}
		runtime.ReadMemStats(&after)
		perRun := (after.TotalAlloc - before.TotalAlloc) / 100
		if allocs > validAllocs+20 || perRun > 4096 {
			t.Errorf("section %d: Decode of a %d-byte file with a hostile count: %v allocations (a valid file: %v), %d bytes per run",
				sec, len(b), allocs, validAllocs, perRun)
		}
	}
}

func TestEncodeRejects(t *testing.T) {
	mod := func(f func(m *rpn.Module)) *rpn.Module {
		m := fullModule()
		f(m)
		return m
	}
	for _, tc := range []struct {
		name string
		m    *rpn.Module
		is   error
		msg  string
	}{
		{"too many files", mod(func(m *rpn.Module) { m.Files = make([]string, MaxFiles+1) }), ErrLimit, "encode files: 65536 files, at most 65535"},
		{"long name", mod(func(m *rpn.Module) { m.Name = strings.Repeat("x", MaxString+1) }), ErrLimit, "encode header: name is 65537 bytes, at most 65536"},
		{"long file name", mod(func(m *rpn.Module) { m.Files[2] = strings.Repeat("x", MaxString+1) }), ErrLimit, "encode files: file 2: name is 65537 bytes, at most 65536"},
		{"long location", mod(func(m *rpn.Module) { m.Probes[1].Loc.Text = strings.Repeat("x", 1<<20) }), ErrLimit, "encode probes: probe 1: location text is 1048576 bytes, at most 65536"},
		{"long build ID", mod(func(m *rpn.Module) { m.BuildID = make([]byte, 4096) }), ErrLimit, "encode build ID: build ID is 4096 bytes, at most 1024"},
		{"entry past end", mod(func(m *rpn.Module) { m.Probes[0].Entry = 101 }), ErrInvalid, "encode probes: probe 0: entry 101 is past its end 100"},
		{"jmpmax 0", mod(func(m *rpn.Module) { m.JmpMax = 0 }), ErrInvalid, "encode header: jmpmax 0 is outside 1..65535"},
		{"unsorted lines", mod(func(m *rpn.Module) { m.Lines[1].PC = 58 }), ErrInvalid,
			"encode lines: line entry 2: pc 57 is before the pc 58 of entry 1: entries must be sorted by pc"},
		// what a location or reloc holds that its kind does not encode
		// would be lost: refused
		{"sum on a line location", mod(func(m *rpn.Module) { m.Probes[1].Loc.Sum = sym("x") }), ErrInvalid,
			"encode probes: probe 1: location kind line with a sum: only a symbolic location has one"},
		{"addend on an absolute location", mod(func(m *rpn.Module) { m.Probes[2].Loc.Sum.Addend = 0xc0100000 }), ErrInvalid,
			"encode probes: probe 2: location kind absolute with a sum: only a symbolic location has one"},
		{"file on a symbolic location", mod(func(m *rpn.Module) { m.Probes[0].Loc.File = "a.c" }), ErrInvalid,
			"encode probes: probe 0: location kind symbolic with a file or line: only a line location has them"},
		{"line 0", mod(func(m *rpn.Module) { m.Probes[1].Loc.Line = 0 }), ErrInvalid,
			"encode probes: probe 1: line location fs/ext4/ïnode.c:0: lines count from 1"},
		{"long location file", mod(func(m *rpn.Module) { m.Probes[1].Loc.File = strings.Repeat("x", MaxString+1) }), ErrLimit,
			"encode probes: probe 1: location file is 65537 bytes, at most 65536"},
		{"too many terms", mod(func(m *rpn.Module) { m.Relocs[0].Sum.Terms = make([]rpn.Term, rpn.MaxTerms+1) }), ErrLimit,
			"encode relocs: reloc 0: 257 terms, at most 256"},
		{"long term name", mod(func(m *rpn.Module) { m.Probes[0].Loc.Sum.Terms[0].Name = strings.Repeat("x", MaxString+1) }), ErrLimit,
			"encode probes: probe 0: term 0: a name is 65537 bytes, at most 65536"},
		{"too many fields", mod(func(m *rpn.Module) { m.Fields = make([]string, MaxFields+1) }), ErrLimit,
			"encode fields: 65536 field names, at most 65535"},
		{"dotted field name", mod(func(m *rpn.Module) { m.Fields[3] = "a.b" }), ErrInvalid,
			`encode fields: field 3: name "a.b" is not an identifier`},
		{"probe kind 9", mod(func(m *rpn.Module) { m.Probes[0].Kind = 9 }), ErrInvalid,
			"encode probes: probe 0: kind 9 is not offset (0), retprobe (1), tracepoint (2), watch (3) or usdt (4)"},
		{"watch length 5", mod(func(m *rpn.Module) { m.Probes[5].WatchLen = 5 }), ErrInvalid,
			"encode probes: probe 5: watch length 5 is not 1, 2, 4 or 8 (or 0, off a watch probe)"},
		{"tracepoint with a sum", mod(func(m *rpn.Module) { m.Probes[4].Loc.Sum.Addend = 1 }), ErrInvalid,
			"encode probes: probe 4: location kind tracepoint with a sum: only a symbolic location has one"},
		{"file on a tracepoint", mod(func(m *rpn.Module) { m.Probes[4].Loc.File = "a.c" }), ErrInvalid,
			"encode probes: probe 4: location kind tracepoint with a file or line: only a line location has them"},
	} {
		b, err := Encode(tc.m)
		if b != nil || !errors.Is(err, tc.is) || err.Error() != tc.msg {
			t.Errorf("%s:\ngot  %v\nwant %q", tc.name, err, tc.msg)
		}
	}
	if _, err := Encode(nil); err == nil {
		t.Error("Encode(nil) succeeded")
	}
	// Even unvalidated, the u16 file count is never silently truncated.
	m := emptyModule()
	m.Files = make([]string, MaxFiles+1)
	if _, err := encode(m); !errors.Is(err, ErrLimit) {
		t.Errorf("encode of 65536 files: %v", err)
	}
}

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "full.ppdf")
	if err := WriteFile(path, fullModule()); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, tinyModule()); err != nil { // replaces it
		t.Fatal(err)
	}
	m, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, canonical(tinyModule())) {
		t.Fatal("ReadFile(WriteFile(m)) != m")
	}
	want := mustEncode(t, tinyModule())
	if got, _ := os.ReadFile(path); !bytes.Equal(got, want) {
		t.Fatal("WriteFile wrote other bytes than Encode")
	}

	// A module Encode refuses leaves the old file as it was.
	bad := tinyModule()
	bad.Arch = 9
	err = WriteFile(path, bad)
	if !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), "write "+path+": encode header: ") {
		t.Errorf("WriteFile of a bad module: %v", err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, want) {
		t.Error("a failed WriteFile changed the file")
	}

	// No temporary file is left behind, on success or on failure.
	if err := WriteFile(filepath.Join(dir, "missing", "x.ppdf"), tinyModule()); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "missing", "x.ppdf")) {
		t.Errorf("WriteFile into a missing directory: %v", err)
	}
	if err := WriteFile(filepath.Join(dir, "sub"), tinyModule()); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(filepath.Join(dir, "sub"), tinyModule()); err == nil { // rename over a directory fails
		t.Error("WriteFile over a directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "full.ppdf sub" {
		t.Errorf("directory holds %q, want just full.ppdf and sub", names)
	}

	// Errors name the file.
	tampered := bytes.Clone(want)
	tampered[40] ^= 1
	bad1 := filepath.Join(dir, "bad.ppdf")
	os.WriteFile(bad1, tampered, 0o644)
	if _, err := ReadFile(bad1); !errors.Is(err, ErrChecksum) || err.Error() != bad1+": checksum mismatch: the file is corrupt or was modified" {
		t.Errorf("ReadFile of a tampered file: %v", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "none.ppdf")); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "none.ppdf") {
		t.Errorf("ReadFile of a missing file: %v", err)
	}
	dpdf := filepath.Join(dir, "probe.dpdf")
	os.WriteFile(dpdf, []byte("name = ./a.out\nmodtype = user\noffset = main\nexit 1\n"), 0o644)
	if _, err := ReadFile(dpdf); !errors.Is(err, ErrNotPPDF) || err.Error() != dpdf+": not a PPDF file: looks like a DPDF source file; use gprobes check/build" {
		t.Errorf("ReadFile of a DPDF: %v", err)
	}
}

func ExampleDecode() {
	_, err := Decode([]byte("name = ./a.out\nmodtype = user\n"))
	fmt.Println(err)
	_, err = Decode([]byte("\x89PPDF\r\n\x1a\n\x06\x00"))
	fmt.Println(err)
	// Output:
	// not a PPDF file: looks like a DPDF source file; use gprobes check/build
	// PPDF version 6 is newer than this gprobes reads (2 to 5): upgrade gprobes or rebuild the PPDF
}

// TestOldVersionRefused: a PPDF of version 1, which kept locations and
// relocations as text (testdata/version1.ppdf is tiny.ppdf as that gprobes
// wrote it), is refused with both versions named and the way out.
func TestOldVersionRefused(t *testing.T) {
	path := filepath.Join("testdata", "version1.ppdf")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(data)
	var ve *VersionError
	if m != nil || !errors.Is(err, ErrVersion) || !errors.As(err, &ve) || ve.Got != 1 || ve.Want != Version {
		t.Fatalf("got %v, %#v", m, err)
	}
	const want = "PPDF version 1 is older than this gprobes reads (2 to 5): rebuild it from its DPDF with gprobes build"
	if err.Error() != want {
		t.Errorf("got %q\nwant %q", err, want)
	}
	if _, err := ReadFile(path); err == nil || err.Error() != path+": "+want {
		t.Errorf("ReadFile: %v", err)
	}
}

// TestSumsRoundTrip: every kind of term, factors that are negative or
// large, and an addend survive encode and decode, and the Sum still
// evaluates to the same value.
func TestSumsRoundTrip(t *testing.T) {
	m := fullModule()
	got, err := Decode(mustEncode(t, m))
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Relocs {
		if !reflect.DeepEqual(got.Relocs[i].Sum, m.Relocs[i].Sum) || got.Relocs[i].Expr != m.Relocs[i].Expr {
			t.Errorf("reloc %d: got %+v, want %+v", i, got.Relocs[i], m.Relocs[i])
		}
	}
	for i := range m.Probes {
		if !reflect.DeepEqual(got.Probes[i].Loc, m.Probes[i].Loc) {
			t.Errorf("probe %d: got %+v, want %+v", i, got.Probes[i].Loc, m.Probes[i].Loc)
		}
	}
	env := fakeEnv{"jiffies": 0x1000, "init_task": 0x300, "sizeof long": 8, "offsetof struct s a[3].b": 0x1c}
	v, err := got.Relocs[2].Sum.Eval(env)
	// 2*(0x1000 - 8) - 0x300 + ^0x1c
	want := uint64(2*(0x1000-8) - 0x300)
	want += ^uint64(0x1c)
	if err != nil || v != want {
		t.Errorf("Eval = %#x, %v; want %#x", v, err, want)
	}
	if s := got.Relocs[2].Sum.String(); s != "2*jiffies - 2*sizeof(long) - init_task - offsetof(struct s, a[3].b) - 0x1" {
		t.Errorf("String = %q", s)
	}
	if got.Probes[1].Loc.File != "fs/ext4/ïnode.c" || got.Probes[1].Loc.Line != 1234 {
		t.Errorf("line location: %+v", got.Probes[1].Loc)
	}
}

type fakeEnv map[string]uint64

func (e fakeEnv) get(k string) (uint64, error) {
	if v, ok := e[k]; ok {
		return v, nil
	}
	return 0, fmt.Errorf("%s not found", k)
}
func (e fakeEnv) Symbol(name string) (uint64, error) { return e.get(name) }
func (e fakeEnv) Sizeof(typ string) (uint64, error)  { return e.get("sizeof " + typ) }
func (e fakeEnv) Offsetof(typ, field string) (uint64, error) {
	return e.get("offsetof " + typ + " " + field)
}

// TestVersion2Decodes: the PPDFs customers already have, of version 2
// (testdata/version2-*.ppdf, written by that gprobes), keep decoding: as
// offset probes without maxactive and without fields. Encoded again, they
// are version 3 files of the same module.
func TestVersion2Decodes(t *testing.T) {
	for _, g := range []struct {
		file string
		m    *rpn.Module
	}{
		{"version2-tiny.ppdf", tinyModule()},
		{"version2-full.ppdf", fullModuleV2()},
	} {
		path := filepath.Join("testdata", g.file)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if v := binary.LittleEndian.Uint16(data[len(magic):]); v != 2 {
			t.Fatalf("%s is version %d", path, v)
		}
		m, err := ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if !reflect.DeepEqual(m, canonical(g.m)) {
			t.Fatalf("%s decodes to another module:\ngot  %+v\nwant %+v", path, summarize(m), summarize(g.m))
		}
		for i, p := range m.Probes {
			if p.Kind != rpn.ProbeOffset || p.MaxActive != 0 {
				t.Errorf("%s: probe %d is a %s, maxactive %d", path, i, p.Kind, p.MaxActive)
			}
		}
		if m.Fields != nil {
			t.Errorf("%s: fields %q", path, m.Fields)
		}
		b := mustEncode(t, m)
		if v := binary.LittleEndian.Uint16(b[len(magic):]); v != ModuleVersion {
			t.Errorf("%s encoded again as version %d", path, v)
		}
		if again, err := Decode(b); err != nil || !reflect.DeepEqual(again, m) {
			t.Errorf("%s as version %d: %v", path, Version, err)
		}
		// truncated anywhere, it says so
		for n := range len(data) {
			if _, err := Decode(data[:n]); !errors.Is(err, ErrTruncated) {
				t.Fatalf("%s: the first %d bytes: %v", path, n, err)
			}
		}
	}
	tiny, _ := os.ReadFile(filepath.Join("testdata", "version2-tiny.ppdf"))
	if _, err := rpn.Load(mustDecode(t, tiny)); err != nil {
		t.Errorf("version2-tiny.ppdf does not verify: %v", err)
	}
	// a version 2 file has no tracepoint location (kind 3): its probe 0's
	// location kind is at 0x5b (probe count at 0x4f, no probe kind, text
	// length at 0x53, "main" at 0x57)
	c := bytes.Clone(tiny[:len(tiny)-checksumSize])
	c[0x5b] = 3
	const want = "decode probes: probe 0: location kind 3 is not symbolic (0), line (1) or absolute (2)"
	if _, err := Decode(seal(c)); !errors.Is(err, ErrInvalid) || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
	// nor a fields section
	c = bytes.Clone(tiny[:len(tiny)-checksumSize])
	c = append(c, tagFields, 2, 0, 0, 0, 0, 0)
	if _, err := Decode(seal(c)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "found section tag 0x08 after the last required section") {
		t.Errorf("a version 2 file with a fields section: %v", err)
	}
}

// TestVersion3Decodes: the PPDFs of version 3 (testdata/version3-*.ppdf,
// written by that gprobes) keep decoding: without watch probes and with
// every probe enabled. Encoded again, they are version 4 files of the same
// module; a version 3 file cannot hold a watch probe or the disabled flag.
func TestVersion3Decodes(t *testing.T) {
	for _, g := range []struct {
		file string
		m    *rpn.Module
	}{
		{"version3-tiny.ppdf", tinyModule()},
		{"version3-full.ppdf", fullModuleV3()},
	} {
		path := filepath.Join("testdata", g.file)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if v := binary.LittleEndian.Uint16(data[len(magic):]); v != 3 {
			t.Fatalf("%s is version %d", path, v)
		}
		m, err := ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if !reflect.DeepEqual(m, canonical(g.m)) {
			t.Fatalf("%s decodes to another module:\ngot  %+v\nwant %+v", path, summarize(m), summarize(g.m))
		}
		for i, p := range m.Probes {
			if p.Kind == rpn.ProbeWatch || p.WatchLen != 0 || p.WatchMode != 0 || p.Disabled {
				t.Errorf("%s: probe %d: %+v", path, i, p)
			}
		}
		b := mustEncode(t, m)
		if v := binary.LittleEndian.Uint16(b[len(magic):]); v != ModuleVersion {
			t.Errorf("%s encoded again as version %d", path, v)
		}
		if again, err := Decode(b); err != nil || !reflect.DeepEqual(again, m) {
			t.Errorf("%s as version %d: %v", path, Version, err)
		}
		for n := range len(data) {
			if _, err := Decode(data[:n]); !errors.Is(err, ErrTruncated) {
				t.Fatalf("%s: the first %d bytes: %v", path, n, err)
			}
		}
	}
	tiny, _ := os.ReadFile(filepath.Join("testdata", "version3-tiny.ppdf"))
	if _, err := rpn.Load(mustDecode(t, tiny)); err != nil {
		t.Errorf("version3-tiny.ppdf does not verify: %v", err)
	}
	// probe 0's kind is the byte before its text "main" (length 4), its
	// flags 40 bytes after the text's length: the text, the location
	// kind, the sum (addend, count, one term "main")
	text := bytes.Index(tiny, []byte("\x04\x00\x00\x00main"))
	c := bytes.Clone(tiny[:len(tiny)-checksumSize])
	c[text-1] = byte(rpn.ProbeWatch)
	const want = "decode probes: probe 0: kind 3 is not offset (0), retprobe (1) or tracepoint (2)"
	if _, err := Decode(seal(c)); !errors.Is(err, ErrInvalid) || err.Error() != want {
		t.Errorf("a version 3 watch probe: got %v, want %q", err, want)
	}
	c = bytes.Clone(tiny[:len(tiny)-checksumSize])
	if c[text+40] != probeResolved {
		t.Fatalf("flags at %#x are %#x", text+40, c[text+40])
	}
	c[text+40] |= probeDisabled
	const wantFlags = "decode probes: probe 0: unknown flags bits 0x08"
	if _, err := Decode(seal(c)); !errors.Is(err, ErrInvalid) || err.Error() != wantFlags {
		t.Errorf("a version 3 disabled probe: got %v, want %q", err, wantFlags)
	}
	// the same flag in a version 4 file is enabled = no
	v4 := mustEncode(t, tinyModule())
	c = bytes.Clone(v4[:len(v4)-checksumSize])
	c[text+40] |= probeDisabled
	if m := mustDecode(t, seal(c)); !m.Probes[0].Disabled {
		t.Error("version 4: the disabled flag is not read")
	}
}

// autostacktrace = yes is bit 4 of a probe's flags: encoded, decoded
// back, in a pack too; a reader that does not know the bit refuses the
// file ("unknown flags bits 0x10") rather than insert a probe whose
// exception records would lose their stacks. A version 3 file, from
// before the bit, with it set is refused so.
func TestAutoStackFlag(t *testing.T) {
	m := tinyModule()
	m.Probes[0].AutoStack = true
	b := mustEncode(t, m)
	plain := mustEncode(t, tinyModule())
	text := bytes.Index(plain, []byte("\x04\x00\x00\x00main"))
	if plain[text+40] != probeResolved || b[text+40] != probeResolved|probeAutoStack {
		t.Fatalf("flags %#x without autostacktrace, %#x with, want %#x and %#x", plain[text+40], b[text+40], probeResolved, probeResolved|probeAutoStack)
	}
	if got := mustDecode(t, b); !got.Probes[0].AutoStack || !reflect.DeepEqual(got, canonical(m)) {
		t.Errorf("decoded %+v, want autostacktrace", got.Probes[0])
	}
	if got := mustDecode(t, plain); got.Probes[0].AutoStack {
		t.Error("autostacktrace decoded from a probe without it")
	}
	m1, m2 := tinyModule(), tinyModule()
	m1.BuildID, m2.BuildID = []byte{1}, []byte{2}
	m1.Probes[0].AutoStack, m2.Probes[0].AutoStack = true, true
	builds, err := DecodePack(mustEncodePack(t, []*rpn.Module{m1, m2}))
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range builds {
		if !g.Probes[0].AutoStack {
			t.Errorf("pack build %d: autostacktrace lost", i)
		}
	}
	tiny, _ := os.ReadFile(filepath.Join("testdata", "version3-tiny.ppdf"))
	c := bytes.Clone(tiny[:len(tiny)-checksumSize])
	c[text+40] |= probeAutoStack
	const want = "decode probes: probe 0: unknown flags bits 0x10"
	if _, err := Decode(seal(c)); !errors.Is(err, ErrInvalid) || err.Error() != want {
		t.Errorf("a version 3 probe with autostacktrace: got %v, want %q", err, want)
	}
	var dis strings.Builder
	rpn.Disasm(&dis, mustDecode(t, b))
	if !strings.Contains(dis.String(), " autostacktrace=yes") {
		t.Errorf("disassembly without autostacktrace=yes:\n%s", dis.String())
	}
}

func mustDecode(t *testing.T, b []byte) *rpn.Module {
	t.Helper()
	m, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestProbeKindsRoundTrip: rpn/testdata/kinds.dpdf, a probe of every
// kind, compiled, encoded, decoded: the same module, which verifies, and
// the same bytes when built twice.
func TestProbeKindsRoundTrip(t *testing.T) {
	build := func() *rpn.Module {
		f, err := dpdf.Parse("../rpn/testdata/kinds.dpdf", dpdf.Options{NoPreprocessor: true})
		if err != nil {
			t.Fatal(err)
		}
		m, err := compiler.Compile(f, rpn.CompileOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := build()
	b := mustEncode(t, m)
	got := mustDecode(t, b)
	if !reflect.DeepEqual(got, canonical(m)) {
		t.Fatalf("decoded %+v\nwant %+v", got, m)
	}
	if _, err := rpn.Load(got); err != nil {
		t.Fatal(err)
	}
	if again := mustEncode(t, build()); !bytes.Equal(again, b) {
		t.Error("two builds of the same DPDF differ")
	}
	kinds := map[rpn.ProbeKind]int{}
	for _, p := range got.Probes {
		kinds[p.Kind]++
	}
	if kinds[rpn.ProbeOffset] != 2 || kinds[rpn.ProbeRetprobe] != 3 || kinds[rpn.ProbeTracepoint] != 3 || kinds[rpn.ProbeWatch] != 3 || got.Probes[1].MaxActive != 128 || len(got.Fields) != 4 {
		t.Errorf("kinds %v, maxactive %d, fields %q", kinds, got.Probes[1].MaxActive, got.Fields)
	}
	if w := got.Probes[8]; w.WatchLen != 8 || w.WatchMode != rpn.WatchWrite || !w.Disabled || w.Loc.Text != "jiffies" {
		t.Errorf("probe 8: %+v", w)
	}
}
