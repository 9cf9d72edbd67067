package daemon

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strconv"
	"time"
	"unsafe"

	"github.com/gprobes/gprobes/probe"
)

// The log file is binary (docs/records.md, "The log file"): a file header,
// then frames appended one after another, each a packet of whole records
// with its length, its kind, its count of records and a CRC-32C. A frame
// is written with one write(2) and is either all in the file or cut off
// again; a frame that is not whole, or whose CRC does not match, at the
// end of a file is a torn tail (the machine or the daemon died during the
// write): the writer cuts it off when it opens the file, a reader stops
// before it and says how many bytes it left.
//
// Records are formatted (JSON lines, text) only when they are read.

// LogFileName is the log file's name in the state folder; rotated files
// add .1, .2 ...
const LogFileName = "log.bin"

// OldLogFileName is the JSON-lines log of gprobes before the binary log.
const OldLogFileName = "log.jsonl"

// logMagic starts every log file: a byte with the high bit set first, so
// that a text tool or a transfer in text mode shows it is not text.
var logMagic = [8]byte{0x89, 'g', 'p', 'r', 'o', 'b', 'e', 's'}

const (
	logVersion      = 1
	fileHeaderSize  = 16 // magic, version u16, header size u16, flags u32
	frameHeaderSize = 16 // payload length u32, kind u8, 3 zero bytes, records u32, CRC-32C u32
	frameRecords    = 1  // the kind of a frame of records
	// maxFrame is the largest payload a reader accepts: a length past it
	// is a torn or damaged frame, not a reason to allocate
	maxFrame = 64 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fileHeader is the first 16 bytes of a log file.
func fileHeader() []byte {
	b := make([]byte, fileHeaderSize)
	copy(b, logMagic[:])
	binary.LittleEndian.PutUint16(b[8:], logVersion)
	binary.LittleEndian.PutUint16(b[10:], fileHeaderSize)
	return b
}

// errNotBinaryLog: the file does not start with the log's magic.
var errNotBinaryLog = errors.New("not a gprobes binary log")

// checkHeader checks a file's first bytes.
func checkHeader(h []byte) error {
	if len(h) < fileHeaderSize || !bytes.Equal(h[:8], logMagic[:]) {
		return errNotBinaryLog
	}
	if v := binary.LittleEndian.Uint16(h[8:]); v != logVersion {
		return fmt.Errorf("a gprobes binary log of version %d (this gprobes reads version %d)", v, logVersion)
	}
	if n := binary.LittleEndian.Uint16(h[10:]); n != fileHeaderSize {
		return fmt.Errorf("a gprobes binary log with a %d-byte header (this gprobes knows %d)", n, fileHeaderSize)
	}
	return nil
}

// frameEncoder makes frames of records: a string table (each distinct
// string of the frame once), then the records, their strings as indexes
// into the table (0 is the empty string).
type frameEncoder struct {
	strs  map[string]uint64
	table []byte // the strings, each a uvarint length and its bytes
	n     uint64 // strings in the table
	recs  []byte
	count int
	last  [4]struct { // the last string of the most repeated fields, and its index
		s string
		i uint64
	}
}

func (e *frameEncoder) reset() {
	if e.strs == nil {
		e.strs = map[string]uint64{}
	}
	clear(e.strs)
	e.table, e.recs, e.n, e.count = e.table[:0], e.recs[:0], 0, 0
	e.last = [4]struct {
		s string
		i uint64
	}{}
}

// str is the index of s in the table, added if new; slot, when >= 0,
// remembers it for the next record's same field.
func (e *frameEncoder) str(s string, slot int) uint64 {
	if s == "" {
		return 0
	}
	if slot >= 0 && e.last[slot].i != 0 && e.last[slot].s == s {
		return e.last[slot].i
	}
	i, ok := e.strs[s]
	if !ok {
		e.n++
		i = e.n
		e.strs[s] = i
		e.table = binary.AppendUvarint(e.table, uint64(len(s)))
		e.table = append(e.table, s...)
	}
	if slot >= 0 {
		e.last[slot].s, e.last[slot].i = s, i
	}
	return i
}

const (
	flagTruncated = 1 << iota
	flagStacks
	flagNoTime // the zero time.Time
)

// add encodes one record; its data and address, hex in the LogLine, are
// stored as bytes and a number.
func (e *frameEncoder) add(l *LogLine) {
	b := e.recs
	var flags byte
	if l.Truncated {
		flags |= flagTruncated
	}
	if len(l.Stacks) > 0 {
		flags |= flagStacks
	}
	if l.Time.IsZero() {
		flags |= flagNoTime
	}
	b = append(b, flags)
	b = binary.LittleEndian.AppendUint64(b, uint64(l.Time.UnixNano()))
	b = binary.AppendUvarint(b, e.str(l.Kind, 0))
	b = binary.AppendUvarint(b, e.str(l.Target, 1))
	b = binary.AppendUvarint(b, e.str(l.Module, 2))
	b = binary.AppendUvarint(b, uint64(l.Major))
	b = binary.AppendUvarint(b, uint64(l.Minor))
	b = binary.AppendUvarint(b, e.str(l.Location, 3))
	b = binary.AppendUvarint(b, e.str(l.Probe, -1))
	addr, canon := canonAddress(l.Address)
	if !canon {
		// not as FromRecord writes it: kept as a string
		b = append(b, 0)
		b = binary.AppendUvarint(b, e.str(l.Address, -1))
	} else {
		b = append(b, 1)
		b = binary.AppendUvarint(b, addr)
	}
	b = binary.AppendVarint(b, int64(l.Pid))
	b = binary.AppendVarint(b, int64(l.Tid))
	b = binary.AppendUvarint(b, e.str(l.Comm, -1))
	b = binary.AppendVarint(b, int64(l.CPU))
	b = append(b, l.Exit)
	// data: bytes when it is whole hex (FromRecord's), else the string
	if len(l.Data)%2 == 0 && isLowerHex(l.Data) {
		b = append(b, 1)
		b = binary.AppendUvarint(b, uint64(len(l.Data)/2))
		n := len(b)
		b = append(b, make([]byte, len(l.Data)/2)...)
		hex.Decode(b[n:], []byte(l.Data))
	} else {
		b = append(b, 0)
		b = binary.AppendUvarint(b, e.str(l.Data, -1))
	}
	b = binary.AppendUvarint(b, e.str(l.Exception, -1))
	b = binary.AppendUvarint(b, uint64(l.PC))
	b = binary.AppendUvarint(b, e.str(l.Line, -1))
	b = binary.AppendUvarint(b, e.str(l.Dump, -1))
	b = binary.AppendUvarint(b, e.str(l.Debugger, -1))
	if len(l.Stacks) > 0 {
		b = binary.AppendUvarint(b, uint64(len(l.Stacks)))
		for _, st := range l.Stacks {
			b = binary.AppendUvarint(b, e.str(st.Kind, -1))
			b = binary.AppendUvarint(b, uint64(len(st.Frames)))
			for _, f := range st.Frames {
				b = binary.AppendUvarint(b, uint64(f.Address))
				b = binary.AppendUvarint(b, e.str(f.Function, -1))
				b = binary.AppendUvarint(b, f.Offset)
				b = binary.AppendUvarint(b, e.str(f.Module, -1))
			}
		}
	}
	e.recs = b
	e.count++
}

// canonAddress parses an address as FromRecord writes it ("0x" and
// lowercase hex digits without leading zeros); canon is false for any
// other string.
func canonAddress(s string) (uint64, bool) {
	if len(s) < 3 || len(s) > 18 || s[0] != '0' || s[1] != 'x' || s[2] == '0' && len(s) > 3 || !isLowerHex(s[2:]) {
		return 0, false
	}
	v, err := strconv.ParseUint(s[2:], 16, 64)
	return v, err == nil
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// recordBound is at least the bytes add takes for l, its strings
// included (as if none were in the table yet).
func recordBound(l *LogLine) int {
	n := 80 + len(l.Kind) + len(l.Target) + len(l.Module) + len(l.Location) + len(l.Probe) + len(l.Address) + len(l.Comm) +
		len(l.Data) + len(l.Exception) + len(l.Line) + len(l.Dump) + len(l.Debugger) + 4*binary.MaxVarintLen64
	for _, st := range l.Stacks {
		n += 2*binary.MaxVarintLen64 + len(st.Kind)
		for _, f := range st.Frames {
			n += 4*binary.MaxVarintLen64 + len(f.Function) + len(f.Module)
		}
	}
	return n
}

// size is the frame's size so far, header included.
func (e *frameEncoder) size() int {
	return frameHeaderSize + binary.MaxVarintLen64 + len(e.table) + len(e.recs)
}

// appendFrame appends the frame of the records added since reset.
func (e *frameEncoder) appendFrame(b []byte) []byte {
	start := len(b)
	b = append(b, make([]byte, frameHeaderSize)...)
	b = binary.AppendUvarint(b, e.n)
	b = append(b, e.table...)
	b = append(b, e.recs...)
	h := b[start : start+frameHeaderSize]
	binary.LittleEndian.PutUint32(h[0:], uint32(len(b)-start-frameHeaderSize))
	h[4] = frameRecords
	binary.LittleEndian.PutUint32(h[8:], uint32(e.count))
	crc := crc32.Update(0, castagnoli, h[:12])
	crc = crc32.Update(crc, castagnoli, b[start+frameHeaderSize:])
	binary.LittleEndian.PutUint32(h[12:], crc)
	return b
}

// frameDecoder reads the records of a frame.
type frameDecoder struct {
	strs []string
	b    []byte
	err  error
	hex  []byte // scratch for Address and Data
	// borrow: Address and Data point into hex, valid until the next
	// record (copyRecords formats each record before the next one)
	borrow bool
}

func (d *frameDecoder) uv() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *frameDecoder) sv() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *frameDecoder) byte1() byte {
	if len(d.b) < 1 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *frameDecoder) str() string {
	i := d.uv()
	if i >= uint64(len(d.strs)) {
		d.fail()
		return ""
	}
	return d.strs[i]
}

func (d *frameDecoder) fail() {
	if d.err == nil {
		d.err = errors.New("a damaged record in a whole frame (its CRC matched)")
	}
	d.b = nil
}

// start takes a frame's payload: its string table.
func (d *frameDecoder) start(payload []byte) {
	d.b, d.err = payload, nil
	n := d.uv()
	if n > uint64(len(payload)) {
		d.fail()
		return
	}
	d.strs = append(d.strs[:0], "")
	for i := uint64(0); i < n && d.err == nil; i++ {
		l := d.uv()
		if l > uint64(len(d.b)) {
			d.fail()
			break
		}
		d.strs = append(d.strs, string(d.b[:l]))
		d.b = d.b[l:]
	}
}

// next decodes the next record into l (its stacks and strings are its
// own; l is overwritten whole).
func (d *frameDecoder) next(l *LogLine) bool {
	if d.err != nil || len(d.b) == 0 {
		return false
	}
	flags := d.byte1()
	if len(d.b) < 8 {
		d.fail()
		return false
	}
	ns := int64(binary.LittleEndian.Uint64(d.b))
	d.b = d.b[8:]
	*l = LogLine{Truncated: flags&flagTruncated != 0}
	if flags&flagNoTime == 0 {
		l.Time = time.Unix(0, ns)
	}
	l.Kind = d.str()
	l.Target = d.str()
	l.Module = d.str()
	l.Major = uint16(d.uv())
	l.Minor = uint16(d.uv())
	l.Location = d.str()
	l.Probe = d.str()
	// the address and the data as hex, in one string
	h := d.hex[:0]
	addrNum := d.byte1() == 1
	var addrStr string
	if addrNum {
		h = append(h, "0x"...)
		h = strconv.AppendUint(h, d.uv(), 16)
	} else {
		addrStr = d.str()
	}
	na := len(h)
	l.Pid = int(d.sv())
	l.Tid = int(d.sv())
	l.Comm = d.str()
	l.CPU = int(d.sv())
	l.Exit = d.byte1()
	var dataStr string
	if d.byte1() == 1 {
		n := d.uv()
		if n > uint64(len(d.b)) {
			d.fail()
			return false
		}
		h = hex.AppendEncode(h, d.b[:n])
		d.b = d.b[n:]
	} else {
		dataStr = d.str()
	}
	if d.err != nil {
		return false
	}
	var s string
	if d.borrow {
		s = unsafe.String(unsafe.SliceData(h), len(h))
	} else {
		s = string(h)
	}
	d.hex = h
	if addrNum {
		l.Address = s[:na]
		l.Data = s[na:]
	} else {
		l.Address = addrStr
		l.Data = s[na:]
	}
	if dataStr != "" {
		l.Data = dataStr
	}
	l.Exception = d.str()
	l.PC = uint32(d.uv())
	l.Line = d.str()
	l.Dump = d.str()
	l.Debugger = d.str()
	if flags&flagStacks != 0 {
		n := d.uv()
		if n > uint64(len(d.b)) {
			d.fail()
			return false
		}
		l.Stacks = make([]probe.Stack, n)
		for i := range l.Stacks {
			l.Stacks[i].Kind = d.str()
			nf := d.uv()
			if nf > uint64(len(d.b)) {
				d.fail()
				return false
			}
			l.Stacks[i].Frames = make([]probe.Frame, nf)
			for j := range l.Stacks[i].Frames {
				f := &l.Stacks[i].Frames[j]
				f.Address = probe.Hex(d.uv())
				f.Function = d.str()
				f.Offset = d.uv()
				f.Module = d.str()
			}
		}
	}
	return d.err == nil
}

// frameReader reads the frames of a log file from an offset.
type frameReader struct {
	r   *bufio.Reader
	pos int64 // the end of the last whole frame read
	hdr [frameHeaderSize]byte
	buf []byte
	dec frameDecoder
	// torn: why the bytes at pos could not be read as a whole frame, once
	// the reader has reached its limit (empty: pos is the limit)
	torn string
}

func newFrameReader(f io.ReaderAt, pos, limit int64) *frameReader {
	n := int64(1<<63 - 1 - pos)
	if limit >= 0 {
		n = max(limit-pos, 0)
	}
	return &frameReader{r: bufio.NewReaderSize(io.NewSectionReader(f, pos, n), 256<<10), pos: pos}
}

// next reads the next whole frame and returns its kind, record count and
// payload (valid until the next call); false at the end or at a torn
// frame (fr.torn says which).
func (fr *frameReader) next() (kind byte, records uint32, payload []byte, ok bool) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			fr.torn = "a frame header cut short"
		} else if err != io.EOF {
			fr.torn = err.Error()
		}
		return 0, 0, nil, false
	}
	n := binary.LittleEndian.Uint32(fr.hdr[0:])
	if n > maxFrame {
		fr.torn = fmt.Sprintf("a frame length of %d bytes (damaged)", n)
		return 0, 0, nil, false
	}
	if cap(fr.buf) < int(n) {
		fr.buf = make([]byte, n)
	}
	fr.buf = fr.buf[:n]
	if _, err := io.ReadFull(fr.r, fr.buf); err != nil {
		fr.torn = fmt.Sprintf("a frame of %d bytes cut short", n)
		if err != io.ErrUnexpectedEOF && err != io.EOF {
			fr.torn = err.Error()
		}
		return 0, 0, nil, false
	}
	crc := crc32.Update(0, castagnoli, fr.hdr[:12])
	crc = crc32.Update(crc, castagnoli, fr.buf)
	if crc != binary.LittleEndian.Uint32(fr.hdr[12:]) {
		fr.torn = fmt.Sprintf("a frame of %d bytes whose CRC does not match", n)
		return 0, 0, nil, false
	}
	fr.pos += frameHeaderSize + int64(n)
	return fr.hdr[4], binary.LittleEndian.Uint32(fr.hdr[8:]), fr.buf, true
}

// scanFrames checks the frames of a log file from its header to size:
// whole is the end of the last whole frame, records the records before
// it, torn why the bytes after it are not a frame ("" if there are none).
func scanFrames(f io.ReaderAt, size int64) (whole int64, records uint64, torn string, err error) {
	h := make([]byte, fileHeaderSize)
	if size < fileHeaderSize {
		if size == 0 {
			return 0, 0, "", nil
		}
		if _, err := f.ReadAt(h[:size], 0); err != nil && err != io.EOF {
			return 0, 0, "", err
		}
		if bytes.HasPrefix(logMagic[:], h[:size]) {
			return 0, 0, "a file header cut short", nil
		}
		return 0, 0, "", errNotBinaryLog
	}
	if _, err := f.ReadAt(h, 0); err != nil {
		return 0, 0, "", err
	}
	if err := checkHeader(h); err != nil {
		return 0, 0, "", err
	}
	fr := newFrameReader(f, fileHeaderSize, size)
	for {
		_, n, _, ok := fr.next()
		if !ok {
			break
		}
		records += uint64(n)
	}
	return fr.pos, records, fr.torn, nil
}

// copyRecords writes the records of the whole frames of f from pos (0:
// the file's start) to limit (to its end if limit < 0) to out as JSON
// lines, adding them to *records, and returns the end of the last whole
// frame read and why the bytes after it, if any before limit, are not a
// whole frame.
func copyRecords(out io.Writer, f io.ReaderAt, pos, limit int64, records *uint64) (int64, string, error) {
	if pos < fileHeaderSize {
		h := make([]byte, fileHeaderSize)
		n, err := f.ReadAt(h, 0)
		if n < fileHeaderSize {
			if n == 0 && (err == io.EOF || err == nil) {
				return 0, "", nil // empty (created, not written yet)
			}
			if err != nil && err != io.EOF {
				return pos, "", err
			}
			if !bytes.HasPrefix(logMagic[:], h[:n]) {
				return pos, "", errNotBinaryLog
			}
			return pos, "a file header cut short", nil
		}
		if err := checkHeader(h); err != nil {
			return pos, "", err
		}
		pos = fileHeaderSize
	}
	if limit >= 0 && limit <= pos {
		return pos, "", nil
	}
	fr := newFrameReader(f, pos, limit)
	fr.dec.borrow = true
	var buf []byte
	var l LogLine
	for {
		kind, _, payload, ok := fr.next()
		if !ok {
			break
		}
		if kind != frameRecords {
			continue // a kind this gprobes does not know: skipped whole
		}
		fr.dec.start(payload)
		for fr.dec.next(&l) {
			buf = append(l.AppendJSON(buf), '\n')
			*records++
		}
		if fr.dec.err != nil {
			return fr.pos, "", fr.dec.err
		}
		if len(buf) >= 256<<10 {
			if _, err := out.Write(buf); err != nil {
				return fr.pos, "", err
			}
			buf = buf[:0]
		}
	}
	if len(buf) > 0 {
		if _, err := out.Write(buf); err != nil {
			return fr.pos, "", err
		}
	}
	return fr.pos, fr.torn, nil
}

// ReadLogFile writes the records of a log file to out as JSON lines, as
// the daemon's API serves them: a binary log (log.bin, its rotated files)
// read to its last whole frame, or an older gprobes' JSON-lines log
// (log.jsonl) to its last whole line. It returns how many records it
// wrote and, when the file ends in bytes that are not a whole record (a
// writer that died in the middle of a write), a sentence saying so.
func ReadLogFile(path string, out io.Writer) (records uint64, torn string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, "", err
	}
	if !st.Mode().IsRegular() {
		return 0, "", fmt.Errorf("%s is not a regular file (%s)", path, st.Mode().Type())
	}
	h := make([]byte, 1)
	if n, _ := f.ReadAt(h, 0); n == 1 && h[0] == '{' {
		end, err := copyLinesN(out, f, 0, -1, &records)
		if err == nil && end < st.Size() {
			torn = fmt.Sprintf("%s ends in %d bytes that are not a whole line (a writer that died in the middle of a write): not read", path, st.Size()-end)
		}
		return records, torn, err
	}
	end, why, err := copyRecords(out, f, 0, -1, &records)
	if errors.Is(err, errNotBinaryLog) {
		return 0, "", fmt.Errorf("%s is not a gprobes log (neither the binary log, which starts with the bytes \\x89gprobes, nor JSON lines)", path)
	}
	if err != nil {
		return records, "", fmt.Errorf("%s: %w", path, err)
	}
	if why != "" {
		torn = fmt.Sprintf("%s has a torn tail after its last whole record: %d bytes from offset %d (%s; a writer that died in the middle of a write); the %s before it were read", path, st.Size()-end, end, why, plural(records, "record"))
	}
	return records, torn, nil
}
