package symbols

// System.map and /proc/kallsyms share one line format:
//
//	ffffffff810b0f90 T do_fork
//	ffffffffc0a01000 t ext4_file_open	[ext4]
//
// ADDR is hexadecimal (up to 16 digits), TYPE one nm letter, NAME any run of
// non-blank bytes, and the optional fourth field a kernel module in brackets.
// Fields are separated by spaces or tabs. "nm -n" output of a user binary also
// has lines with a blank address for undefined symbols ("         U puts");
// those are skipped. A file is recognised as a map when its first non-blank
// line parses; after that, a line that does not parse is reported as
// "path:line: message".

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// maxMapLine is the longest line the scanner accepts.
const maxMapLine = 1 << 20

// parseMap reads a System.map or kallsyms file. size, when known, sizes the
// table: kernel map lines average about 40 bytes.
func parseMap(path string, r io.Reader, size int64) (*Table, error) {
	t := newTable(path, FormatSystemMap, int(min(max(size/36, 16), 1<<22)))
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxMapLine)
	var (
		errs    ErrorList
		lineNo  int
		sawLine bool // a line parsed: this is a map
		allZero = true
		lastMod string
	)
	for sc.Scan() {
		lineNo++
		line := sc.Bytes()
		var m mapLine
		msg := m.parse(line)
		if msg == "" && m.blank {
			continue
		}
		if msg != "" {
			if !sawLine {
				return nil, fmt.Errorf("open %s: %w; line %d is %s", path, ErrUnknownFormat, lineNo, quoteStart(line))
			}
			errs = append(errs, &ParseError{Path: path, Line: lineNo, Msg: msg})
			if len(errs) == maxErrors {
				break
			}
			continue
		}
		sawLine = true
		if m.undef {
			continue
		}
		if m.addr != 0 {
			allZero = false
		}
		mod := lastMod
		if string(m.mod) != lastMod {
			mod = string(m.mod)
			lastMod = mod
		}
		k := m.kind
		t.add(entry{
			Symbol: Symbol{Name: string(m.name), Addr: m.addr, Kind: k, Module: mod},
			global: ('A' <= k && k <= 'Z') || k == 'u',
			fn:     textKind(k),
		})
		if mod != "" {
			t.format = FormatKallsyms
		}
	}
	if err := sc.Err(); err != nil {
		if !errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		if !sawLine {
			return nil, fmt.Errorf("open %s: %w; line %d is longer than %d bytes", path, ErrUnknownFormat, lineNo+1, maxMapLine)
		}
		errs = append(errs, &ParseError{Path: path, Line: lineNo + 1, Msg: fmt.Sprintf("line longer than %d bytes", maxMapLine)})
	}
	if !sawLine {
		return nil, fmt.Errorf("open %s: %w; the file is empty", path, ErrUnknownFormat)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	if len(t.syms) == 0 {
		return nil, fmt.Errorf("open %s: %w", path, ErrNoSymbols)
	}
	if allZero {
		return nil, fmt.Errorf("open %s: %w", path, ErrZeroAddresses)
	}
	t.names.build(t.syms)
	return t, nil
}

// mapLine is one parsed line; the byte slices alias the scanner's buffer.
type mapLine struct {
	addr  uint64
	kind  byte
	name  []byte
	mod   []byte
	blank bool // empty or white space only
	undef bool // "nm" undefined symbol: no address
}

// parse splits line into its fields and returns "" or what is wrong with it.
func (m *mapLine) parse(line []byte) string {
	var f [5][]byte
	n := 0
	indented := len(line) > 0 && isBlank(line[0])
	for i := 0; i < len(line); {
		for i < len(line) && isBlank(line[i]) {
			i++
		}
		if i == len(line) {
			break
		}
		j := i
		for j < len(line) && !isBlank(line[j]) {
			j++
		}
		if n == len(f) {
			return "too many fields: want ADDR TYPE NAME [module]"
		}
		f[n] = line[i:j]
		n++
		i = j
	}
	switch {
	case n == 0:
		m.blank = true
		return ""
	case indented && n == 2 && len(f[0]) == 1:
		// "nm" prints undefined symbols with a blank address.
		switch f[0][0] {
		case 'U', 'w', 'v':
			m.undef = true
			return ""
		}
		return fmt.Sprintf("missing address before type %q", f[0])
	case n < 3:
		return "want ADDR TYPE NAME [module], found " + strconv.Itoa(n) + " fields"
	case n > 4:
		return fmt.Sprintf("unexpected %s after the module: want ADDR TYPE NAME [module]", quoteStart(f[4]))
	}
	addr, ok := parseHex(f[0])
	if !ok {
		return fmt.Sprintf("address %s is not a hexadecimal number of at most 16 digits", quoteStart(f[0]))
	}
	if len(f[1]) != 1 || !isTypeLetter(f[1][0]) {
		return fmt.Sprintf("type %s is not an nm type letter (T, t, D, d, B, b, R, r, W, ...)", quoteStart(f[1]))
	}
	if n == 4 {
		mod := f[3]
		if len(mod) < 3 || mod[0] != '[' || mod[len(mod)-1] != ']' {
			return fmt.Sprintf("unexpected %s after the name: want a module as \"[name]\"", quoteStart(mod))
		}
		m.mod = mod[1 : len(mod)-1]
	}
	m.addr, m.kind, m.name = addr, f[1][0], f[2]
	if m.kind == 'U' {
		m.undef = true
	}
	return ""
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' }

func isTypeLetter(c byte) bool {
	return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || c == '?' || c == '-'
}

// parseHex parses 1 to 16 hexadecimal digits.
func parseHex(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(c)
	}
	return v, true
}

// quoteStart quotes the first 40 bytes of b for an error message.
func quoteStart(b []byte) string {
	if len(b) > 40 {
		return strconv.Quote(string(b[:40])) + "..."
	}
	return strconv.Quote(string(b))
}

// ReadMap reads symbols in the System.map format ("ADDR TYPE NAME" lines)
// from r, named name in messages: symbols that come from somewhere other
// than a file (a fake target's program, a test).
func ReadMap(name string, r io.Reader) (*Table, error) { return parseMap(name, r, 0) }
