package entries

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// image reads a file's loaded bytes by address: its PT_LOAD segments as
// the file holds them (a segment's zero-filled tail reads as zeros).
type image struct {
	segs []segment
}

type segment struct {
	addr, filesz, memsz uint64
	data                []byte
}

func newImage(f *elf.File) *image {
	img := &image{}
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Memsz == 0 {
			continue
		}
		data, err := io.ReadAll(io.NewSectionReader(p, 0, int64(p.Filesz)))
		if err != nil {
			continue
		}
		img.segs = append(img.segs, segment{addr: p.Vaddr, filesz: p.Filesz, memsz: p.Memsz, data: data})
	}
	if len(img.segs) == 0 {
		// a relocatable object or a file without program headers: its
		// allocated sections at their addresses
		for _, sec := range f.Sections {
			if sec.Flags&elf.SHF_ALLOC == 0 || sec.Type == elf.SHT_NOBITS || sec.Size == 0 {
				continue
			}
			data, err := sec.Data()
			if err != nil {
				continue
			}
			img.segs = append(img.segs, segment{addr: sec.Addr, filesz: uint64(len(data)), memsz: sec.Size, data: data})
		}
	}
	return img
}

// read returns n bytes at addr, all in one segment.
func (img *image) read(addr, n uint64) ([]byte, bool) {
	for _, s := range img.segs {
		if addr >= s.addr && addr-s.addr < s.memsz && n <= s.memsz-(addr-s.addr) {
			off := addr - s.addr
			if off+n <= uint64(len(s.data)) {
				return s.data[off : off+n], true
			}
			out := make([]byte, n)
			if off < uint64(len(s.data)) {
				copy(out, s.data[off:])
			}
			return out, true
		}
	}
	return nil, false
}

// readUpTo returns up to n bytes at addr, as many as its segment holds.
func (img *image) readUpTo(addr, n uint64) ([]byte, bool) {
	for _, s := range img.segs {
		if addr >= s.addr && addr-s.addr < s.memsz {
			return img.read(addr, min(n, s.memsz-(addr-s.addr)))
		}
	}
	return nil, false
}

// fde is one range of the unwind table.
type fde struct {
	begin, end uint64
	lsda       uint64 // its exception table, 0: none
}

// Pointer encodings of .eh_frame (DW_EH_PE_*).
const (
	peAbsptr  = 0x00
	peUleb128 = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSleb128 = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c
	pePCRel   = 0x10
	peTextRel = 0x20
	peDataRel = 0x30
	peFuncRel = 0x40
	peAligned = 0x50
	peIndir   = 0x80
	peOmit    = 0xff
)

// reader reads little-endian DWARF-style values from b, which is at addr.
type reader struct {
	b    []byte
	addr uint64
	off  int
	err  error
}

func (r *reader) need(n int) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || r.off < 0 || r.off > len(r.b) || n > len(r.b)-r.off {
		r.err = fmt.Errorf("truncated at %#x", r.addr+uint64(r.off))
		return false
	}
	return true
}

func (r *reader) u8() uint8 {
	if !r.need(1) {
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *reader) u16() uint16 {
	if !r.need(2) {
		return 0
	}
	v := binary.LittleEndian.Uint16(r.b[r.off:])
	r.off += 2
	return v
}

func (r *reader) u32() uint32 {
	if !r.need(4) {
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

func (r *reader) u64() uint64 {
	if !r.need(8) {
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v
}

func (r *reader) uleb() uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c := r.u8()
		if r.err != nil {
			return 0
		}
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		if c&0x80 == 0 {
			return v
		}
	}
}

func (r *reader) sleb() int64 {
	var v int64
	var shift uint
	var c uint8
	for {
		c = r.u8()
		if r.err != nil {
			return 0
		}
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			break
		}
	}
	if shift < 64 && c&0x40 != 0 {
		v |= -1 << shift
	}
	return v
}

func (r *reader) cstring() string {
	start := r.off
	for r.need(1) {
		if r.b[r.off] == 0 {
			s := string(r.b[start:r.off])
			r.off++
			return s
		}
		r.off++
	}
	return ""
}

// ptr reads a pointer in encoding enc. Indirect pointers (peIndir) are
// read through img. func is the start of the function for peFuncRel.
func (r *reader) ptr(enc uint8, img *image, fn uint64) uint64 {
	if enc == peOmit {
		return 0
	}
	at := r.addr + uint64(r.off)
	if enc&0x70 == peAligned {
		for (at % 8) != 0 {
			r.u8()
			at++
		}
		enc = peAbsptr
	}
	var v uint64
	switch enc & 0x0f {
	case peAbsptr, peUdata8, peSdata8:
		v = r.u64()
	case peUleb128:
		v = r.uleb()
	case peUdata2:
		v = uint64(r.u16())
	case peUdata4:
		v = uint64(r.u32())
	case peSleb128:
		v = uint64(r.sleb())
	case peSdata2:
		v = uint64(int64(int16(r.u16())))
	case peSdata4:
		v = uint64(int64(int32(r.u32())))
	default:
		r.err = fmt.Errorf("pointer encoding %#x at %#x", enc, at)
		return 0
	}
	switch enc & 0x70 {
	case pePCRel:
		v += at
	case peFuncRel:
		v += fn
	case peTextRel, peDataRel:
		// not used for code addresses by x86-64 compilers
		r.err = fmt.Errorf("pointer encoding %#x at %#x", enc, at)
		return 0
	}
	if enc&peIndir != 0 && r.err == nil {
		b, ok := img.read(v, 8)
		if !ok {
			r.err = fmt.Errorf("indirect pointer at %#x", v)
			return 0
		}
		v = binary.LittleEndian.Uint64(b)
	}
	return v
}

type cie struct {
	fdeEnc, lsdaEnc uint8
	aug             string
}

// readEHFrame reads the ranges of .eh_frame and their exception tables.
// A file without one (static code with -fno-asynchronous-unwind-tables)
// has none.
func readEHFrame(f *elf.File, img *image) ([]fde, error) {
	sec := f.Section(".eh_frame")
	if sec == nil || sec.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	data, err := sec.Data()
	if err != nil {
		return nil, err
	}
	cies := map[int]*cie{}
	var out []fde
	for off := 0; off+4 <= len(data); {
		r := &reader{b: data, addr: sec.Addr, off: off}
		length := uint64(r.u32())
		if length == 0 {
			break // the terminator
		}
		if length == 0xffffffff {
			length = r.u64()
		}
		start := r.off
		if r.err != nil || length > uint64(len(data)-start) {
			return out, fmt.Errorf("a record at %#x runs past the section", sec.Addr+uint64(off))
		}
		end := start + int(length)
		idAt := r.off
		id := r.u32()
		rec := &reader{b: data[:end], addr: sec.Addr, off: r.off}
		if id == 0 {
			c, err := parseCIE(rec, img)
			if err != nil {
				return out, fmt.Errorf("the CIE at %#x: %w", sec.Addr+uint64(off), err)
			}
			cies[off] = c
		} else {
			cieOff := idAt - int(id)
			c := cies[cieOff]
			if c == nil {
				if cieOff < 0 || cieOff >= len(data) {
					return out, fmt.Errorf("the FDE at %#x names no CIE", sec.Addr+uint64(off))
				}
				cr := &reader{b: data, addr: sec.Addr, off: cieOff}
				l := cr.u32()
				if l == 0xffffffff {
					cr.u64()
				}
				cr.u32()
				c, err = parseCIE(cr, img)
				if err != nil {
					return out, fmt.Errorf("the CIE at %#x: %w", sec.Addr+uint64(cieOff), err)
				}
				cies[cieOff] = c
			}
			begin := rec.ptr(c.fdeEnc, img, 0)
			n := rec.ptr(c.fdeEnc&0x0f, img, 0)
			fd := fde{begin: begin, end: begin + n}
			if len(c.aug) > 0 && c.aug[0] == 'z' {
				augLen := rec.uleb()
				augEnd := rec.off + int(augLen)
				if c.lsdaEnc != peOmit && rec.err == nil {
					fd.lsda = rec.ptr(c.lsdaEnc, img, begin)
				}
				rec.off = augEnd
			}
			if rec.err != nil {
				return out, fmt.Errorf("the FDE at %#x: %w", sec.Addr+uint64(off), rec.err)
			}
			if n > 0 {
				out = append(out, fd)
			}
		}
		off = end
	}
	return out, nil
}

func parseCIE(r *reader, img *image) (*cie, error) {
	c := &cie{fdeEnc: peAbsptr, lsdaEnc: peOmit}
	version := r.u8()
	c.aug = r.cstring()
	if len(c.aug) >= 2 && c.aug[:2] == "eh" {
		r.u64()
	}
	r.uleb() // code alignment
	r.sleb() // data alignment
	if version == 1 {
		r.u8()
	} else {
		r.uleb()
	}
	if len(c.aug) > 0 && c.aug[0] == 'z' {
		augLen := r.uleb()
		end := r.off + int(augLen)
		for _, ch := range c.aug[1:] {
			switch ch {
			case 'L':
				c.lsdaEnc = r.u8()
			case 'R':
				c.fdeEnc = r.u8()
			case 'P':
				enc := r.u8()
				r.ptr(enc&^peIndir, img, 0) // the personality routine: not followed
			case 'S', 'B', 'G':
			default:
				// unknown augmentation: its data is skipped by length
				r.off = end
			}
		}
		r.off = end
	}
	if r.err != nil {
		return nil, r.err
	}
	return c, nil
}

// pad is a landing pad and the start of the call-site range it serves.
type pad struct{ pad, call uint64 }

// landingPads reads the call-site table of an exception table (the
// language-specific data area of gcc and clang's C++ and of every
// language using their personality routines' format).
func landingPads(img *image, fd fde) ([]pad, error) {
	b, ok := img.readUpTo(fd.lsda, 1<<20)
	if !ok {
		return nil, errors.New("not in the file's loaded data")
	}
	r := &reader{b: b, addr: fd.lsda}
	lpStart := fd.begin
	if enc := r.u8(); enc != peOmit {
		lpStart = r.ptr(enc, img, fd.begin)
	}
	if enc := r.u8(); enc != peOmit {
		r.uleb() // the type table's offset
	}
	csEnc := r.u8()
	csLen := r.uleb()
	if r.err != nil {
		return nil, r.err
	}
	end := r.off + int(csLen)
	if csLen > uint64(len(b)) || end > len(b) {
		return nil, errors.New("its call-site table runs past the data")
	}
	var out []pad
	for r.off < end && r.err == nil {
		start := r.ptr(csEnc, img, fd.begin)
		r.ptr(csEnc, img, fd.begin) // length
		lp := r.ptr(csEnc, img, fd.begin)
		r.uleb() // action
		if r.err == nil && lp != 0 {
			out = append(out, pad{pad: lpStart + lp, call: fd.begin + start})
		}
	}
	return out, r.err
}
