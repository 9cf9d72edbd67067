package rpn

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// A probe's format (format = "...") is printf-like over the values its
// program logged, in order (LogLayouts, Split): %d and %i a word as a
// signed number, %u unsigned, %x %X %o in hex or octal, %c a word as a
// character, %p a word as an address (0x...), %s a string or memory
// (log str, log mrf) as text, or a word as a number; %% a percent sign.
// Flags, width and precision are C's (-, +, space, 0, #). A directive
// without a value left shows %!d(missing); values left over follow the
// text in brackets, so nothing logged is hidden. Stacks (log ustack, log
// kstack) take no directive: their frames are shown after the text, one
// per line.

// formatVerbs are the conversions a format may use.
const formatVerbs = "diuxXocps"

// CheckFormat reports a format that names a conversion it does not know.
func CheckFormat(f string) error {
	_, err := parseFormat(f)
	return err
}

type directive struct {
	lit  string // text before it
	spec string // flags, width, precision
	verb byte   // 0 for the text after the last directive
}

func parseFormat(f string) ([]directive, error) {
	var out []directive
	lit := strings.Builder{}
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			lit.WriteByte(f[i])
			continue
		}
		j := i + 1
		for j < len(f) && strings.IndexByte("-+ 0#", f[j]) >= 0 {
			j++
		}
		for j < len(f) && (f[j] >= '0' && f[j] <= '9' || f[j] == '.') {
			j++
		}
		// C's length modifiers mean nothing here: words are words
		for j < len(f) && strings.IndexByte("hljzt", f[j]) >= 0 {
			j++
		}
		if j == len(f) {
			return nil, fmt.Errorf("%q ends inside a conversion", f)
		}
		if f[j] == '%' && j == i+1 {
			lit.WriteByte('%')
			i = j
			continue
		}
		if strings.IndexByte(formatVerbs, f[j]) < 0 {
			return nil, fmt.Errorf("%%%c is not a conversion it knows (%%d %%i %%u %%x %%X %%o %%c %%p %%s %%%%)", f[j])
		}
		spec := strings.Map(func(r rune) rune {
			if strings.ContainsRune("hljzt", r) {
				return -1
			}
			return r
		}, f[i+1:j])
		out = append(out, directive{lit: lit.String(), spec: spec, verb: f[j]})
		lit.Reset()
		i = j
	}
	return append(out, directive{lit: lit.String()}), nil
}

// FormatValues shows logged values through a format.
func FormatValues(f string, vals []Value) string {
	ds, err := parseFormat(f)
	if err != nil {
		return fmt.Sprintf("%%!(bad format: %v)", err)
	}
	// stacks take no directive: whoever shows the record shows their
	// frames after the text, one per line
	var flat []Value
	for _, v := range vals {
		if !v.Item.Stack() {
			flat = append(flat, v)
		}
	}
	vals = flat
	var b strings.Builder
	k := 0
	for _, d := range ds {
		b.WriteString(d.lit)
		if d.verb == 0 {
			break
		}
		if k == len(vals) {
			fmt.Fprintf(&b, "%%!%c(missing)", d.verb)
			continue
		}
		v := vals[k]
		k++
		if v.Item.Kind != 'w' {
			if d.verb == 's' {
				fmt.Fprintf(&b, "%"+d.spec+"s", strings.TrimRight(string(v.Bytes), "\x00"))
			} else {
				fmt.Fprintf(&b, "%%!%c(string=%s)", d.verb, v.String())
			}
			continue
		}
		var u uint64
		if len(v.Bytes) == 8 {
			u = binary.LittleEndian.Uint64(v.Bytes)
		} else {
			u = uint64(binary.LittleEndian.Uint32(v.Bytes))
		}
		s := int64(u)
		if len(v.Bytes) == 4 {
			s = int64(int32(u))
		}
		switch d.verb {
		case 'd', 'i':
			fmt.Fprintf(&b, "%"+d.spec+"d", s)
		case 'u':
			fmt.Fprintf(&b, "%"+d.spec+"d", u)
		case 'x', 'X', 'o':
			fmt.Fprintf(&b, "%"+d.spec+string(d.verb), u)
		case 'c':
			fmt.Fprintf(&b, "%"+d.spec+"c", rune(u))
		case 'p':
			fmt.Fprintf(&b, "%"+d.spec+"s", fmt.Sprintf("0x%x", u))
		case 's':
			fmt.Fprintf(&b, "%"+d.spec+"s", v.String())
		}
	}
	if k < len(vals) {
		var rest []string
		for _, v := range vals[k:] {
			rest = append(rest, v.String())
		}
		b.WriteString(" [" + strings.Join(rest, " ") + "]")
	}
	return b.String()
}
