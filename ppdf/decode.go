package ppdf

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/gprobes/gprobes/rpn"
)

// Decode parses a PPDF of version MinVersion to Version (a version 2 file
// holds offset probes and no fields, a version 3 file no watch probes and
// no disabled ones, and each decodes as such). It checks, in
// this order, the magic, the version, the file length, the checksum, then
// every section: lengths and counts
// against the bytes left, flags, and finally what validate checks (header
// limits, enums, offsets inside the code, indices inside the file table,
// sorted tables). It never panics, and it allocates at most a small constant
// times len(data): a count is checked against the bytes left before
// anything is made for it. The result shares no memory with data.
//
// Decode does not verify the bytecode: run rpn's verifier on the result
// before executing any of it.
func Decode(data []byte) (*rpn.Module, error) {
	m, _, err := decode(data)
	return m, err
}

// decode is Decode that also reports whether it skipped optional sections,
// in which case Encode of the result is not the input.
func decode(data []byte) (m *rpn.Module, skipped bool, err error) {
	builds, skipped, err := decodePack(data)
	if err != nil {
		return nil, false, err
	}
	if len(builds) > 1 {
		return nil, false, &fault{ErrSeveralBuilds, fmt.Sprintf("the pack holds %d builds of %s (%s): read it with DecodePack and choose the target's", len(builds), builds[0].Name, BuildList(builds))}
	}
	return builds[0], skipped, nil
}

// decodePack decodes a file of any version Decode reads into its builds:
// one for versions 2 to 4, two or more for version 5.
func decodePack(data []byte) (builds []*rpn.Module, skipped bool, err error) {
	version, err := checkPreamble(data)
	if err != nil {
		return nil, false, err
	}
	body := data[preambleSize : len(data)-checksumSize]
	r := reader{b: body}
	if version < 5 {
		m, err := r.module(version)
		if err != nil {
			return nil, false, err
		}
		builds = []*rpn.Module{m}
	} else {
		for r.off < len(r.b) && r.b[r.off] == tagBuild {
			_, payload := r.section()
			if r.err != nil {
				return nil, false, wrap("decode", "sections", r.err)
			}
			s := reader{b: payload}
			m, err := s.module(version)
			if err == nil && s.off != len(s.b) {
				err = wrap("decode", "sections", invalidf("%d bytes after the fields section of build %d", len(s.b)-s.off, len(builds)))
			}
			if err != nil {
				return nil, false, fmt.Errorf("build %d: %w", len(builds), err)
			}
			builds = append(builds, m)
		}
		if r.err == nil {
			if sect, err := validatePack(builds); err != nil {
				return nil, false, wrap("decode", sect, err)
			}
		}
	}
	// Optional sections: the formats are known; others are skipped.
	prev := -1
	for r.off < len(r.b) && r.err == nil {
		t, payload := r.section()
		if r.err == nil && (t < tagOptional || t == 0xff || int(t) <= prev) {
			r.err = invalidf("found section tag 0x%02x after the last required section: only optional sections (tags 0x80..0xfe, ascending) may follow it", t)
		}
		prev = int(t)
		if r.err == nil && t == tagFormats {
			if err := decodeFormats(payload, builds); err != nil {
				return nil, false, wrap("decode", "formats", err)
			}
			continue
		}
		skipped = true
	}
	if r.err != nil {
		return nil, false, wrap("decode", "sections", r.err)
	}
	return builds, skipped, nil
}

// module reads the required sections of one module (a version 2 to 4
// file's, or one build's of version 5) and validates it.
func (r *reader) module(version uint16) (*rpn.Module, error) {
	m := new(rpn.Module)
	for tag := uint8(tagHeader); tag <= lastTag(version); tag++ {
		if r.off == len(r.b) {
			return nil, wrap("decode", "sections", invalidf("section %s (tag 0x%02x) is missing", sectionNames[tag], tag))
		}
		t, payload := r.section()
		if r.err != nil {
			return nil, wrap("decode", "sections", r.err)
		}
		if t != tag {
			return nil, wrap("decode", "sections", invalidf("found %s (tag 0x%02x) where section %s (tag 0x%02x) belongs", describe(t), t, sectionNames[tag], tag))
		}
		s := reader{b: payload, version: version}
		switch tag {
		case tagHeader:
			s.header(&m.Header)
		case tagBuildID:
			m.BuildID = s.rest()
		case tagFiles:
			m.Files = s.files()
		case tagProbes:
			m.Probes = s.probes()
		case tagCode:
			m.Code = s.rest()
		case tagLines:
			m.Lines = s.lines()
		case tagRelocs:
			m.Relocs = s.relocs()
		case tagFields:
			m.Fields = s.fields()
		}
		if s.err == nil && s.off != len(s.b) {
			s.err = invalidf("%d bytes of unexpected data after the last field", len(s.b)-s.off)
		}
		if s.err != nil {
			return nil, wrap("decode", sectionNames[tag], s.err)
		}
	}
	if sect, err := validate(m); err != nil {
		return nil, wrap("decode", sect, err)
	}
	return m, nil
}

// checkPreamble checks magic, version, file length and checksum: when it
// returns no error, data is preambleSize + sections + checksum, the
// checksum matches, and version is one Decode reads.
func checkPreamble(data []byte) (version uint16, err error) {
	left := uint64(len(data))
	if len(data) < len(magic) {
		if string(data) == magic[:len(data)] {
			return 0, &TruncatedError{What: "the PPDF magic", Need: uint64(len(magic)), Left: left}
		}
		return 0, notPPDF(data)
	}
	if string(data[:len(magic)]) != magic {
		return 0, notPPDF(data)
	}
	if len(data) < len(magic)+2 {
		return 0, &TruncatedError{What: "the version", Need: 2, Left: left - uint64(len(magic))}
	}
	version = binary.LittleEndian.Uint16(data[len(magic):])
	if version < MinVersion || version > Version {
		return 0, &VersionError{Got: version, Want: Version, Oldest: MinVersion}
	}
	if len(data) < preambleSize {
		return 0, &TruncatedError{What: "the file length", Need: 4, Left: left - uint64(len(magic)+2)}
	}
	size := uint64(binary.LittleEndian.Uint32(data[len(magic)+2:]))
	switch {
	case size < uint64(minFileSize):
		return 0, invalidf("the file length in the header is %d, less than the %d bytes of any PPDF", size, minFileSize)
	case left < size:
		return 0, &TruncatedError{What: "the file", Need: size, Left: left}
	case left > size:
		return 0, &fault{ErrTrailing, fmt.Sprintf("%d bytes of trailing data after the checksum", left-size)}
	}
	sum := sha256.Sum256(data[:size-checksumSize])
	if !bytes.Equal(sum[:], data[size-checksumSize:]) {
		return 0, ErrChecksum
	}
	return version, nil
}

// notPPDF says what the data looks like when it is not a PPDF.
func notPPDF(data []byte) error {
	if len(data) >= 5 && string(data[1:5]) == magic[1:5] {
		return fmt.Errorf("%w: its header was changed in transit (CR/LF or 8-bit conversion): copy the file in binary mode", ErrNotPPDF)
	}
	if looksLikeDPDF(data) {
		return fmt.Errorf("%w: looks like a DPDF source file; use gprobes check/build", ErrNotPPDF)
	}
	return ErrNotPPDF
}

// looksLikeDPDF reports whether the start of data is text with a line
// "keyword = ..." for a DPDF keyword, or a preprocessor directive or
// comment at the start of a line.
func looksLikeDPDF(data []byte) bool {
	if len(data) > 4096 {
		data = data[:4096]
	}
	for _, c := range data {
		if c == 0 || c == 0x7f || c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v' {
			return false
		}
	}
	for line := range bytes.Lines(data) {
		line = bytes.TrimSpace(line)
		for _, kw := range dpdfKeywords {
			if len(line) > len(kw) && bytes.EqualFold(line[:len(kw)], []byte(kw)) {
				rest := bytes.TrimLeft(line[len(kw):], " \t")
				if len(rest) > 0 && rest[0] == '=' {
					return true
				}
			}
		}
	}
	return false
}

// dpdfKeywords are the DPDF keywords (docs/language.md, "File structure")
// that start a "key = value" line (the spaced forms "pass count" and "max
// hits" included).
var dpdfKeywords = []string{
	"name", "modtype", "major", "jmpmax", "logmax", "dfltexit", "vars", "gvars", "arch",
	"offset", "opcode", "minor", "pass count", "passcount", "pass_count",
	"max hits", "maxhits", "max_hits", "logonfault",
	"retprobe", "tracepoint", "maxactive", "max active", "max_active",
	"watch", "enabled", "autostacktrace",
}

// reader reads fixed-width fields from b. The first failure is kept in err
// and every later read returns zero, so a parse function checks err once at
// the end. item and idx name the table entry being read, for messages;
// version is the file's format version.
type reader struct {
	b       []byte
	off     int
	err     error
	item    string
	idx     int
	version uint16
}

// need reports whether n more bytes are there, and records a truncation
// error if not.
func (r *reader) need(n uint64, what string) bool {
	if r.err != nil {
		return false
	}
	if left := uint64(len(r.b) - r.off); n > left {
		if r.item != "" {
			what = fmt.Sprintf("%s %d %s", r.item, r.idx, what)
		}
		r.err = &TruncatedError{What: what, Need: n, Left: left}
		return false
	}
	return true
}

func (r *reader) next(n int, what string) []byte {
	if !r.need(uint64(n), what) {
		return nil
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b
}

func (r *reader) u8(what string) uint8 {
	if b := r.next(1, what); b != nil {
		return b[0]
	}
	return 0
}

func (r *reader) u16(what string) uint16 {
	if b := r.next(2, what); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (r *reader) u32(what string) uint32 {
	if b := r.next(4, what); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *reader) u64(what string) uint64 {
	if b := r.next(8, what); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *reader) str(what string) string {
	n := r.u32(what + " length")
	if !r.need(uint64(n), what) {
		return ""
	}
	return string(r.next(int(n), what))
}

// count reads a table's entry count and checks that the bytes left can
// hold that many entries of at least size bytes each, so that the caller
// may allocate the table.
func (r *reader) count(n uint64, item string, size uint64) int {
	if r.err != nil {
		return 0
	}
	if left := uint64(len(r.b) - r.off); n*size > left {
		r.err = &TruncatedError{What: fmt.Sprintf("%s count %d", item, n), Need: n * size, Left: left}
		return 0
	}
	return int(n)
}

// sum reads a sum: the addend, then the terms, their count checked
// against the bytes left before they are allocated.
func (r *reader) sum(what string) rpn.Sum {
	s := rpn.Sum{Addend: r.u64(what + " addend")}
	n := r.u16(what + " term count")
	if r.err == nil && n > rpn.MaxTerms {
		r.err = limitf("%s %d: %s has %d terms, at most %d", r.item, r.idx, what, n, rpn.MaxTerms)
	}
	if r.err != nil || n == 0 {
		return s
	}
	if left := uint64(len(r.b) - r.off); uint64(n)*termSize > left {
		r.err = &TruncatedError{What: fmt.Sprintf("%s %d %s term count %d", r.item, r.idx, what, n), Need: uint64(n) * termSize, Left: left}
		return s
	}
	s.Terms = make([]rpn.Term, n)
	for i := range s.Terms {
		t := &s.Terms[i]
		t.Kind = rpn.TermKind(r.u8(what + " term kind"))
		t.Factor = r.u64(what + " term factor")
		t.Name = r.str(what + " term name")
		t.Field = r.str(what + " term field")
	}
	return s
}

func (r *reader) pos() rpn.Pos {
	return rpn.Pos{File: r.u16("source file"), Line: r.u32("source line"), Col: r.u32("source column")}
}

// flags reads a flags byte and rejects bits outside known.
func (r *reader) flags(what string, known uint8) uint8 {
	f := r.u8(what)
	if r.err == nil && f&^known != 0 {
		r.err = invalidf("%s %d: unknown %s bits 0x%02x", r.item, r.idx, what, f&^known)
	}
	return f
}

// rest returns a copy of the remaining bytes, nil when there are none.
func (r *reader) rest() []byte {
	if r.off == len(r.b) {
		return nil
	}
	b := bytes.Clone(r.b[r.off:])
	r.off = len(r.b)
	return b
}

// section reads one section head and returns its tag and payload.
func (r *reader) section() (tag uint8, payload []byte) {
	tag = r.u8("section tag")
	n := r.u32("section length")
	if r.err != nil {
		return 0, nil
	}
	if left := uint64(len(r.b) - r.off); uint64(n) > left {
		r.err = &TruncatedError{What: describe(tag), Need: uint64(n), Left: left}
		return 0, nil
	}
	return tag, r.next(int(n), "")
}

// describe names a section by its tag for messages.
func describe(tag uint8) string {
	if int(tag) < len(sectionNames) && sectionNames[tag] != "" {
		return "section " + sectionNames[tag]
	}
	return "an unknown section"
}

func (r *reader) header(h *rpn.Header) {
	h.Name = r.str("name")
	h.ModType = rpn.ModType(r.u8("module type"))
	h.Major = r.u16("major")
	h.JmpMax = r.u32("jmpmax")
	h.LogMax = r.u32("logmax")
	h.DfltExit = r.u8("dfltexit")
	h.Vars = r.u16("vars")
	h.GVars = r.u16("gvars")
	h.Arch = rpn.Arch(r.u8("arch"))
}

func (r *reader) files() []string {
	n := r.count(uint64(r.u16("file count")), "file", 4)
	if n == 0 {
		return nil
	}
	files := make([]string, n)
	r.item = "file"
	for i := range files {
		r.idx = i
		files[i] = r.str("name")
	}
	return files
}

func (r *reader) probes() []rpn.Probe {
	v2, v3 := r.version == 2, r.version == 3
	size := uint64(probeSize)
	switch {
	case v2:
		size = probeSizeV2
	case v3:
		size = probeSizeV3
	}
	n := r.count(uint64(r.u32("probe count")), "probe", size)
	if n == 0 {
		return nil
	}
	probes := make([]rpn.Probe, n)
	r.item = "probe"
	for i := range probes {
		r.idx = i
		p := &probes[i]
		if !v2 {
			p.Kind = rpn.ProbeKind(r.u8("kind"))
			if v3 && p.Kind > rpn.ProbeTracepoint && r.err == nil {
				r.err = invalidf("probe %d: kind %d is not offset (0), retprobe (1) or tracepoint (2)", i, p.Kind)
			}
		}
		p.Loc.Text = r.str("location text")
		p.Loc.Kind = rpn.LocKind(r.u8("location kind"))
		switch {
		case p.Loc.Kind == rpn.LocExpr:
			p.Loc.Sum = r.sum("location")
		case p.Loc.Kind == rpn.LocLine:
			p.Loc.File = r.str("location file")
			p.Loc.Line = r.u32("location line")
		case p.Loc.Kind == rpn.LocAbsolute:
		case p.Loc.Kind == rpn.LocTracepoint && !v2:
		case p.Loc.Kind == rpn.LocUSDT && !v2 && !v3:
		case r.err != nil:
		case v2:
			r.err = invalidf("probe %d: location kind %d is not symbolic (0), line (1) or absolute (2)", i, p.Loc.Kind)
		default:
			r.err = invalidf("probe %d: %s", i, locKindMsg(p.Loc.Kind))
		}
		known := uint8(probeResolved | probeHasOpcode | probeLogOnFault | probeDisabled | probeAutoStack)
		if v2 || v3 {
			known &^= probeDisabled | probeAutoStack
		}
		f := r.flags("flags", known)
		p.Loc.Resolved = f&probeResolved != 0
		p.HasOpcode = f&probeHasOpcode != 0
		p.LogOnFault = f&probeLogOnFault != 0
		p.Disabled = f&probeDisabled != 0
		p.AutoStack = f&probeAutoStack != 0
		p.Loc.Addr = r.u64("address")
		p.Opcode = r.u8("opcode")
		p.Minor = r.u16("minor")
		p.PassCount = r.u64("pass count")
		p.MaxHits = r.u64("max hits")
		if !v2 {
			p.MaxActive = r.u32("maxactive")
		}
		if !v2 && !v3 {
			p.WatchLen = r.u8("watch length")
			p.WatchMode = rpn.WatchMode(r.u8("watch mode"))
		}
		p.Entry = r.u32("entry")
		p.End = r.u32("end")
		p.Pos = r.pos()
		if r.err != nil {
			return nil
		}
	}
	return probes
}

func (r *reader) fields() []string {
	n := r.count(uint64(r.u16("field count")), "field", 4)
	if n == 0 {
		return nil
	}
	fields := make([]string, n)
	r.item = "field"
	for i := range fields {
		r.idx = i
		fields[i] = r.str("name")
	}
	return fields
}

func (r *reader) lines() []rpn.LineEntry {
	n := r.count(uint64(r.u32("line count")), "line entry", lineSize)
	if n == 0 {
		return nil
	}
	lines := make([]rpn.LineEntry, n)
	r.item = "line entry"
	for i := range lines {
		r.idx = i
		lines[i].PC = r.u32("pc")
		lines[i].Pos = r.pos()
	}
	return lines
}

func (r *reader) relocs() []rpn.Reloc {
	n := r.count(uint64(r.u32("reloc count")), "reloc", relocSize)
	if n == 0 {
		return nil
	}
	relocs := make([]rpn.Reloc, n)
	r.item = "reloc"
	for i := range relocs {
		r.idx = i
		x := &relocs[i]
		x.Off = r.u32("offset")
		x.Resolved = r.flags("flags", relocResolved)&relocResolved != 0
		x.Value = r.u64("value")
		x.Expr = r.str("expression")
		x.Sum = r.sum("expression")
		if r.err != nil {
			return nil
		}
	}
	return relocs
}

// decodeFormats reads the formats section into every build's probes.
func decodeFormats(payload []byte, builds []*rpn.Module) error {
	s := reader{b: payload}
	n := s.u32("format count")
	if s.err == nil && uint64(n) > uint64(len(builds[0].Probes)) {
		return invalidf("%d formats for %d probes", n, len(builds[0].Probes))
	}
	last := -1
	for k := uint32(0); k < n && s.err == nil; k++ {
		i := int(s.u32("format's probe"))
		f := s.str("format")
		if s.err != nil {
			break
		}
		if i <= last || i >= len(builds[0].Probes) {
			return invalidf("format %d names probe %d (of %d, after %d)", k, i, len(builds[0].Probes), last)
		}
		if len(f) > MaxString || f == "" {
			return invalidf("format of probe %d is %d bytes, 1..%d", i, len(f), MaxString)
		}
		if err := rpn.CheckFormat(f); err != nil {
			return invalidf("format of probe %d: %v", i, err)
		}
		last = i
		for _, m := range builds {
			m.Probes[i].Format = f
		}
	}
	if s.err != nil {
		return s.err
	}
	if s.off != len(s.b) {
		return invalidf("%d bytes after the last format", len(s.b)-s.off)
	}
	return nil
}
