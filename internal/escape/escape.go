// Package escape makes text from strangers safe to print on a terminal.
// It is a leaf: the parser (dpdf), the bytecode (rpn) and the command
// line share it without linking one another.
package escape

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// String makes s safe to print on a terminal: control characters (C0 but
// tab, DEL and C1), bytes that are not UTF-8, the byte order mark and the
// bidirectional overrides that make text display in another order than it
// is read are written as Go escapes (\x1b, \u009b, \ufeff). Everything
// else is kept as is, backslashes included, so an ordinary line prints
// unchanged.
func String(s string) string {
	clean := true
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || Needed(r) {
			clean = false
			break
		}
		i += n
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || Needed(r) {
			b.WriteString(Rune(r, s[i]))
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// Needed reports whether String writes r as an escape.
func Needed(r rune) bool {
	switch {
	case r == '\t':
		return false
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r == 0xfeff, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// Rune spells r (or the invalid byte b, when r is utf8.RuneError) as the
// escape String writes for it.
func Rune(r rune, b byte) string {
	if r == utf8.RuneError || r < 0x80 {
		return fmt.Sprintf("\\x%02x", b)
	}
	return fmt.Sprintf("\\u%04x", r)
}
