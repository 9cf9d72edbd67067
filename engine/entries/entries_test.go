package entries_test

import (
	"debug/elf"
	"os"
	"testing"

	"github.com/gprobes/gprobes/engine/entries"
	"github.com/gprobes/gprobes/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// symbolsOf returns a file's symbol addresses by name.
func symbolsOf(t *testing.T, path string) map[string]uint64 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, s := range syms {
		out[s.Name] = s.Value
	}
	return out
}

// testdata/jump/entries.S: a tail jump, a .cold part's jump back and a
// landing pad, each inside what a jump at the probe point would cover,
// are found with what enters there; what nothing enters is clear.
func TestScanFixture(t *testing.T) {
	prog := testkit.CC(t, "entries", "-O2", "-pthread", "../../testdata/jump/entries.cc", "../../testdata/jump/entries.S", "-lstdc++")
	set, err := entries.Open(prog)
	if err != nil {
		t.Fatal(err)
	}
	sym := symbolsOf(t, prog)
	t.Logf("%d entries: %+v", set.Len(), set.Stats)
	for _, c := range []struct {
		name     string
		lo, hi   uint64
		kind     entries.Kind
		to, from uint64
	}{
		{"t_tail's jump into t_body", sym["t_body"] + 1, sym["t_body"] + 6, entries.KindBranch, sym["t_body"] + 3, sym["t_tail"] + 6},
		{"c_func.cold's jump back", sym["c_func"] + 9, sym["c_func"] + 13, entries.KindBranch, sym["c_func"] + 10, sym["c_func.cold"] + 4},
		{"lp_func's landing pad", sym["lp_func"] + 9, sym["lp_func"] + 13, entries.KindLandingPad, sym["lp_func"] + 10, sym["lp_func"] + 3},
		{"a symbol", sym["lp_func"], sym["lp_func"] + 1, entries.KindSymbol, sym["lp_func"], 0},
		{"an unwind range", sym["lp_func"], sym["lp_func"] + 1, entries.KindUnwind, sym["lp_func"], 0},
	} {
		found := false
		for _, e := range set.All(c.lo, c.hi) {
			if e.Kind == c.kind && e.To == c.to && e.From == c.from {
				found = true
				t.Logf("%s: %s", c.name, e.Describe(0, nil))
			}
		}
		if !found {
			t.Errorf("%s: %+v, want kind %d to %#x from %#x", c.name, set.All(c.lo, c.hi), c.kind, c.to, c.from)
		}
	}
	// nothing enters c_func between its first byte and the mov at +8
	// (its js goes out), nor t_tail past its first byte
	for _, r := range [][2]uint64{{sym["c_func"] + 1, sym["c_func"] + 8}, {sym["t_tail"] + 1, sym["t_tail"] + 6}} {
		if e, ok := set.Inside(r[0], r[1]); ok {
			t.Errorf("[%#x, %#x): %s", r[0], r[1], e.Describe(0, nil))
		}
	}
}

// A switch compiled to a jump table (position-independent: 32-bit offsets
// from the table, and absolute: 8-byte addresses): every case is found
// as an entry of the table, from the function's indirect jump.
func TestScanJumpTable(t *testing.T) {
	for _, flags := range [][]string{{"-fPIC", "-shared"}, {"-fno-pic", "-no-pie", "-nostartfiles", "-e", "sw"}} {
		args := append([]string{"-O2", "../../testdata/jump/switch.c"}, flags...)
		prog := testkit.CC(t, "switch", args...)
		set, err := entries.Open(prog)
		if err != nil {
			t.Fatal(err)
		}
		sym := symbolsOf(t, prog)
		t.Logf("%v: %+v", flags, set.Stats)
		if set.Stats.JumpTables == 0 {
			t.Fatalf("%v: no jump table found", flags)
		}
		// each case's code is entered from the table of sw's jmp
		var size uint64
		if f, err := elf.Open(prog); err == nil {
			syms, _ := f.Symbols()
			for _, s := range syms {
				if s.Name == "sw" {
					size = s.Size
				}
			}
			f.Close()
		}
		cases := map[uint64]bool{}
		for _, e := range set.All(sym["sw"], sym["sw"]+size) {
			if e.Kind == entries.KindJumpTable && e.From > sym["sw"] && e.From < sym["sw"]+size {
				cases[e.To] = true
			}
		}
		n := len(cases)
		if n < 8 {
			t.Errorf("%v: %d addresses of sw are entries of its jump table, want at least 8 (the cases)", flags, n)
		}
	}
}

// The scan of libc, the largest file a process usually maps: what it
// finds and what it costs (logged; BenchmarkScanLibc measures).
func TestScanLibc(t *testing.T) {
	const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	if _, err := os.Stat(libc); err != nil {
		testkit.SkipOrFail(t, "no %s", libc)
	}
	set, err := entries.Open(libc)
	if err != nil {
		t.Fatal(err)
	}
	st := set.Stats
	t.Logf("%d entries: %+v", set.Len(), st)
	if st.Decoded < st.CodeBytes*999/1000 || st.Branches < 10000 || st.Unwind < 1000 {
		t.Errorf("libc's scan decoded %d of %d bytes, %d branches, %d unwind ranges", st.Decoded, st.CodeBytes, st.Branches, st.Unwind)
	}
}

func BenchmarkScanLibc(b *testing.B) {
	const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	if _, err := os.Stat(libc); err != nil {
		b.Skip("no libc")
	}
	for i := 0; i < b.N; i++ {
		if _, err := entries.Open(libc); err != nil {
			b.Fatal(err)
		}
	}
}
