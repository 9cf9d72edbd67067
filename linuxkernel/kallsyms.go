package linuxkernel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gprobes/gprobes/symbols"
)

// Kernel symbols read from guest memory: the kallsyms tables that
// scripts/kallsyms links into every kernel built with CONFIG_KALLSYMS,
// found without any symbol by their shape (docs/guest.md, "Symbols and
// types from guest memory"). All labels are 8-byte aligned:
//
//	kallsyms_num_syms     u32
//	kallsyms_names        per symbol: a length (one byte; from 6.1 two when
//	                      the first has bit 7 set: low 7 bits, then the
//	                      rest), then that many token indices; the first
//	                      expanded character is the nm type letter
//	kallsyms_markers      u32 per 256 symbols: the offset in names of
//	                      symbol 256*i
//	kallsyms_token_table  256 NUL-terminated strings; a byte that occurs
//	                      in some name stands for itself ("0" at index 48)
//	kallsyms_token_index  u16[256]: where each token starts in the table
//	kallsyms_offsets      s32 per symbol, and kallsyms_relative_base (u64)
//
// Up to 6.3 the offsets and the relative base come before num_syms; from
// 6.4 after the token index. 6.2 and 6.3 (and 6.1 stable kernels, Debian
// 12's among them, which took it back) put kallsyms_seqs_of_names, 3 bytes
// per symbol, between the markers and the token table. With
// CONFIG_KALLSYMS_ABSOLUTE_PERCPU (x86_64 up to 6.14) an offset >= 0 is an
// absolute value (per-CPU symbols) and a negative one relative_base-1-off;
// without it every offset is relative_base+u32(off). Symbols are sorted by
// address, which the decoder checks.

const (
	// kernelMap is __START_KERNEL_map: the image is mapped at a 2 MiB
	// aligned address in the 1 GiB above it (KASLR included).
	kernelMap   = 0xffffffff80000000
	kernelAlign = 2 << 20
	kernelSpan  = 1 << 30
	// defaultText is _text's link-time address with the default
	// CONFIG_PHYSICAL_START (16 MiB): the slide of a kernel whose
	// symbols come from its memory is measured from it.
	defaultText = 0xffffffff81000000
	// maxSyms bounds num_syms (a distribution kernel has about 100,000
	// with CONFIG_KALLSYMS_ALL).
	maxSyms = 4 << 20
	// maxBlock bounds the names of 256 symbols: a name is at most
	// KSYM_NAME_LEN (512 from 6.1) bytes after its 2-byte length
	maxBlock = 256 * (2 + 512)
)

// digits is "0" to "9" as token table entries, with the NUL ending the
// token before "0": the table's recognisable run.
var digits = []byte("\x000\x001\x002\x003\x004\x005\x006\x007\x008\x009\x00")

// Kallsyms is what was decoded from a kernel's kallsyms tables.
type Kallsyms struct {
	Text    uint64 // where _text is (the image's first address)
	Syms    []symbols.Symbol
	Tokens  uint64 // kallsyms_token_table
	Names   uint64 // kallsyms_names
	Offsets uint64 // kallsyms_offsets
	Base    uint64 // kallsyms_relative_base's value
	Layout  string // "offsets first (up to 6.3)" or "offsets last (6.4 on)"
}

// memReader reads guest memory in large pieces, pages that do not read
// (the holes the kernel unmaps in its image) left as zeros and reported.
type memReader struct {
	mem   Memory
	reads int // requests made, for the benchmark note
}

const page = 4096

// read reads [addr, addr+n): ok[i] says whether page i was read.
func (r *memReader) read(addr uint64, n int) ([]byte, []bool) {
	b := make([]byte, n)
	pages := (int(addr%page) + n + page - 1) / page
	ok := make([]bool, pages)
	r.reads++
	if err := r.mem.ReadMem(addr, b); err == nil {
		for i := range ok {
			ok[i] = true
		}
		return b, ok
	}
	clear(b)
	for i := 0; i < pages; i++ {
		lo := int64(i*page) - int64(addr%page)
		hi := lo + page
		lo, hi = max(lo, 0), min(hi, int64(n))
		r.reads++
		if r.mem.ReadMem(addr+uint64(lo), b[lo:hi]) == nil {
			ok[i] = true
		} else {
			clear(b[lo:hi])
		}
	}
	return b, ok
}

// exact reads [addr, addr+n) or fails.
func (r *memReader) exact(addr uint64, n int) ([]byte, error) {
	b := make([]byte, n)
	r.reads++
	if err := r.mem.ReadMem(addr, b); err != nil {
		return nil, err
	}
	return b, nil
}

// FindText finds the kernel image's first address (_text): the first
// readable 2 MiB-aligned address above __START_KERNEL_map (the kernel
// unmaps its own mapping below _text at boot).
func FindText(mem Memory) (uint64, error) {
	var b [8]byte
	for a := uint64(kernelMap); a < kernelMap+kernelSpan; a += kernelAlign {
		if mem.ReadMem(a, b[:]) == nil {
			return a, nil
		}
	}
	return 0, fmt.Errorf("no kernel image: nothing readable at any 2 MiB-aligned address from %#x to %#x (not a 64-bit Linux guest, or its page tables are not reachable)", uint64(kernelMap), uint64(kernelMap+kernelSpan))
}

// scanStart is where to look for the tables: the first 2 MiB boundary
// after the hole the kernel leaves between its text and its read-only
// data (mark_rodata_ro unmaps it), or text itself when no hole shows.
func scanStart(r *memReader, text uint64) uint64 {
	var b [8]byte
	for a := text + kernelAlign; a < text+256<<20; a += kernelAlign {
		r.reads++
		if r.mem.ReadMem(a-page, b[:]) != nil {
			r.reads++
			if r.mem.ReadMem(a, b[:]) == nil {
				return a
			}
		}
	}
	return text
}

// ReadKallsyms finds and decodes the kernel's kallsyms tables in guest
// memory. text is the image's first address (FindText).
func ReadKallsyms(mem Memory, text uint64) (*Kallsyms, error) {
	r := &memReader{mem: mem}
	from := scanStart(r, text)
	var tried []string
	const chunk = 256 << 10
	end := text + kernelSpan
	unread := 0
	for a := from; a < end; a += chunk - uint64(len(digits)) {
		b, ok := r.read(a, chunk)
		if !slices.Contains(ok, true) {
			unread++
			if unread > 64 && a > from+64<<20 {
				break // 16 MiB of nothing: past the image
			}
			continue
		}
		unread = 0
		for i := 0; ; {
			j := bytes.Index(b[i:], digits)
			if j < 0 {
				break
			}
			i += j + 1
			ks, err := decodeAt(r, a+uint64(i), text)
			if err == nil {
				return ks, nil
			}
			tried = append(tried, fmt.Sprintf("%#x: %v", a+uint64(i), err))
		}
	}
	msg := "no kallsyms token table (the run \"0\" to \"9\" of one-character tokens) in the kernel image"
	if len(tried) > 0 {
		msg = fmt.Sprintf("no kallsyms tables: %d candidate token tables, none followed by a valid token index, markers and names (%s)", len(tried), strings.Join(tried, "; "))
	}
	return nil, errors.New(msg)
}

// decodeAt tries the token "0" at zero as the kallsyms token table's
// entry 48.
func decodeAt(r *memReader, zero, text uint64) (*Kallsyms, error) {
	w, _ := r.read(zero, 8192) // the tables may end the mapped image: what is not read is zeros
	// tokens 48 to 255, then the index, 8-aligned
	pos := 0
	for i := 48; i < 256; i++ {
		n := bytes.IndexByte(w[pos:min(len(w), pos+256)], 0)
		if n <= 0 {
			return nil, fmt.Errorf("token %d is not a short string", i)
		}
		pos += n + 1
	}
	tabEnd := zero + uint64(pos)
	idxAddr := (tabEnd + 7) &^ 7
	io := int(idxAddr - zero)
	if io+512 > len(w) {
		return nil, errors.New("token table too long")
	}
	var index [256]uint16
	for i := range index {
		index[i] = binary.LittleEndian.Uint16(w[io+2*i:])
	}
	if index[0] != 0 || uint64(index[48]) > zero-kernelMap {
		return nil, errors.New("token index does not start at 0")
	}
	tab := zero - uint64(index[48])
	if tab%8 != 0 || tabEnd-tab > 0xffff {
		return nil, errors.New("token table not 8-byte aligned")
	}
	tb, err := r.exact(tab, int(tabEnd-tab))
	if err != nil {
		return nil, err
	}
	var tokens [256][]byte
	for i := range tokens {
		lo := int(index[i])
		hi := len(tb)
		if i < 255 {
			hi = int(index[i+1])
		}
		if lo >= hi || hi > len(tb) || tb[hi-1] != 0 || bytes.IndexByte(tb[lo:hi-1], 0) >= 0 || hi-lo < 2 {
			return nil, fmt.Errorf("token %d does not match the token index", i)
		}
		tokens[i] = tb[lo : hi-1]
	}
	ks := &Kallsyms{Tokens: tab}
	idxEnd := idxAddr + 512

	// before the token table: the markers, or (6.2, 6.3, and 6.1 stable
	// kernels with the backport) kallsyms_seqs_of_names, 3 bytes per
	// symbol, between the markers and the token table
	u32 := func(b []byte, off int) uint32 { return binary.LittleEndian.Uint32(b[off:]) }
	for _, win := range []int{256 << 10, 2 << 20, 8 << 20} {
		if uint64(win) > tab-kernelMap {
			win = int(tab - kernelMap)
		}
		wb, _ := r.read(tab-uint64(win), win)
		for g := 0; g+16 <= win; g += 8 {
			e := win - g // the markers (and their padding) end at wb[e]
			var cands []int
			if g == 0 {
				// walk back: values fall to markers[0] == 0
				p := e
				if u32(wb, p-4) == 0 && u32(wb, p-8) != 0 {
					p -= 4
				}
				m, prev := 0, uint32(0)
				for p >= 4 {
					v := u32(wb, p-4)
					p -= 4
					if m > 0 && (v >= prev || prev-v > maxBlock) {
						break
					}
					m, prev = m+1, v
					if v == 0 {
						cands = append(cands, m)
						break
					}
				}
			} else {
				// g = 3n rounded up to 8: n, and so the count of markers
				lo, hi := (g-7+2)/3, g/3
				for m := (lo + 255) / 256; m <= (hi+255)/256; m++ {
					if m > 0 {
						cands = append(cands, m)
					}
				}
			}
			for _, m := range cands {
				start := (e - 4*m) &^ 7
				if start < 0 || e-start-4*m >= 8 || u32(wb, start) != 0 {
					continue
				}
				markers := make([]uint32, m)
				ok := true
				for i := range markers {
					markers[i] = u32(wb, start+4*i)
					if i > 0 && (markers[i] <= markers[i-1] || markers[i]-markers[i-1] > maxBlock) {
						ok = false
						break
					}
				}
				for o := start + 4*m; ok && o < e; o++ {
					ok = wb[o] == 0
				}
				if !ok {
					continue
				}
				markersAddr := tab - uint64(win-start)
				syms, names, err := findNames(r, markersAddr, markers, g, &tokens)
				if err != nil {
					continue
				}
				ks.Names = names
				if err := addresses(r, ks, syms, names-8, idxEnd, text); err != nil {
					return nil, err
				}
				ks.Syms = syms
				return ks, nil
			}
		}
		if win == int(tab-kernelMap) {
			break
		}
	}
	return nil, errors.New("no kallsyms_markers, kallsyms_num_syms and kallsyms_names before the token table")
}

// findNames finds kallsyms_num_syms and kallsyms_names before the markers
// at markersAddr: num_syms then 4 bytes of padding, the names 8-aligned,
// every 256th name where its marker says, the last block of at most 256
// names ending at the markers. seqs is the size of kallsyms_seqs_of_names
// after the markers (0: none): 3 bytes per symbol, rounded up to 8.
func findNames(r *memReader, markersAddr uint64, markers []uint32, seqs int, tokens *[256][]byte) ([]symbols.Symbol, uint64, error) {
	u32 := func(b []byte, off int) uint32 { return binary.LittleEndian.Uint32(b[off:]) }
	last := uint64(markers[len(markers)-1])
	m := len(markers)
	span := int(last) + maxBlock + 16
	if uint64(span) > markersAddr-kernelMap {
		span = int(markersAddr - kernelMap)
	}
	nb, _ := r.read(markersAddr-uint64(span), span)
	for s := (markersAddr - last) &^ 7; ; s -= 8 {
		o := int(s - (markersAddr - uint64(span)))
		if o < 8 {
			break
		}
		n := int(u32(nb, o-8))
		if n == 0 || n > maxSyms || (n+255)/256 != m || u32(nb, o-4) != 0 {
			continue
		}
		if seqs != 0 && (3*n+7)&^7 != seqs {
			continue
		}
		offs, ok := walkNames(nb[o:], n, markers)
		if !ok || markersAddr-(s+uint64(offs[n])) >= 8 {
			continue
		}
		syms, err := expand(nb[o:], offs, tokens)
		if err != nil {
			return nil, 0, err
		}
		return syms, s, nil
	}
	return nil, 0, errors.New("no kallsyms_num_syms and kallsyms_names agreeing with the markers")
}

// walkNames walks n names from the start of b; offs[i] is where name i
// starts (offs[n] the end). ok when every 256th matches the markers.
func walkNames(b []byte, n int, markers []uint32) ([]int, bool) {
	offs := make([]int, n+1)
	o := 0
	for i := 0; i < n; i++ {
		if i%256 == 0 && uint32(o) != markers[i/256] {
			return nil, false
		}
		offs[i] = o
		if o >= len(b) {
			return nil, false
		}
		l := int(b[o])
		o++
		if l&0x80 != 0 {
			if o >= len(b) {
				return nil, false
			}
			l = l&0x7f | int(b[o])<<7
			o++
		}
		if l == 0 {
			return nil, false
		}
		o += l
	}
	if o > len(b) {
		return nil, false
	}
	offs[n] = o
	return offs, true
}

// expand decodes each name: its tokens' text, the first character the type.
func expand(b []byte, offs []int, tokens *[256][]byte) ([]symbols.Symbol, error) {
	n := len(offs) - 1
	syms := make([]symbols.Symbol, n)
	var buf []byte
	for i := 0; i < n; i++ {
		o := offs[i] + 1
		if b[offs[i]]&0x80 != 0 {
			o++
		}
		buf = buf[:0]
		for _, t := range b[o:offs[i+1]] {
			buf = append(buf, tokens[t]...)
		}
		if len(buf) < 2 {
			return nil, fmt.Errorf("symbol %d decodes to %q", i, buf)
		}
		syms[i] = symbols.Symbol{Kind: buf[0], Name: string(buf[1:])}
	}
	return syms, nil
}

// addresses fills in the symbols' addresses from kallsyms_offsets and
// kallsyms_relative_base, before num_syms (up to 6.3) or after the token
// index (from 6.4): the layout whose addresses are sorted and put _text
// at the image's start (or, failing that, anywhere in its span) wins.
func addresses(r *memReader, ks *Kallsyms, syms []symbols.Symbol, numSyms, idxEnd, text uint64) error {
	n := len(syms)
	size := (uint64(4*n) + 7) &^ 7
	type layout struct {
		name      string
		offs, rel uint64
	}
	var why []string
	for _, l := range []layout{
		{"offsets first (up to 6.3)", numSyms - 8 - size, numSyms - 8},
		{"offsets last (6.4 on)", (idxEnd + 7) &^ 7, ((idxEnd+7)&^7 + size)},
	} {
		rb, err := r.exact(l.rel, 8)
		if err != nil {
			why = append(why, fmt.Sprintf("%s: %v", l.name, err))
			continue
		}
		base := binary.LittleEndian.Uint64(rb)
		if base < kernelMap {
			why = append(why, fmt.Sprintf("%s: relative base %#x is not a kernel address", l.name, base))
			continue
		}
		ob, err := r.exact(l.offs, 4*n)
		if err != nil {
			why = append(why, fmt.Sprintf("%s: %v", l.name, err))
			continue
		}
		neg := 0
		for i := 0; i < n; i++ {
			if int32(binary.LittleEndian.Uint32(ob[4*i:])) < 0 {
				neg++
			}
		}
		absPercpu := neg > n/2
		addrs := make([]uint64, n)
		sorted := true
		for i := 0; i < n; i++ {
			off := int32(binary.LittleEndian.Uint32(ob[4*i:]))
			switch {
			case !absPercpu:
				addrs[i] = base + uint64(uint32(off))
			case off >= 0:
				addrs[i] = uint64(off)
			default:
				addrs[i] = base + uint64(-1-int64(off))
			}
			if i > 0 && addrs[i] < addrs[i-1] {
				sorted = false
			}
		}
		if !sorted {
			why = append(why, l.name+": addresses not sorted")
			continue
		}
		t := uint64(0)
		for i, s := range syms {
			if s.Name == "_text" {
				t = addrs[i]
				break
			}
		}
		if t < kernelMap || t%kernelAlign != 0 {
			why = append(why, fmt.Sprintf("%s: _text at %#x", l.name, t))
			continue
		}
		for i := range syms {
			syms[i].Addr = addrs[i]
		}
		ks.Text, ks.Offsets, ks.Base, ks.Layout = t, l.offs, base, l.name
		return nil
	}
	return fmt.Errorf("kallsyms_offsets: %v", why)
}
