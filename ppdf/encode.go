package ppdf

// The PPDF file format, versions 4 and 5. docs/ppdf.md is the same
// specification for users and third-party tools, with a hex dump of a
// small file. Decode also reads versions 2 (MinVersion) and 3, whose
// differences are marked "v3" and "v4" below: version 3 has no watch probe
// kind, no disabled flag and no watch length and mode; version 2 also has
// no probe kind, no maxactive and no fields section, and its location kinds
// stop at 2.
//
// Version 5 is a pack of several builds (pack.go): after the file length,
// two or more build sections, tag 0x10, each payload the eight required
// sections below for one build exactly as version 4 has them, sorted by
// build ID (distinct, non-empty), the builds one DPDF's (validatePack);
// then optional sections and the checksum. A pack of one build is written
// as version 4 (ModuleVersion).
//
// All integers are little-endian and fixed width: u8, u16, u32, u64. A str
// is a u32 byte count followed by that many bytes (no terminator, no
// encoding requirement: file names are Unix paths and may be any bytes). A
// flags byte has its unused bits zero.
//
//	offset  size  field
//	0       9     magic "\x89PPDF\r\n\x1a\n"
//	9       2     u16 version (Version)
//	11      4     u32 length of the whole file in bytes, magic and checksum included
//	15      ...   sections
//	len-32  32    SHA-256 of every byte before it
//
// A section is
//
//	u8   tag
//	u32  payload length in bytes
//	...  payload
//
// The eight sections below (seven in version 2: no 0x08) are all present,
// exactly once, in this order, even when empty, and each payload is
// consumed exactly. After them come optional sections, tags 0x80..0xfe in
// ascending order: a reader skips one it does not know, so adding an
// optional section does not change Version. 0x80 holds the probes'
// formats (formatsSize); a reader that does not know it shows records
// without them. Tags
// 0x09..0x7f, 0x00 and 0xff are reserved.
//
//	0x01 header
//	     str  name                       Header.Name
//	     u8   module type                0 user, 1 kernel
//	     u16  major
//	     u32  jmpmax                     1..65535
//	     u32  logmax                     1..65536
//	     u8   dfltexit                   0..4
//	     u16  vars                       0..256
//	     u16  gvars                      0..256
//	     u8   arch                       0 x86_64, 1 i386
//	0x02 build ID
//	     ...  the ELF build ID of the probed module, 0..MaxBuildID bytes (the payload is the ID)
//	0x03 files
//	     u16  count                      (Pos.File is a u16 index into this table)
//	     str  name, count times          Files[0] is the DPDF itself
//	0x04 probes
//	     u32  count
//	     count times, 58 bytes (56 in version 3, 51 in version 2) + the text + the location's data:
//	       u8   probe kind               v3: 0 offset, 1 retprobe, 2 tracepoint; v4: 3 watch
//	       str  location text            as written: "do_fork+0x1c", "fs/open.c:1234", "sched:sched_switch"
//	       u8   location kind            0 symbolic, 1 line, 2 absolute, 3 tracepoint (v3)
//	       ...  the location's data, by kind:
//	              0 symbolic:   sum      what the location adds up to (see below)
//	              1 line:       str file as written: "fs/open.c"
//	                            u32 line from 1
//	              2 absolute:   nothing  the address is the address below
//	              3 tracepoint: nothing  the text is the data: SUBSYS:EVENT
//	       u8   flags                    bit 0 resolved, bit 1 has opcode, bit 2 logonfault,
//	                                     bit 3 disabled (v4: enabled = no),
//	                                     bit 4 autostacktrace (v4: autostacktrace = yes)
//	       u64  resolved address         link-time address; kept even when not resolved
//	       u8   expected opcode          kept even without the has-opcode flag
//	       u16  minor
//	       u64  pass count
//	       u64  max hits                 0 = unlimited
//	       u32  maxactive                v3: a retprobe's, 0..4096; 0 = the default (64)
//	       u8   watch length             v4: a watch probe's, 1, 2, 4 or 8; 0 for the other kinds
//	       u8   watch mode               v4: a watch probe's, 1 w, 3 rw; 0 for the other kinds
//	       u32  entry                    byte offset of the program in the code
//	       u32  end                      byte offset just past it; entry <= end <= len(code)
//	       u16  pos file                 source position of the offset line
//	       u32  pos line
//	       u32  pos col
//	0x05 code
//	     ...  the bytecode of every probe, concatenated (the payload is the code)
//	0x06 lines
//	     u32  count
//	     count times, 14 bytes:
//	       u32  pc                       < len(code), non-decreasing
//	       u16  file, u32 line, u32 col
//	0x07 relocs
//	     u32  count
//	     count times, 27 bytes + the expression + the terms:
//	       u32  offset                   of an 8-byte immediate; offset+8 <= len(code);
//	                                     each at least 8 past the one before (sorted, no overlap)
//	       u8   flags                    bit 0 resolved
//	       u64  value                    at build time, against link-time addresses; kept even when not resolved
//	       str  expression               as written; for people
//	       sum  the expression           what the engine evaluates at insert time
//	0x08 fields (v3)
//	     u16  count                      (push field's u16 operand indexes this table)
//	     str  name, count times          a tracepoint field name: a C identifier, each once
//
// A sum (rpn.Sum) is a symbolic value as data: addend + Σ factor × term,
// in 64-bit wrapping arithmetic. The engine evaluates it with a symbol
// table alone; it never parses the text.
//
//	u64  addend
//	u16  term count                      0..rpn.MaxTerms
//	count times, 17 bytes + the strings:
//	  u8   kind                          0 symbol address, 1 sizeof(TYPE), 2 offsetof(TYPE, FIELD)
//	  u64  factor                        wrapping: -1 is 0xffffffffffffffff
//	  str  name                          the symbol or TYPE; not empty
//	  str  field                         FIELD of offsetof, not empty; empty for the other kinds
//
// Why this shape. The magic is PNG's recipe: a high-bit byte catches 7-bit
// channels, CR LF catches LF→CRLF and CRLF→LF conversion, ^Z stops a DOS
// type, the final LF catches LF→CRLF again; it is 9 bytes because "PPDF" is
// four letters. The version comes right after it because everything that
// follows may change with it. The file length lets a reader tell a
// truncated file from a corrupt one before checking the checksum; the
// checksum is checked before any section is parsed, so a bit flip is
// reported as corruption and not as some odd field value. Sections carry
// their length so that optional ones can be skipped; fixed little-endian
// widths make the file the same on every host and trivial to read from any
// language. SHA-256 and not CRC-32 because a PPDF is shipped to customers:
// it detects any accidental change, though without a signature it proves
// nothing about who wrote the file.
//
// Canonical form: Encode writes the only encoding of a Module, so equal
// Modules give equal bytes and Decode(b) succeeding implies
// Encode(Decode(b)) == b (when b is of version Version and has no optional
// sections; a version 2 or 3 file is encoded again as version 4). Decode returns
// nil, never an empty non-nil slice, for every empty table, for empty Code
// and for an empty BuildID; Encode treats nil and empty alike.

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math"

	"github.com/gprobes/gprobes/rpn"
)

// Version is the PPDF format version this package writes and reads.
// Increment to invalidate: any change to the layout above, to the meaning of
// a field, or to the numbering of rpn opcodes or registers.
//
// 1: locations and relocations as text, parsed again by the engine.
// 2: locations and relocations as data (sums of terms, file and line).
// 3: probe kinds (offset, retprobe, tracepoint), maxactive, the fields
// section.
// 4: the watch probe kind with its length and mode, the disabled flag
// (enabled = no); the opcodes enable, disable, push iv and pop iv.
// 5: a pack of several builds: one build section (0x10) per build, each
// holding the eight sections of version 4. A pack of one build is still
// written as version 4 (ModuleVersion), which gprobes 4 reads too.
const Version = 5

// ModuleVersion is the version Encode writes: a pack of one build has the
// layout of version 4, so that a gprobes that reads up to version 4 reads
// it. EncodePack writes Version for several builds.
const ModuleVersion = 4

// MinVersion is the oldest version Decode reads: a version 2 file holds
// offset probes only, and no fields, and decodes as such; a version 3
// file has no watch probes and no disabled ones.
const MinVersion = 2

// Limits of the format. Encode rejects a Module past them with ErrLimit;
// Decode rejects a file that claims more.
const (
	MaxString   = rpn.MaxText    // bytes in one string: module name, location text, file name, reloc expression, term name, field name
	MaxFiles    = rpn.MaxFiles   // entries in the file table (its count is a u16)
	MaxFields   = rpn.MaxFields  // entries in the fields table (its count is a u16)
	MaxBuildID  = rpn.MaxBuildID // bytes of build ID (GNU ld writes 16 or 20)
	MaxFileSize = math.MaxUint32 // bytes in a whole PPDF (its length field is a u32)
)

const (
	magic        = "\x89PPDF\r\n\x1a\n"
	preambleSize = len(magic) + 2 + 4 // magic, version, file length
	sectionHead  = 1 + 4              // tag, payload length
	checksumSize = sha256.Size
	minFileSize  = preambleSize + checksumSize

	headerFixed = 1 + 2 + 4 + 4 + 1 + 2 + 2 + 1 // header payload without the name's bytes, after its u32 length
	probeSize   = 1 + 4 + 1 + 1 + 8 + 1 + 2 + 8 + 8 + 4 + 1 + 1 + 4 + 4 + posSize
	probeSizeV3 = probeSize - 1 - 1   // no watch length, no watch mode
	probeSizeV2 = probeSizeV3 - 1 - 4 // no probe kind, no maxactive
	posSize     = 2 + 4 + 4
	lineSize    = 4 + posSize
	relocSize   = 4 + 1 + 8 + 4 + sumSize
	sumSize     = 8 + 2         // a sum without terms
	termSize    = 1 + 8 + 4 + 4 // a term with empty strings

	probeResolved   = 1 << 0
	probeHasOpcode  = 1 << 1
	probeLogOnFault = 1 << 2
	probeDisabled   = 1 << 3 // v4
	probeAutoStack  = 1 << 4 // v4: a reader without it refuses the pack rather than record no stack
	relocResolved   = 1 << 0
)

// Section tags, in file order.
const (
	tagHeader  = 0x01
	tagBuildID = 0x02
	tagFiles   = 0x03
	tagProbes  = 0x04
	tagCode    = 0x05
	tagLines   = 0x06
	tagRelocs  = 0x07
	tagFields  = 0x08 // v3
	tagBuild   = 0x10 // v5: one build of a pack, its payload the sections 0x01..0x08

	tagOptional = 0x80 // first tag of the optional range 0x80..0xfe
	tagFormats  = 0x80 // optional: the probes' formats (format = "..."), the same in every build
)

var sectionNames = [...]string{
	tagHeader:  "header",
	tagBuildID: "build ID",
	tagFiles:   "files",
	tagProbes:  "probes",
	tagCode:    "code",
	tagLines:   "lines",
	tagRelocs:  "relocs",
	tagFields:  "fields",
	tagBuild:   "build",
}

// lastTag is the last required section of a version.
func lastTag(version uint16) uint8 {
	if version == 2 {
		return tagRelocs
	}
	return tagFields
}

// Encode returns the PPDF encoding of m. It first checks m the way Decode
// checks a file, so that it never writes a file Decode would refuse; it
// does not verify the bytecode.
func Encode(m *rpn.Module) ([]byte, error) {
	if m == nil {
		return nil, errors.New("encode: nil module")
	}
	if sect, err := validate(m); err != nil {
		return nil, wrap("encode", sect, err)
	}
	return encode(m)
}

// encode writes m without validating it; tests use it to craft hostile
// files with a valid checksum. It still refuses what does not fit the
// fixed widths.
func encode(m *rpn.Module) ([]byte, error) {
	size := encodedSize(m)
	if size > MaxFileSize {
		return nil, limitf("encode: the PPDF would be %d bytes, at most %d", size, uint64(MaxFileSize))
	}
	if len(m.Files) > MaxFiles {
		return nil, wrap("encode", "files", limitf("%d files, at most %d", len(m.Files), MaxFiles))
	}
	if len(m.Fields) > MaxFields {
		return nil, wrap("encode", "fields", limitf("%d field names, at most %d", len(m.Fields), MaxFields))
	}
	for i := range m.Probes {
		if n := len(m.Probes[i].Loc.Sum.Terms); n > math.MaxUint16 {
			return nil, wrap("encode", "probes", limitf("probe %d: %d terms, at most %d", i, n, rpn.MaxTerms))
		}
	}
	for i := range m.Relocs {
		if n := len(m.Relocs[i].Sum.Terms); n > math.MaxUint16 {
			return nil, wrap("encode", "relocs", limitf("reloc %d: %d terms, at most %d", i, n, rpn.MaxTerms))
		}
	}
	e := encoder{buf: make([]byte, 0, size)}
	e.buf = append(e.buf, magic...)
	e.u16(ModuleVersion)
	e.u32(uint32(size))
	e.module(m)
	e.formats(m)
	sum := sha256.Sum256(e.buf)
	e.buf = append(e.buf, sum[:]...)
	return e.buf, nil
}

// module writes the eight required sections of one module.
func (e *encoder) module(m *rpn.Module) {
	s := e.begin(tagHeader)
	e.str(m.Name)
	e.u8(uint8(m.ModType))
	e.u16(m.Major)
	e.u32(m.JmpMax)
	e.u32(m.LogMax)
	e.u8(m.DfltExit)
	e.u16(m.Vars)
	e.u16(m.GVars)
	e.u8(uint8(m.Arch))
	e.end(s)

	s = e.begin(tagBuildID)
	e.buf = append(e.buf, m.BuildID...)
	e.end(s)

	s = e.begin(tagFiles)
	e.u16(uint16(len(m.Files)))
	for _, f := range m.Files {
		e.str(f)
	}
	e.end(s)

	s = e.begin(tagProbes)
	e.u32(uint32(len(m.Probes)))
	for i := range m.Probes {
		p := &m.Probes[i]
		e.u8(uint8(p.Kind))
		e.str(p.Loc.Text)
		e.u8(uint8(p.Loc.Kind))
		switch p.Loc.Kind {
		case rpn.LocExpr:
			e.sum(&p.Loc.Sum)
		case rpn.LocLine:
			e.str(p.Loc.File)
			e.u32(p.Loc.Line)
		}
		e.u8(bit(p.Loc.Resolved, probeResolved) | bit(p.HasOpcode, probeHasOpcode) | bit(p.LogOnFault, probeLogOnFault) | bit(p.Disabled, probeDisabled) | bit(p.AutoStack, probeAutoStack))
		e.u64(p.Loc.Addr)
		e.u8(p.Opcode)
		e.u16(p.Minor)
		e.u64(p.PassCount)
		e.u64(p.MaxHits)
		e.u32(p.MaxActive)
		e.u8(p.WatchLen)
		e.u8(uint8(p.WatchMode))
		e.u32(p.Entry)
		e.u32(p.End)
		e.pos(p.Pos)
	}
	e.end(s)

	s = e.begin(tagCode)
	e.buf = append(e.buf, m.Code...)
	e.end(s)

	s = e.begin(tagLines)
	e.u32(uint32(len(m.Lines)))
	for _, l := range m.Lines {
		e.u32(l.PC)
		e.pos(l.Pos)
	}
	e.end(s)

	s = e.begin(tagRelocs)
	e.u32(uint32(len(m.Relocs)))
	for i := range m.Relocs {
		r := &m.Relocs[i]
		e.u32(r.Off)
		e.u8(bit(r.Resolved, relocResolved))
		e.u64(r.Value)
		e.str(r.Expr)
		e.sum(&r.Sum)
	}
	e.end(s)

	s = e.begin(tagFields)
	e.u16(uint16(len(m.Fields)))
	for _, f := range m.Fields {
		e.str(f)
	}
	e.end(s)
}

// encodedSize is the exact length of the encoding of m, computed before
// anything is allocated so that an oversized Module fails cheaply.
func encodedSize(m *rpn.Module) uint64 {
	return uint64(preambleSize+checksumSize) + moduleSize(m) + formatsSize(m)
}

// formatsSize is the length of the optional formats section of m: none
// when no probe has a format.
//
//	0x80 formats
//	     u32  count
//	     count times: u32 probe index, str format (ascending indices)
func formatsSize(m *rpn.Module) uint64 {
	n, any := uint64(sectionHead+4), false
	for i := range m.Probes {
		if f := m.Probes[i].Format; f != "" {
			n += 4 + 4 + uint64(len(f))
			any = true
		}
	}
	if !any {
		return 0
	}
	return n
}

// formats writes the optional formats section, when a probe has one.
func (e *encoder) formats(m *rpn.Module) {
	if formatsSize(m) == 0 {
		return
	}
	s := e.begin(tagFormats)
	var n uint32
	for i := range m.Probes {
		if m.Probes[i].Format != "" {
			n++
		}
	}
	e.u32(n)
	for i := range m.Probes {
		if f := m.Probes[i].Format; f != "" {
			e.u32(uint32(i))
			e.str(f)
		}
	}
	e.end(s)
}

// moduleSize is the length of the eight required sections of m.
func moduleSize(m *rpn.Module) uint64 {
	n := uint64(8 * sectionHead)
	n += headerFixed + 4 + uint64(len(m.Name))
	n += uint64(len(m.BuildID))
	n += 2 + 4*uint64(len(m.Files))
	for _, f := range m.Files {
		n += uint64(len(f))
	}
	n += 4 + probeSize*uint64(len(m.Probes))
	for i := range m.Probes {
		l := &m.Probes[i].Loc
		n += uint64(len(l.Text))
		switch l.Kind {
		case rpn.LocExpr:
			n += sumEncodedSize(&l.Sum)
		case rpn.LocLine:
			n += 4 + uint64(len(l.File)) + 4
		}
	}
	n += uint64(len(m.Code))
	n += 4 + lineSize*uint64(len(m.Lines))
	n += 4 + relocSize*uint64(len(m.Relocs))
	for i := range m.Relocs {
		n += uint64(len(m.Relocs[i].Expr)) + sumEncodedSize(&m.Relocs[i].Sum) - sumSize
	}
	n += 2 + 4*uint64(len(m.Fields))
	for _, f := range m.Fields {
		n += uint64(len(f))
	}
	return n
}

func sumEncodedSize(s *rpn.Sum) uint64 {
	n := uint64(sumSize) + termSize*uint64(len(s.Terms))
	for _, t := range s.Terms {
		n += uint64(len(t.Name) + len(t.Field))
	}
	return n
}

type encoder struct{ buf []byte }

func (e *encoder) u8(v uint8)   { e.buf = append(e.buf, v) }
func (e *encoder) u16(v uint16) { e.buf = binary.LittleEndian.AppendUint16(e.buf, v) }
func (e *encoder) u32(v uint32) { e.buf = binary.LittleEndian.AppendUint32(e.buf, v) }
func (e *encoder) u64(v uint64) { e.buf = binary.LittleEndian.AppendUint64(e.buf, v) }

// str writes a string; validate and the MaxFileSize check in encode have
// made sure its length fits a u32.
func (e *encoder) str(s string) {
	e.u32(uint32(len(s)))
	e.buf = append(e.buf, s...)
}

// sum writes a sum; encode has checked that its term count fits a u16.
func (e *encoder) sum(s *rpn.Sum) {
	e.u64(s.Addend)
	e.u16(uint16(len(s.Terms)))
	for _, t := range s.Terms {
		e.u8(uint8(t.Kind))
		e.u64(t.Factor)
		e.str(t.Name)
		e.str(t.Field)
	}
}

func (e *encoder) pos(p rpn.Pos) {
	e.u16(p.File)
	e.u32(p.Line)
	e.u32(p.Col)
}

// begin writes a section head with a zero length and returns where the
// payload starts; end patches the length in. The whole file is at most
// MaxFileSize bytes, so a payload length always fits its u32.
func (e *encoder) begin(tag uint8) int {
	e.u8(tag)
	e.u32(0)
	return len(e.buf)
}

func (e *encoder) end(start int) {
	binary.LittleEndian.PutUint32(e.buf[start-4:], uint32(len(e.buf)-start))
}

func bit(b bool, mask uint8) uint8 {
	if b {
		return mask
	}
	return 0
}
