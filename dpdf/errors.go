package dpdf

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/alecthomas/participle/v2/lexer"

	"github.com/gprobes/gprobes/internal/escape"
)

// Error is a positioned error in a DPDF: "file:line:col: message". Text is
// the offending source line, when known, for a caret display.
type Error struct {
	Pos  lexer.Position
	Msg  string
	Text string
}

func (e *Error) Error() string {
	if e.Pos.Line == 0 {
		if e.Pos.Filename == "" {
			return Escape(e.Msg)
		}
		return Escape(e.Pos.Filename) + ": " + Escape(e.Msg)
	}
	col := e.Pos.Column
	if col < 1 {
		col = 1
	}
	return fmt.Sprintf("%s:%d:%d: %s", Escape(e.Pos.Filename), e.Pos.Line, col, Escape(e.Msg))
}

// maxShown is how many bytes of a long source line Detail shows, around
// the column.
const maxShown = 160

// Detail returns the error with its source line and a caret under the
// column, as a C compiler prints it. Control bytes, invalid UTF-8 and
// invisible characters of the line are escaped (see Escape); of a line
// longer than maxShown bytes, only the part around the column is shown,
// between "...".
func (e *Error) Detail() string {
	if e.Text == "" || e.Pos.Line == 0 {
		return e.Error()
	}
	col := e.Pos.Column
	if col < 1 {
		col = 1
	}
	text, at := e.Text, min(col-1, len(e.Text))
	var lead, trail string
	if len(text) > maxShown {
		from := max(0, at-maxShown/2)
		for from > 0 && !utf8.RuneStart(text[from]) {
			from--
		}
		to := min(len(text), from+maxShown)
		for to < len(text) && !utf8.RuneStart(text[to]) {
			to++
		}
		if from > 0 {
			lead = "..."
		}
		if to < len(text) {
			trail = "..."
		}
		text, at = text[from:to], at-from
	}
	var b strings.Builder
	b.WriteString(e.Error())
	num := fmt.Sprintf("%5d", e.Pos.Line)
	fmt.Fprintf(&b, "\n%s | %s%s%s\n%s | %s", num, lead, Escape(text), trail, strings.Repeat(" ", len(num)), strings.Repeat(" ", len(lead)))
	// one blank per column of the shown text before the caret; tabs are
	// kept so the caret lines up under a tab-indented line
	for i := 0; i < at; {
		r, n := utf8.DecodeRuneInString(text[i:])
		switch {
		case r == '\t':
			b.WriteByte('\t')
		case n == 1 && r == utf8.RuneError || escape.Needed(r):
			b.WriteString(strings.Repeat(" ", len(escape.Rune(r, text[i]))))
		default:
			b.WriteByte(' ')
		}
		i += n
	}
	b.WriteByte('^')
	return b.String()
}

// Escape makes s safe to print on a terminal (escape.String): control
// characters (C0 but tab, DEL and C1), bytes that are not UTF-8, the byte
// order mark and the bidirectional overrides that make text display in
// another order than it is read are written as Go escapes (\x1b, \u009b,
// \ufeff). Everything else is kept as is, backslashes included, so an
// ordinary line prints unchanged. Every message and source line of an
// Error goes through it, since a DPDF's text is a stranger's input.
func Escape(s string) string { return escape.String(s) }

// ErrorList collects every error of a file. It implements error; Err
// returns nil for an empty list.
type ErrorList []*Error

func (l *ErrorList) add(pos lexer.Position, format string, args ...any) {
	*l = append(*l, &Error{Pos: pos, Msg: fmt.Sprintf(format, args...)})
}

// Add appends an error at pos.
func (l *ErrorList) Add(pos lexer.Position, format string, args ...any) {
	l.add(pos, format, args...)
}

// Len reports how many errors the list holds.
func (l ErrorList) Len() int { return len(l) }

// Sort orders the list by file, line and column, and drops exact
// duplicates (same position, same message).
func (l *ErrorList) Sort() {
	s := *l
	sort.SliceStable(s, func(i, j int) bool {
		a, b := s[i].Pos, s[j].Pos
		if a.Filename != b.Filename {
			return a.Filename < b.Filename
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
	out := s[:0]
	for i, e := range s {
		if i > 0 && e.Pos == s[i-1].Pos && e.Msg == s[i-1].Msg {
			continue
		}
		out = append(out, e)
	}
	*l = out
}

func (l ErrorList) Error() string {
	switch len(l) {
	case 0:
		return "no errors"
	case 1:
		return l[0].Error()
	}
	return fmt.Sprintf("%s (and %d more errors)", l[0].Error(), len(l)-1)
}

// Err returns the list as an error, or nil when it is empty.
func (l ErrorList) Err() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

// Print writes every error, one per line, or with source lines and carets
// when detail is set.
func (l ErrorList) Print(w io.Writer, detail bool) {
	for _, e := range l {
		if detail {
			fmt.Fprintln(w, e.Detail())
		} else {
			fmt.Fprintln(w, e.Error())
		}
	}
}

// PrintError prints err to w: every entry of an ErrorList, or the error
// itself.
func PrintError(w io.Writer, err error, detail bool) {
	var l ErrorList
	if errors.As(err, &l) {
		l.Print(w, detail)
		return
	}
	fmt.Fprintln(w, Escape(err.Error()))
}

// sources caches the lines of the files a DPDF was read from, for caret
// displays and for recovering token columns after preprocessing.
type sources struct {
	files map[string][]string
	// text holds the text of files given in memory (the DPDF being read),
	// split into files on first use: a file without errors is never split
	text map[string]string
	pp   map[lineKey]string // preprocessed text of each line
}

func (s *sources) line(file string, n int) string {
	if s == nil || n < 1 {
		return ""
	}
	lines, ok := s.files[file]
	if !ok {
		if s.files == nil {
			s.files = map[string][]string{}
		}
		if text, ok := s.text[file]; ok {
			lines = strings.Split(text, "\n")
			delete(s.text, file)
		} else if data, err := os.ReadFile(file); err == nil {
			lines = strings.Split(string(data), "\n")
		}
		s.files[file] = lines
	}
	if n <= len(lines) {
		l := strings.TrimRight(lines[n-1], "\r")
		if n == 1 {
			l = strings.TrimPrefix(l, bom) // the scanner skips it: columns start after it
		}
		return l
	}
	return s.pp[lineKey{file, n}]
}

// annotate fills in the source text of each error.
func (s *sources) annotate(l ErrorList) {
	for _, e := range l {
		if e.Text == "" {
			e.Text = s.line(e.Pos.Filename, e.Pos.Line)
		}
	}
}
