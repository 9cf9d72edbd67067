package symbols

import (
	"bytes"
	"encoding/binary"
	"os"
	"testing"
)

// FuzzParseMap feeds arbitrary text to the System.map / kallsyms parser: it
// must never panic, and a table it accepts must answer lookups.
func FuzzParseMap(f *testing.F) {
	if b, err := os.ReadFile("testdata/kallsyms"); err == nil {
		f.Add(b)
	}
	for _, s := range []string{
		"",
		"ffffffff81000000 T _text\n",
		"ffffffff81000000 T _text\nffffffffc0a00000 t foo\t[ext4]\n",
		"0000000000000000 T a\n0000000000000000 t b\n",
		"                 U puts\n0000000000001139 T main\n",
		"ffffffff81000000 T _text\nzzzz T x\n1 2 3 4 5 6\n",
		"1 T a [m] x\r\n\n\t\n",
		"ffffffffffffffff W w\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tb, err := parseMap("fuzz", bytes.NewReader(data), int64(len(data)))
		if err != nil {
			if tb != nil {
				t.Fatalf("parseMap returned a table and an error: %v", err)
			}
			return
		}
		if tb.Len() == 0 {
			t.Fatal("parseMap accepted a file without symbols")
		}
		s := NewSet(tb)
		for i := range min(tb.Len(), 16) {
			e := tb.syms[i]
			if _, err := s.Lookup(e.Name); err != nil {
				if _, ok := err.(*AmbiguousError); !ok {
					t.Fatalf("Lookup(%q) of a parsed name: %v", e.Name, err)
				}
			}
			s.Nearest(e.Addr)
			s.SymbolAt(e.Addr + 1)
		}
		s.Lookup("no such name")
	})
}

// FuzzBuildIDNotes feeds arbitrary note sections to the build ID reader.
func FuzzBuildIDNotes(f *testing.F) {
	note := func(namesz, descsz, typ uint32, rest []byte) []byte {
		b := binary.LittleEndian.AppendUint32(nil, namesz)
		b = binary.LittleEndian.AppendUint32(b, descsz)
		b = binary.LittleEndian.AppendUint32(b, typ)
		return append(b, rest...)
	}
	f.Add(note(4, 4, 3, []byte("GNU\x00\x01\x02\x03\x04")))
	f.Add(note(4, 0xffffffff, 3, []byte("GNU\x00")))
	f.Add(note(0xfffffffe, 4, 3, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		id := findBuildID(b, binary.LittleEndian)
		if len(id) > len(b) {
			t.Fatalf("build ID longer than its section")
		}
	})
}

// FuzzNames feeds arbitrary strings to the type-name and field-path parsers.
func FuzzNames(f *testing.F) {
	for _, s := range []string{"struct task_struct", "unsigned long *", "a.b[2].c", "m[1][0x2]", "[", "a..b", "const"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		parseTypeName(s)
		steps, err := parseFieldPath(s)
		if err == nil && len(steps) == 0 {
			t.Fatal("parseFieldPath accepted an empty path")
		}
	})
}
