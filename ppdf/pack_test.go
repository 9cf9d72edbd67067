package ppdf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/rpn"
)

// packBuilds are tiny.ppdf's module for two builds of ./a.out: main at
// another address, another build ID.
func packBuilds() []*rpn.Module {
	a, b := tinyModule(), tinyModule()
	a.BuildID = []byte{0xbb, 1, 2, 3}
	b.BuildID = []byte{0xaa, 4, 5, 6, 7}
	b.Probes[0].Loc.Addr = 0x401236
	return []*rpn.Module{a, b}
}

func mustEncodePack(t testing.TB, builds []*rpn.Module) []byte {
	t.Helper()
	b, err := EncodePack(builds)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPack: several builds make one version 5 file whose bytes do not
// depend on the order the builds were given in (they are sorted by build
// ID), which DecodePack reads back, Decode refuses by name, and which
// matches the golden file testdata/pack.ppdf.
func TestPack(t *testing.T) {
	builds := packBuilds()
	got := mustEncodePack(t, builds)
	if v := binary.LittleEndian.Uint16(got[len(magic):]); v != 5 {
		t.Fatalf("a pack of two builds is version %d", v)
	}
	rev := slices.Clone(builds)
	slices.Reverse(rev)
	if again := mustEncodePack(t, rev); !bytes.Equal(again, got) {
		t.Error("the order of the builds changes the bytes")
	}
	path := filepath.Join("testdata", "pack.ppdf")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: the pack encoding changed: if intended, bump Version, update docs/ppdf.md and run go test -update", path)
	}
	dec, err := DecodePack(got)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(dec, []*rpn.Module{canonical(builds[1]), canonical(builds[0])}) {
		t.Errorf("DecodePack: %+v", dec)
	}
	m, err := Decode(got)
	if m != nil || !errors.Is(err, ErrSeveralBuilds) || !strings.Contains(err.Error(), "aa04050607, bb010203") {
		t.Errorf("Decode of a pack: %v", err)
	}
	// one build is version 4, as Encode writes it
	one := mustEncodePack(t, builds[:1])
	if v := binary.LittleEndian.Uint16(one[len(magic):]); v != ModuleVersion || !bytes.Equal(one, mustEncode(t, builds[0])) {
		t.Errorf("a pack of one build: version %d", v)
	}
	dir := t.TempDir()
	if err := WritePackFile(filepath.Join(dir, "p.ppdf"), builds); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "p.ppdf")); !bytes.Equal(b, got) {
		t.Error("WritePackFile wrote other bytes")
	}
	for n := range len(got) {
		if _, err := DecodePack(got[:n]); err == nil {
			t.Fatalf("truncated to %d bytes: no error", n)
		}
	}
}

// TestPackRefused: what is not a pack of one DPDF for distinct builds is
// refused, by EncodePack and, crafted with a valid checksum, by DecodePack.
func TestPackRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(b []*rpn.Module)
		want   string
	}{
		{"same build ID", func(b []*rpn.Module) { b[1].BuildID = b[0].BuildID }, "both have build ID"},
		{"no build ID", func(b []*rpn.Module) { b[0].BuildID = nil }, "has no build ID"},
		{"another name", func(b []*rpn.Module) { b[0].Name = "./b.out" }, "another header"},
		{"another minor", func(b []*rpn.Module) { b[0].Probes[0].Minor = 3 }, "differs from build 0's"},
		{"another location", func(b []*rpn.Module) { b[0].Probes[0].Loc.Text = "exit" }, "differs from build 0's"},
		{"another file", func(b []*rpn.Module) { b[0].Files = []string{"other.dpdf"} }, "other source files"},
		{"more code", func(b []*rpn.Module) { b[0].Code = append(b[0].Code, byte(rpn.OpExit), 1) }, "bytes of code"},
	} {
		b := packBuilds()
		tc.change(b)
		_, err := EncodePack(b)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: EncodePack: %v, want %q", tc.name, err, tc.want)
		}
		// the same, crafted
		slices.SortStableFunc(b, func(x, y *rpn.Module) int { return bytes.Compare(x.BuildID, y.BuildID) })
		_, err = DecodePack(craftPack(t, b...))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: DecodePack: %v, want %q", tc.name, err, tc.want)
		}
	}
	b := packBuilds()
	if _, err := DecodePack(craftPack(t, b[0], b[1])); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "sorted by build ID") {
		t.Errorf("unsorted: %v", err)
	}
	if _, err := DecodePack(craftPack(t, b[0])); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "written as version 4") {
		t.Errorf("one build in version 5: %v", err)
	}
}

// craftPack writes builds as a version 5 file, in the order given and
// unchecked, with a valid checksum.
func craftPack(t *testing.T, builds ...*rpn.Module) []byte {
	t.Helper()
	var secs []section
	for _, m := range builds {
		one, err := encode(m)
		if err != nil {
			t.Fatal(err)
		}
		secs = append(secs, section{tagBuild, one[preambleSize : len(one)-checksumSize]})
	}
	b := assemble(secs)
	binary.LittleEndian.PutUint16(b[len(magic):], Version)
	return seal(b[:len(b)-checksumSize])
}
