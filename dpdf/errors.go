package dpdf

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/alecthomas/participle/v2/lexer"
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
			return e.Msg
		}
		return e.Pos.Filename + ": " + e.Msg
	}
	col := e.Pos.Column
	if col < 1 {
		col = 1
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.Pos.Filename, e.Pos.Line, col, e.Msg)
}

// Detail returns the error with its source line and a caret under the
// column, as a C compiler prints it.
func (e *Error) Detail() string {
	if e.Text == "" || e.Pos.Line == 0 {
		return e.Error()
	}
	var b strings.Builder
	b.WriteString(e.Error())
	num := fmt.Sprintf("%5d", e.Pos.Line)
	fmt.Fprintf(&b, "\n%s | %s\n%s | ", num, e.Text, strings.Repeat(" ", len(num)))
	col := e.Pos.Column
	if col < 1 {
		col = 1
	}
	// keep tabs so the caret lines up under a tab-indented line
	for i := 0; i < col-1 && i < len(e.Text); i++ {
		if e.Text[i] == '\t' {
			b.WriteByte('\t')
		} else {
			b.WriteByte(' ')
		}
	}
	b.WriteByte('^')
	return b.String()
}

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
	fmt.Fprintln(w, err)
}

// sources caches the lines of the files a DPDF was read from, for caret
// displays and for recovering token columns after preprocessing.
type sources struct {
	files map[string][]string
	pp    map[lineKey]string // preprocessed text of each line
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
		data, err := os.ReadFile(file)
		if err == nil {
			lines = strings.Split(string(data), "\n")
		}
		s.files[file] = lines
	}
	if n <= len(lines) {
		return strings.TrimRight(lines[n-1], "\r")
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
