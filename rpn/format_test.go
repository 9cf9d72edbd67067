package rpn_test

import (
	"strings"
	"testing"

	"github.com/gprobes/gprobes/rpn"
)

func word(v int64) rpn.Value {
	b := make([]byte, 8)
	for i := range b {
		b[i] = byte(uint64(v) >> (8 * i))
	}
	return rpn.Value{Item: rpn.LogItem{Kind: 'w', Size: 8}, Bytes: b}
}

func str(s string) rpn.Value { return rpn.Value{Item: rpn.LogItem{Kind: 's'}, Bytes: []byte(s)} }

// A format shows the logged values as printf does: C's conversions,
// flags and widths over words and strings; a value missing or left over
// is said, never dropped.
func TestFormatValues(t *testing.T) {
	for _, c := range []struct {
		format string
		vals   []rpn.Value
		want   string
	}{
		{"write(%d, %s) = %ld", []rpn.Value{word(3), str("hello"), word(-1)}, "write(3, hello) = -1"},
		{"%u %x %#X %o %c %p", []rpn.Value{word(-1), word(255), word(255), word(8), word('A'), word(0x7fff0000)}, "18446744073709551615 ff 0XFF 10 A 0x7fff0000"},
		{"[%5d|%-5s|%05x] 100%%", []rpn.Value{word(42), str("ab"), word(0xbeef)}, "[   42|ab   |0beef] 100%"},
		{"%s and %d", []rpn.Value{word(7)}, "7 and %!d(missing)"},
		{"only %d", []rpn.Value{word(1), str("x"), word(2)}, `only 1 ["x" 2]`},
		{"%d", []rpn.Value{str("x")}, `%!d(string="x")`},
	} {
		if got := rpn.FormatValues(c.format, c.vals); got != c.want {
			t.Errorf("%q: %q, want %q", c.format, got, c.want)
		}
	}
	for _, bad := range []string{"%q", "50%", "%y %d"} {
		if err := rpn.CheckFormat(bad); err == nil {
			t.Errorf("CheckFormat(%q): no error", bad)
		}
	}
	if err := rpn.CheckFormat("%q"); err == nil || !strings.Contains(err.Error(), "%q is not a conversion") {
		t.Errorf("CheckFormat(%%q): %v", err)
	}
}
