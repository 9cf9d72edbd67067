package dpdf

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alecthomas/participle/v2/lexer"
)

// errorsOf parses src and returns its errors, failing when there are none.
func errorsOf(t *testing.T, src string) ErrorList {
	t.Helper()
	_, err := ParseSource("t.dpdf", []byte(src), Options{NoPreprocessor: true})
	l, ok := err.(ErrorList)
	if !ok || len(l) == 0 {
		t.Fatalf("want syntax errors, got %v", err)
	}
	return l
}

const header = "name = x\nmodtype = user\noffset = 1\n"

// TestDeepNesting: expressions nested far past MaxNesting are refused with
// one positioned error at the token that opens level MaxNesting+1, and
// nothing recurses once per level on the way (200,000 levels overflowed
// the Go stack). MaxNesting levels are accepted.
func TestDeepNesting(t *testing.T) {
	const n = 200000
	parens := strings.Repeat("(", n) + "1" + strings.Repeat(")", n)
	for _, c := range []struct {
		name, line string
		col        int // of the first token past the limit
	}{
		{"push d parens", "push d," + parens, len("push d,") + MaxNesting + 1},
		{"offset parens", "offset = " + parens, len("offset = ") + MaxNesting + 1},
		{"exit parens", "exit " + parens, len("exit ") + MaxNesting + 1},
		{"minus", "push d," + strings.Repeat("-", n) + "1", len("push d,") + MaxNesting + 1},
		{"tilde", "push d," + strings.Repeat("~", n) + "1", len("push d,") + MaxNesting + 1},
		{"mixed", "push d," + strings.Repeat("-(", n) + "1" + strings.Repeat(")", n), len("push d,") + MaxNesting + 1},
		{"unclosed", "push d," + strings.Repeat("(", n), len("push d,") + MaxNesting + 1},
		{"offsetof index", "push d," + strings.Repeat("offsetof(struct s, f[", n), len("push d,") + MaxNesting/2*len("offsetof(struct s, f[") + len("offsetof") + 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := errorsOf(t, header+c.line+"\nexit\n")
			if len(l) != 1 {
				t.Fatalf("want 1 error, got %d: %v", len(l), l[:min(len(l), 5)])
			}
			want := fmt.Sprintf("t.dpdf:4:%d: expression nested too deeply: at most %d levels", c.col, MaxNesting)
			if !strings.HasPrefix(l[0].Error(), want) {
				t.Errorf("got  %s\nwant %s", l[0].Error(), want)
			}
		})
	}
	// A sum of n terms is a tree n levels deep: the grammar reads it in a
	// loop, and Tree refuses it at the operator that makes it deeper than
	// MaxNesting, returning a tree nothing need walk.
	f := parseString(t, header+"push d,1"+strings.Repeat("+1", n)+"\nexit\n")
	var errs ErrorList
	root := f.Probes[0].Body[0].Instr.Push.Const.Tree(&errs)
	want := fmt.Sprintf("t.dpdf:4:%d: expression nested too deeply", len("push d,1")+2*MaxNesting+1)
	if len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), want) {
		t.Errorf("long sum: %v, want %s", errs, want)
	}
	if _, ok := root.(*Num); !ok {
		t.Errorf("long sum: Tree returned a %T", root)
	}
	if _, err := ParseExpr("1" + strings.Repeat("+1", n)); err == nil || !strings.Contains(err.Error(), "nested too deeply") {
		t.Errorf("ParseExpr of a %d-term sum: %v", n, err)
	}
	if _, err := ParseExpr(parens); err == nil || !strings.Contains(err.Error(), "nested too deeply") {
		t.Errorf("ParseExpr of %d parentheses: %v", n, err)
	}
	// at the limit: accepted, and evaluates
	deep := strings.Repeat("-(", MaxNesting/2) + "7" + strings.Repeat(")", MaxNesting/2)
	f = parseString(t, header+"push d,"+deep+"\npush d,"+strings.Repeat("(", MaxNesting)+"1"+strings.Repeat(")", MaxNesting)+"\nexit\n")
	errs = nil
	v, err := Eval(f.Probes[0].Body[0].Instr.Push.Const.Tree(&errs), nil)
	if len(errs) > 0 || err != nil || v != 7 {
		t.Errorf("%d levels: %d, %v %v", MaxNesting, v, errs, err)
	}
	n2, err := ParseExpr(deep)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := Eval(n2, nil); err != nil || v != 7 {
		t.Errorf("ParseExpr at the limit: %d, %v", v, err)
	}
}

// TestBrokenStatementsKeepLabels: a statement that fails to parse still
// defines its label and, for a keyword, still counts as given, so that the
// rest of the file reports only its own mistakes.
func TestBrokenStatementsKeepLabels(t *testing.T) {
	for _, line := range []string{"done: push q", "done: push d,$", "done: push d," + strings.Repeat("(", 300) + "1"} {
		f, _ := ParseSource("t.dpdf", []byte(header+"jmp done\n"+line+"\n"), Options{NoPreprocessor: true})
		if f == nil || len(f.Errors) != 1 {
			t.Fatalf("%q: want one error, got %v", line, f)
		}
		body := f.Probes[0].Body
		if len(body) != 2 || body[1].Label == nil || body[1].Label.Name != "done" || body[1].Instr != nil {
			t.Errorf("%q: label not kept: %+v", line, body)
		}
	}
	f, _ := ParseSource("t.dpdf", []byte("name = x\nmodtype = (\noffset = $\nexit\n"), Options{NoPreprocessor: true})
	if f == nil || len(f.Errors) != 2 || len(f.Header) != 2 || len(f.Probes) != 1 || f.Header[1].Value != nil || f.Probes[0].Offset.Value != nil {
		t.Errorf("broken keywords: %+v", f)
	}
}

// TestByteOrderMark: a UTF-8 byte order mark opening a file is skipped,
// with columns on line 1 counted after it; anywhere else it is an error
// that names it.
func TestByteOrderMark(t *testing.T) {
	f := parseString(t, "\ufeffname = x\nmodtype = user\noffset = 1\nexit\n")
	if p := f.Header[0].Pos; p.Line != 1 || p.Column != 1 {
		t.Errorf("name at %v", p)
	}
	if p := f.Header[0].Value.Pos; p.Column != 8 {
		t.Errorf("value at %v", p)
	}
	l := errorsOf(t, "\ufeffname = x\nmodtype = user\noffset = 1\npush q\n")
	if got := l[0].Error(); !strings.HasPrefix(got, `t.dpdf:4:6: unexpected "q"`) {
		t.Errorf("got %s", got)
	}
	l = errorsOf(t, "\ufeff  @\n")
	if got := l[0].Error(); got != "t.dpdf:1:3: unexpected character '@'" {
		t.Errorf("got %s", got)
	}
	if d := l[0].Detail(); !strings.Contains(d, "    1 |   @\n      |   ^") {
		t.Errorf("caret display:\n%s", d)
	}
	l = errorsOf(t, header+"push d,1 \ufeff\n")
	if got := l[0].Error(); !strings.HasPrefix(got, "t.dpdf:4:10: byte order mark (U+FEFF)") {
		t.Errorf("got %s", got)
	}
	if d := l[0].Detail(); strings.Contains(d, "\ufeff") || !strings.Contains(d, `push d,1 \ufeff`) {
		t.Errorf("byte order mark shown raw or not at all:\n%s", d)
	}
	l = errorsOf(t, header+"\ufeffexit\n")
	if got := l[0].Error(); !strings.HasPrefix(got, "t.dpdf:4:1: byte order mark") {
		t.Errorf("got %s", got)
	}
}

// TestControlBytesAreEscaped: no byte of a DPDF that a terminal would act
// on (ESC, other C0 and C1 controls, bytes that are not UTF-8, bidi
// overrides) reaches the output of an error raw; the caret still stands
// under the column, and ordinary text, tabs and backslashes print as they
// are. Long lines are shown around the column.
func TestControlBytesAreEscaped(t *testing.T) {
	for _, c := range []struct {
		line, shown string
		col         int
	}{
		{"push r,\x1b[31mrax", `push r,\x1b[31mrax`, 8},
		{"push d,1 \x1b]0;pwned\x07 x", `push d,1 \x1b]0;pwned\x07 x`, 10},
		{"\tpush d,\xff", "\tpush d,\\xff", 9},
		{"push d,\u009b2J", `push d,\u009b2J`, 8},
		{"push d,'\\\\' \u202e", `push d,'\\' \u202e`, 13},
	} {
		l := errorsOf(t, header+c.line+"\n")
		d := l[0].Detail()
		for i := 0; i < len(d); i++ {
			if b := d[i]; b < 0x20 && b != '\n' && b != '\t' || b == 0x7f {
				t.Errorf("%q: raw byte %#x in\n%s", c.line, b, d)
			}
		}
		if strings.Contains(d, "\u009b") || strings.Contains(d, "\u202e") || strings.Contains(d, "\xff") {
			t.Errorf("%q: raw C1, bidi or invalid byte in\n%s", c.line, d)
		}
		lines := strings.Split(d, "\n")
		if len(lines) != 3 || lines[1] != "    4 | "+c.shown {
			t.Fatalf("%q: source line shown as\n%s", c.line, d)
		}
		if !strings.HasPrefix(lines[0], fmt.Sprintf("t.dpdf:4:%d: ", c.col)) {
			t.Errorf("%q: %s", c.line, lines[0])
		}
		// the caret stands under the escape of the offending byte, or
		// under the offending token
		caret := strings.TrimPrefix(lines[2], "      | ")
		at := strings.IndexByte(caret, '^')
		shown := strings.TrimPrefix(lines[1], "    4 | ")
		want := len(Escape(c.line[:c.col-1]))
		if at != want || !strings.HasPrefix(shown[at:], Escape(c.line[c.col-1:])[:1]) {
			t.Errorf("%q: caret at %d, want %d:\n%s", c.line, at, want, d)
		}
	}
	// file names and messages are escaped too
	e := &Error{Pos: lexerPos("a\x1b.dpdf", 1, 1), Msg: "bad \x1b[2J"}
	if got := e.Error(); got != `a\x1b.dpdf:1:1: bad \x1b[2J` {
		t.Errorf("got %q", got)
	}
	// a 1 MB line is shown as a window around the column
	long := "push d," + strings.Repeat("x", 1<<20) + " $"
	l := errorsOf(t, header+long+"\n")
	d := l[0].Detail()
	if len(d) > 600 || !strings.Contains(d, "...xxx") || !strings.HasSuffix(strings.Split(d, "\n")[1], " $") {
		t.Errorf("long line shown as %d bytes:\n%.400s", len(d), d)
	}
	lines := strings.Split(d, "\n")
	if strings.Index(lines[2], "^") != strings.Index(lines[1], "$") {
		t.Errorf("caret not under the column:\n%s", d)
	}
}

func lexerPos(file string, line, col int) lexer.Position {
	return lexer.Position{Filename: file, Line: line, Column: col}
}

// TestByteOrderMarkWithThePreprocessor: a DPDF and an included file that
// open with a byte order mark go through the C preprocessor: the
// directive on line 1 is seen, and positions on line 1 do not count the
// mark, in the DPDF and in the included file.
func TestByteOrderMarkWithThePreprocessor(t *testing.T) {
	needCPP(t)
	dir := writeFiles(t, map[string]string{
		"inc.h":  "\ufeff  push q\n",
		"p.dpdf": "\ufeff#include \"defs.h\"\nname = x\nmodtype = user\noffset = 1\nexit\n",
		"d.dpdf": "\ufeff  major = 1 q\n#define ONE 1\nname = x\nmodtype = user\noffset = ONE\n#include \"inc.h\"\nexit\n",
		"defs.h": "\ufeff#define UNUSED 1\n",
	})
	f, err := Parse(filepath.Join(dir, "p.dpdf"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !f.Preprocessed || len(f.Probes) != 1 {
		t.Errorf("preprocessed %v, %d probes", f.Preprocessed, len(f.Probes))
	}
	_, err = Parse(filepath.Join(dir, "d.dpdf"), Options{})
	l, ok := err.(ErrorList)
	if !ok || len(l) != 2 {
		t.Fatalf("got %v", err)
	}
	if e := l[0]; e.Pos.Filename != filepath.Join(dir, "d.dpdf") || e.Pos.Line != 1 || e.Pos.Column != 13 ||
		!strings.HasSuffix(e.Detail(), "    1 |   major = 1 q\n      |             ^") {
		t.Errorf("error at %v: %s", e.Pos, e.Detail())
	}
	if e := l[1]; e.Pos.Filename != filepath.Join(dir, "inc.h") || e.Pos.Line != 1 || e.Pos.Column != 8 ||
		!strings.HasSuffix(e.Detail(), "    1 |   push q\n      |        ^") {
		t.Errorf("error at %v: %s", e.Pos, e.Detail())
	}
}
