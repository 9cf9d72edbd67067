package linuxkernel_test

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/lab/qemulab"
	"github.com/gprobes/gprobes/linuxkernel"
	"github.com/gprobes/gprobes/symbols"
)

// elfMem is a kernel's memory as its vmlinux lays it out: the loaded
// sections at their addresses, everything else unreadable (as the holes
// a running kernel unmaps in its image).
type elfMem struct {
	secs  []*elf.Section
	data  [][]byte
	reads int
}

func newELFMem(t *testing.T, path string) *elfMem {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	m := &elfMem{}
	for _, s := range ef.Sections {
		if s.Flags&elf.SHF_ALLOC == 0 || s.Addr < 0xffffffff80000000 {
			continue
		}
		var b []byte
		if s.Type == elf.SHT_NOBITS {
			b = make([]byte, s.Size)
		} else if b, err = s.Data(); err != nil {
			t.Fatal(err)
		}
		m.secs, m.data = append(m.secs, s), append(m.data, b)
	}
	return m
}

func (m *elfMem) ReadMem(addr uint64, p []byte) error {
	m.reads++
	for i, s := range m.secs {
		if addr >= s.Addr && addr+uint64(len(p)) <= s.Addr+uint64(len(m.data[i])) {
			copy(p, m.data[i][addr-s.Addr:])
			return nil
		}
	}
	return fmt.Errorf("unmapped %#x+%d", addr, len(p))
}

// readMap reads a System.map or kallsyms copy.
func readMap(t *testing.T, path string) []symbols.Symbol {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []symbols.Symbol
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 || len(fs[1]) != 1 {
			t.Fatalf("%s: line %q", path, sc.Text())
		}
		if len(fs) > 3 { // a module's
			continue
		}
		a, err := strconv.ParseUint(fs[0], 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, symbols.Symbol{Name: fs[2], Addr: a, Kind: fs[1][0]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sameSyms compares decoded symbols with a kallsyms listing, in order.
func sameSyms(t *testing.T, got, want []symbols.Symbol) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%d symbols decoded, the listing has %d", len(got), len(want))
	}
	bad := 0
	for i := range min(len(got), len(want)) {
		g, w := got[i], want[i]
		if g.Name != w.Name || g.Addr != w.Addr || g.Kind != w.Kind {
			if bad++; bad <= 5 {
				t.Errorf("symbol %d: decoded %#x %c %s, the listing %#x %c %s", i, g.Addr, g.Kind, g.Name, w.Addr, w.Kind, w.Name)
			}
		}
	}
	if bad > 5 {
		t.Errorf("... %d symbols differ", bad)
	}
}

// The kallsyms tables of the lab's Debian 6.1 kernel, found by their shape
// in its vmlinux laid out as in memory (no symbol used), decode to the
// same symbols, types and addresses as the lab's System.map, which is the
// /proc/kallsyms of that kernel booted with nokaslr.
func TestKallsymsLabKernel(t *testing.T) {
	qemulab.Require(t)
	dir, err := qemulab.Artifacts()
	if err != nil {
		t.Fatal(err)
	}
	mem := newELFMem(t, filepath.Join(dir, "vmlinux"))
	text, err := linuxkernel.FindText(mem)
	if err != nil {
		t.Fatal(err)
	}
	if text != 0xffffffff81000000 {
		t.Errorf("_text found at %#x, want 0xffffffff81000000", text)
	}
	ks, err := linuxkernel.ReadKallsyms(mem, text)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d symbols, token table %#x, names %#x, offsets %#x (%s), base %#x; %d reads", len(ks.Syms), ks.Tokens, ks.Names, ks.Offsets, ks.Layout, ks.Base, mem.reads)
	want := readMap(t, filepath.Join(dir, "System.map"))
	sameSyms(t, ks.Syms, want)
	if ks.Text != text {
		t.Errorf("_text decoded at %#x, found at %#x", ks.Text, text)
	}
}

// A kernel with no --symbols takes its symbols and BTF from its memory
// (the lab's vmlinux laid out as in memory): symbols at System.map's
// addresses, slide 0, the build ID of the vmlinux, struct task_struct's
// layout as the vmlinux's own .BTF says; the second kernel of the same
// build takes both from the cache after reading only its notes, and gives
// the same answers.
func TestKernelFromGuestMemory(t *testing.T) {
	qemulab.Require(t)
	dir, err := qemulab.Artifacts()
	if err != nil {
		t.Fatal(err)
	}
	vmlinux := filepath.Join(dir, "vmlinux")
	t.Setenv("GPROBES_KERNEL_CACHE", t.TempDir())
	file, err := symbols.Open(vmlinux)
	if err != nil {
		t.Fatal(err)
	}
	fileSet := symbols.NewSet(file)
	wantPid, err := fileSet.Offsetof("struct task_struct", "pid")
	if err != nil {
		t.Fatal(err)
	}
	wantSize, err := fileSet.Sizeof("struct module")
	if err != nil {
		t.Fatal(err)
	}
	want := readMap(t, filepath.Join(dir, "System.map"))
	for i, what := range []string{"first", "cached"} {
		mem := newELFMem(t, vmlinux)
		k, err := linuxkernel.New(mem, linuxkernel.Options{})
		if err != nil {
			t.Fatal(err)
		}
		syms, types := k.Sources()
		t.Logf("%s: %d reads; symbols: %s; types: %s", what, mem.reads, syms, types)
		if k.Symbols() == nil {
			t.Fatalf("%s: no symbols", what)
		}
		for _, name := range []string{"linux_banner", "__x64_sys_getppid", "_text", "init_task"} {
			s, err := k.Symbols().Lookup(name)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			var w uint64
			for _, m := range want {
				if m.Name == name {
					w = m.Addr
				}
			}
			if s.Addr != w {
				t.Errorf("%s: %s at %#x, System.map %#x", what, name, s.Addr, w)
			}
		}
		if slide, ok := k.Slide(); !ok || slide != 0 {
			t.Errorf("%s: slide %#x %v, want 0", what, slide, ok)
		}
		if got := k.GuestBuildID(); got == nil || string(got) != string(file.BuildID()) {
			t.Errorf("%s: build ID %x, the vmlinux's %x", what, got, file.BuildID())
		}
		if off, err := k.Symbols().Offsetof("struct task_struct", "pid"); err != nil || off != wantPid {
			t.Errorf("%s: offsetof(task_struct, pid) = %d, %v; the vmlinux's BTF: %d", what, off, err, wantPid)
		}
		if sz, err := k.Symbols().Sizeof("struct module"); err != nil || sz != wantSize {
			t.Errorf("%s: sizeof(struct module) = %d, %v; the vmlinux's BTF: %d", what, sz, err, wantSize)
		}
		wantWord := []string{"kallsyms in guest memory", "kallsyms read from guest memory before, cached"}[i]
		if !strings.Contains(syms, wantWord) {
			t.Errorf("%s: symbols from %q, want %q", what, syms, wantWord)
		}
		wantWord = []string{"BTF in guest memory", "BTF read from guest memory before, cached"}[i]
		if !strings.Contains(types, wantWord) {
			t.Errorf("%s: types from %q, want %q", what, types, wantWord)
		}
	}
}

// A guest whose memory holds no kallsyms tables gives an error naming the
// files to give, when a probe needs its symbols.
func TestKernelNoGuestSymbols(t *testing.T) {
	t.Setenv("GPROBES_KERNEL_CACHE", t.TempDir())
	mem := newMem()
	mem.put(0xffffffff81000000, make([]byte, 3<<20)) // an image of zeros
	k, err := linuxkernel.New(mem, linuxkernel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = k.Resolve("vmlinux")
	if err == nil || !strings.Contains(err.Error(), "no kallsyms token table") || !strings.Contains(err.Error(), "give its System.map, a copy of its /proc/kallsyms or its vmlinux with --symbols") {
		t.Errorf("Resolve: %v", err)
	}
	syms, _ := k.Sources()
	if !strings.Contains(syms, "give its System.map") {
		t.Errorf("symbols from %q", syms)
	}
}
