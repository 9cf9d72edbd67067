package linuxkernel_test

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/linuxkernel"
	"github.com/gprobes/gprobes/symbols"
)

// kallsymsLayout is how one kernel generation lays out its kallsyms
// tables (scripts/kallsyms.c of that version).
type kallsymsLayout struct {
	name       string
	offsetLast bool // 6.4 on: offsets, relative base and seqs after the token index
	seqs       bool // kallsyms_seqs_of_names (6.2 on; 6.1 stable backport)
	longNames  bool // 2-byte name lengths (6.1 on)
	absPercpu  bool // CONFIG_KALLSYMS_ABSOLUTE_PERCPU (x86_64 up to 6.14)
	slide      uint64
}

// synthSyms makes a kernel's worth of symbols: per-CPU ones at small
// absolute addresses (with absPercpu), then the image from _text.
func synthSyms(l kallsymsLayout) []symbols.Symbol {
	var syms []symbols.Symbol
	if l.absPercpu {
		syms = append(syms, symbols.Symbol{Name: "fixed_percpu_data", Kind: 'A', Addr: 0},
			symbols.Symbol{Name: "__per_cpu_start", Kind: 'A', Addr: 0},
			symbols.Symbol{Name: "cpu_debug_store", Kind: 'A', Addr: 0x1000})
	}
	text := uint64(0xffffffff81000000) + l.slide
	syms = append(syms, symbols.Symbol{Name: "_text", Kind: 'T', Addr: text}, symbols.Symbol{Name: "_stext", Kind: 'T', Addr: text})
	kinds := "TtTtDdRrBbWt"
	a := text + 0x100
	for i := 0; i < 3000; i++ {
		name := fmt.Sprintf("%s_%d_%x", []string{"do_sys_open", "ext4_file_write", "tcp_v4_rcv", "__x64_sys_getppid", "kmalloc_caches", "vfs_read", "ZSTD_compress", "Q9_probe"}[i%8], i, i*7919)
		if l.longNames && i == 1234 {
			name = strings.Repeat("a_very_long_rust_symbol_name_", 12) + "end"
		}
		syms = append(syms, symbols.Symbol{Name: name, Kind: kinds[i%len(kinds)], Addr: a})
		a += uint64(16 + i%64)
	}
	syms = append(syms, symbols.Symbol{Name: "linux_banner", Kind: 'D', Addr: a})
	return syms
}

// encodeNames compresses names as scripts/kallsyms does in kind: a byte
// used in some name stands for itself; the unused codes stand for the most
// frequent pairs. It returns the token table's 256 entries and the
// encoded names.
func encodeNames(names []string) ([256]string, [][]byte) {
	var tokens [256]string
	used := [256]bool{}
	for _, n := range names {
		for i := 0; i < len(n); i++ {
			used[n[i]] = true
		}
	}
	pairs := map[string]int{}
	for _, n := range names {
		for i := 0; i+1 < len(n); i++ {
			pairs[n[i:i+2]]++
		}
	}
	byCount := make([]string, 0, len(pairs))
	for p := range pairs {
		byCount = append(byCount, p)
	}
	slices.SortFunc(byCount, func(a, b string) int {
		if pairs[a] != pairs[b] {
			return pairs[b] - pairs[a]
		}
		return strings.Compare(a, b)
	})
	code := map[string]byte{}
	for c := 0; c < 256; c++ {
		if used[c] {
			tokens[c] = string(rune(c))
			continue
		}
		if len(byCount) > 0 {
			tokens[c], byCount = byCount[0], byCount[1:]
			code[tokens[c]] = byte(c)
		} else {
			tokens[c] = "~~" // never used
		}
	}
	enc := make([][]byte, len(names))
	for i, n := range names {
		for j := 0; j < len(n); {
			if j+1 < len(n) {
				if c, ok := code[n[j:j+2]]; ok {
					enc[i] = append(enc[i], c)
					j += 2
					continue
				}
			}
			enc[i] = append(enc[i], n[j])
			j++
		}
	}
	return tokens, enc
}

// synthKallsyms lays the tables of syms out as l's kernel does, in a
// guest whose image starts at 0xffffffff81000000 + l.slide, the tables
// in its read-only data 2 MiB further, after a hole.
func synthKallsyms(t *testing.T, l kallsymsLayout, syms []symbols.Symbol) *guestMem {
	t.Helper()
	names := make([]string, len(syms))
	for i, s := range syms {
		names[i] = string(s.Kind) + s.Name
	}
	tokens, enc := encodeNames(names)
	var b []byte
	align := func() {
		for len(b)%8 != 0 {
			b = append(b, 0)
		}
	}
	u32 := func(v uint32) { b = binary.LittleEndian.AppendUint32(b, v) }
	base := uint64(0xffffffff81000000) + l.slide
	offsets := func() {
		align()
		for _, s := range syms {
			switch {
			case !l.absPercpu:
				u32(uint32(s.Addr - base))
			case s.Addr < 0xffffffff80000000:
				u32(uint32(s.Addr))
			default:
				u32(uint32(int32(-1 - int64(s.Addr-base))))
			}
		}
		align()
		b = binary.LittleEndian.AppendUint64(b, base)
	}
	seqs := func() {
		align()
		for i := range syms {
			b = append(b, byte(i>>16), byte(i>>8), byte(i)) // not sorted by name: not read
		}
	}
	if !l.offsetLast {
		offsets()
	}
	align()
	u32(uint32(len(syms)))
	align()
	var markers []uint32
	long := 0
	start := len(b)
	for i, e := range enc {
		if i%256 == 0 {
			markers = append(markers, uint32(len(b)-start))
		}
		if len(e) > 127 {
			if !l.longNames {
				t.Fatalf("name %d too long for %s", i, l.name)
			}
			b = append(b, byte(len(e)&0x7f|0x80), byte(len(e)>>7))
			long++
		} else {
			b = append(b, byte(len(e)))
		}
		b = append(b, e...)
	}
	if l.longNames != (long > 0) {
		t.Fatalf("%s: %d names with a 2-byte length", l.name, long)
	}
	align()
	for _, m := range markers {
		u32(m)
	}
	if l.seqs && !l.offsetLast {
		seqs()
	}
	align()
	var index [256]uint16
	tab := len(b)
	for i, tk := range tokens {
		index[i] = uint16(len(b) - tab)
		b = append(b, tk...)
		b = append(b, 0)
	}
	align()
	for _, x := range index {
		b = binary.LittleEndian.AppendUint16(b, x)
	}
	if l.offsetLast {
		offsets()
		if l.seqs {
			seqs()
		}
	}
	mem := newMem()
	text := uint64(0xffffffff81000000) + l.slide
	mem.put(text, []byte("\x0f\x1f\x44\x00\x00text"))
	mem.put(text+2<<20, []byte("Linux version 6.x (synthetic)\x00"))
	mem.put(text+2<<20+0x10000, b)
	return mem
}

// The decoder reads the tables of every kernel generation it claims, laid
// out as that generation's scripts/kallsyms does: the symbols come back
// with their types and addresses, moved by the slide.
func TestKallsymsLayouts(t *testing.T) {
	for _, l := range []kallsymsLayout{
		{name: "5.10", absPercpu: true},
		{name: "6.1 stable", seqs: true, longNames: true, absPercpu: true, slide: 0x1c600000},
		{name: "6.3", seqs: true, longNames: true, absPercpu: true, slide: 0x200000},
		{name: "6.12", offsetLast: true, seqs: true, longNames: true, absPercpu: true, slide: 0x3e000000},
		{name: "6.15", offsetLast: true, seqs: true, longNames: true, slide: 0x5000000},
	} {
		t.Run(l.name, func(t *testing.T) {
			syms := synthSyms(l)
			mem := synthKallsyms(t, l, syms)
			text, err := linuxkernel.FindText(mem)
			if err != nil {
				t.Fatal(err)
			}
			ks, err := linuxkernel.ReadKallsyms(mem, text)
			if err != nil {
				t.Fatal(err)
			}
			sameSyms(t, ks.Syms, syms)
			if ks.Text != 0xffffffff81000000+l.slide {
				t.Errorf("_text at %#x", ks.Text)
			}
			t.Logf("%s, %d symbols", ks.Layout, len(ks.Syms))

			// as the kernel's symbols: link-time addresses, the slide
			t.Setenv("GPROBES_KERNEL_CACHE", t.TempDir())
			k, err := linuxkernel.New(mem, linuxkernel.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if slide, ok := k.Slide(); !ok || slide != l.slide {
				t.Errorf("slide %#x %v, want %#x", slide, ok, l.slide)
			}
			s, err := k.Symbols().Lookup("linux_banner")
			if err != nil || s.Addr+l.slide != syms[len(syms)-1].Addr {
				t.Errorf("linux_banner: %#x %v", s.Addr, err)
			}
			_, types := k.Sources()
			if !strings.Contains(types, "no BTF") || !strings.Contains(types, "give its vmlinux") {
				t.Errorf("types from %q", types)
			}
		})
	}
}
