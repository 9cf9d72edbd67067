package dpdf

import (
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/alecthomas/participle/v2/lexer"
)

// Token types of the DPDF lexer. The lexer is line-aware: a DPDF is one
// statement per line (or per ';'), and what a token means depends on where
// it stands in its statement, which a context-free lexer cannot see:
//
//   - Key: a "keyword =" at the start of a statement; the keyword may be two
//     words ("pass count"). The '=' follows as a Punct token.
//   - String: the value of "name =", quoted or bare to the end of the
//     statement (paths such as ./a.out or /lib/x86_64-linux-gnu/libc.so.6
//     are not expressions).
//   - SrcLine: "fs/open.c:1234" as the value of "offset =" (and of
//     "retprobe =", which refuses it with a clear error).
//   - Event: the value of "tracepoint =" when it holds a ':' (the rest of
//     the statement, "sched:sched_switch"); the compiler checks its form.
//   - Sep: a ',' between the parts of a "watch =" value (EXPR,LEN,MODE),
//     outside parentheses; a ',' anywhere else (offsetof's, an operand's)
//     is a Punct.
//   - Label: "identifier:" at the start of a statement.
//
// Everything else is ordinary tokens: identifiers (which may contain inner
// dots, as compiler-generated symbols do: foo.isra.0), numbers, character
// literals and punctuation. EOL ends every statement; empty statements
// produce no EOL.
const (
	tokEOF lexer.TokenType = lexer.EOF - iota
	tokEOL
	tokKey
	tokIdent
	tokInt
	tokChar
	tokString
	tokSrcLine
	tokLabel
	tokPunct
	tokEvent
	tokSep
	// tokBad stands for the rest of a statement after a lexical error,
	// which is reported; the parser keeps what it can of the statement
	// (see brokenStatement) and reports nothing more.
	tokBad
)

func tokenSymbols() map[string]lexer.TokenType {
	return map[string]lexer.TokenType{
		"EOF":     tokEOF,
		"EOL":     tokEOL,
		"Key":     tokKey,
		"Ident":   tokIdent,
		"Int":     tokInt,
		"Char":    tokChar,
		"String":  tokString,
		"SrcLine": tokSrcLine,
		"Label":   tokLabel,
		"Punct":   tokPunct,
		"Event":   tokEvent,
		"Sep":     tokSep,
		"Bad":     tokBad,
	}
}

// scanner turns DPDF text (raw, or the output of the C preprocessor with
// its line markers) into tokens with positions in the user's files.
type scanner struct {
	src  string
	off  int
	file string // current file, from line markers when preprocessed
	line int
	lsrc int // offset of the start of the current line in src

	cpp    bool // input is preprocessor output: honour line markers
	tokens []lexer.Token
	eols   int // EOL tokens emitted in this batch (see next)
	errs   *ErrorList
	// lines records, for every file and line that produced tokens, the text
	// of that line as the lexer saw it, for caret displays of preprocessed
	// input (a line of a file that cannot be read again). Only preprocessed
	// input records lines: without the preprocessor every line is a line of
	// the file being read, which sources holds.
	lines map[lineKey]string

	atStmt  bool // at the start of a statement: keywords and labels are recognised
	pending bool // tokens were emitted since the last EOL
	valKey  string
	// parts: the statement is a "watch =" value, whose commas outside
	// parentheses (depth 0) separate its parts (tokSep)
	parts bool
	depth int
}

type lineKey struct {
	file string
	line int
}

func newScanner(file, src string, cpp bool, errs *ErrorList) *scanner {
	return &scanner{src: src, file: file, line: 1, cpp: cpp, errs: errs, atStmt: true, lines: map[lineKey]string{}}
}

func (s *scanner) pos(off int) lexer.Position {
	return lexer.Position{Filename: s.file, Offset: off, Line: s.line, Column: off - s.lsrc + 1}
}

func (s *scanner) emit(t lexer.TokenType, val string, off int) {
	s.tokens = append(s.tokens, lexer.Token{Type: t, Value: val, Pos: s.pos(off)})
	s.atStmt = false
	s.pending = true
}

func (s *scanner) eol(off int) {
	if s.pending {
		s.tokens = append(s.tokens, lexer.Token{Type: tokEOL, Value: "\n", Pos: s.pos(off)})
		s.eols++
	}
	s.pending = false
	s.atStmt = true
	s.valKey = ""
	s.parts = false
}

func (s *scanner) errorf(off int, format string, args ...any) {
	s.errs.add(s.pos(off), format, args...)
}

func (s *scanner) newline() {
	s.line++
	s.lsrc = s.off
}

func (s *scanner) peek(i int) byte {
	if s.off+i < len(s.src) {
		return s.src[s.off+i]
	}
	return 0
}

// bom is the UTF-8 byte order mark, which some editors write at the start
// of a file.
const bom = "\ufeff"

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdentChar(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v' }

// scan lexes the whole input.
func (s *scanner) scan() []lexer.Token {
	toks, _ := s.next(math.MaxInt, len(s.src)/4+8) // DPDF runs at about one token per 4 bytes
	return toks
}

// next lexes at least min more statements, in a new slice of capacity
// size: the tokens end with the EOL of the last statement, or, at the end
// of the input (done), with EOF. The scanner keeps its state between
// calls, so a file is read a batch of statements at a time and only the
// batch's tokens are in memory.
func (s *scanner) next(min, size int) (toks []lexer.Token, done bool) {
	s.tokens = make([]lexer.Token, 0, size)
	s.eols = 0
	for s.off < len(s.src) {
		if s.eols >= min {
			return s.tokens, false // the last token is an EOL: the next batch starts a statement
		}
		c := s.src[s.off]
		switch {
		case c == bom[0] && s.off == s.lsrc && s.line == 1 && strings.HasPrefix(s.src[s.off:], bom):
			// a byte order mark opens the file (or, in preprocessor
			// output, an included file): skip it, and count columns
			// from after it
			s.off += len(bom)
			s.lsrc = s.off
			continue
		case c == '\n':
			s.recordLine()
			s.eol(s.off)
			s.off++
			s.newline()
			continue
		case isSpace(c):
			s.off++
			continue
		case c == '/' && s.peek(1) == '/':
			for s.off < len(s.src) && s.src[s.off] != '\n' {
				s.off++
			}
			continue
		case c == '/' && s.peek(1) == '*':
			s.blockComment()
			continue
		case c == ';':
			s.eol(s.off)
			s.off++
			continue
		case c == '#' && s.off == s.lsrc+s.indent():
			s.directive()
			continue
		}
		if s.atStmt {
			if s.keyword() || s.label() {
				continue
			}
		}
		if s.valKey != "" {
			if s.value() {
				continue
			}
		}
		s.token()
	}
	s.recordLine()
	s.eol(s.off)
	s.tokens = append(s.tokens, lexer.Token{Type: tokEOF, Pos: s.pos(s.off)})
	return s.tokens, true
}

// recordLine remembers the text of the line being finished (preprocessed
// input only: see lines).
func (s *scanner) recordLine() {
	if !s.cpp {
		return
	}
	end := strings.IndexByte(s.src[s.lsrc:], '\n')
	text := s.src[s.lsrc:]
	if end >= 0 {
		text = text[:end]
	}
	s.lines[lineKey{s.file, s.line}] = text
}

func (s *scanner) indent() int {
	i := s.lsrc
	for i < len(s.src) && isSpace(s.src[i]) {
		i++
	}
	return i - s.lsrc
}

func (s *scanner) blockComment() {
	start := s.off
	startPos := s.pos(start)
	s.off += 2
	for s.off < len(s.src) {
		if s.src[s.off] == '*' && s.peek(1) == '/' {
			s.off += 2
			return
		}
		if s.src[s.off] == '\n' {
			s.off++
			s.newline()
			continue
		}
		s.off++
	}
	s.errs.add(startPos, "unterminated /* comment")
}

// directive handles a line starting with '#'. In preprocessor output these
// are line markers ("# 12 \"file.dpdf\" 2") or "#line 12 \"file\"", which
// move the position to the user's file; anything else (#pragma, and
// directives in a file read without the preprocessor, which cannot happen
// through Parse) is skipped.
func (s *scanner) directive() {
	end := strings.IndexByte(s.src[s.off:], '\n')
	var text string
	if end < 0 {
		text = s.src[s.off:]
		end = len(s.src) - s.off
	} else {
		text = s.src[s.off : s.off+end]
	}
	directivePos := s.pos(s.off)
	s.off += end
	if s.off < len(s.src) {
		s.off++ // the newline
	}
	f := strings.Fields(strings.TrimPrefix(text, "#"))
	if len(f) > 0 && f[0] == "line" {
		f = f[1:]
	}
	if s.cpp && len(f) >= 1 {
		if n, err := strconv.Atoi(f[0]); err == nil {
			if len(f) >= 2 {
				if name, err := strconv.Unquote(f[1]); err == nil {
					s.file = name
				}
			}
			s.line = n
			s.lsrc = s.off
			return
		}
	}
	if !s.cpp {
		s.errs.add(directivePos, "preprocessor directive in a file read without the preprocessor")
	}
	s.newline()
}

// keyword recognises "word =" or "word word =" at the start of a statement.
func (s *scanner) keyword() bool {
	i := s.off
	words := 0
	lastEnd := i
	for words < 2 {
		j := i
		for j < len(s.src) && isSpace(s.src[j]) {
			j++
		}
		if j >= len(s.src) || !isIdentStart(s.src[j]) {
			break
		}
		k := j
		for k < len(s.src) && isIdentChar(s.src[k]) {
			k++
		}
		words++
		lastEnd = k
		i = k
	}
	if words == 0 {
		return false
	}
	j := lastEnd
	for j < len(s.src) && isSpace(s.src[j]) {
		j++
	}
	if j >= len(s.src) || s.src[j] != '=' || (j+1 < len(s.src) && s.src[j+1] == '=') {
		return false
	}
	key := strings.Join(strings.Fields(s.src[s.off:lastEnd]), " ")
	s.emit(tokKey, key, s.off)
	s.tokens = append(s.tokens, lexer.Token{Type: tokPunct, Value: "=", Pos: s.pos(j)})
	s.off = j + 1
	s.valKey = normKey(key)
	return true
}

// label recognises "identifier:" at the start of a statement.
func (s *scanner) label() bool {
	c := s.src[s.off]
	if !isIdentStart(c) {
		return false
	}
	k := s.off
	for k < len(s.src) && isIdentChar(s.src[k]) {
		k++
	}
	j := k
	for j < len(s.src) && isSpace(s.src[j]) {
		j++
	}
	if j >= len(s.src) || s.src[j] != ':' {
		return false
	}
	s.emit(tokLabel, s.src[s.off:k], s.off)
	s.off = j + 1
	s.atStmt = true // an instruction may follow on the same line
	return true
}

// value lexes the special value forms of "name =", "offset =",
// "retprobe =", "tracepoint =" and "watch =". It reports false when the
// ordinary tokenizer should handle the value.
func (s *scanner) value() bool {
	key := s.valKey
	s.valKey = ""
	switch key {
	case "name":
		if s.src[s.off] == '"' {
			return false
		}
		start := s.off
		end := s.statementEnd(start)
		v := strings.TrimRight(s.src[start:end], " \t\r\f\v")
		if v == "" {
			return false
		}
		s.emit(tokString, v, start)
		s.off = start + len(v)
		return true
	case "tracepoint", "usdt":
		// SUBSYS:EVENT (PROVIDER:NAME), kept whole to the end of the statement so that
		// the compiler can say what is wrong in it; a value without ':'
		// is lexed as usual (and refused by the compiler)
		start := s.off
		end := s.statementEnd(start)
		v := strings.TrimRight(s.src[start:end], " \t\r\f\v")
		if !strings.Contains(v, ":") {
			return false
		}
		s.emit(tokEvent, v, start)
		s.off = start + len(v)
		return true
	case "watch":
		// EXPR,LEN,MODE: ordinary tokens with Sep between the parts;
		// a source line is lexed as offset's, for the compiler to
		// refuse
		s.parts, s.depth = true, 0
		fallthrough
	case "offset", "retprobe":
		start := s.off
		k := start
		for k < len(s.src) && (isIdentChar(s.src[k]) || strings.IndexByte("./+-", s.src[k]) >= 0) {
			k++
		}
		if k == start || k >= len(s.src) || s.src[k] != ':' {
			return false
		}
		d := k + 1
		for d < len(s.src) && s.src[d] >= '0' && s.src[d] <= '9' {
			d++
		}
		if d == k+1 || d < len(s.src) && isIdentChar(s.src[d]) {
			return false
		}
		s.emit(tokSrcLine, s.src[start:d], start)
		s.off = d
		return true
	}
	return false
}

// statementEnd is the offset where the statement holding start ends: at
// a newline, a ';' or a comment.
func (s *scanner) statementEnd(start int) int {
	end := start
	for end < len(s.src) {
		c := s.src[end]
		if c == '\n' || c == ';' || c == '/' && end+1 < len(s.src) && (s.src[end+1] == '/' || s.src[end+1] == '*') {
			break
		}
		end++
	}
	return end
}

// token lexes one ordinary token.
func (s *scanner) token() {
	start := s.off
	c := s.src[start]
	switch {
	case isIdentStart(c):
		k := start
		for k < len(s.src) && isIdentChar(s.src[k]) {
			k++
		}
		// inner dots: foo.isra.0, foo.cold
		for k+1 < len(s.src) && s.src[k] == '.' && isIdentChar(s.src[k+1]) {
			k++
			for k < len(s.src) && isIdentChar(s.src[k]) {
				k++
			}
		}
		s.emit(tokIdent, s.src[start:k], start)
		s.off = k
	case c >= '0' && c <= '9':
		k := start
		for k < len(s.src) && isIdentChar(s.src[k]) {
			k++
		}
		s.emit(tokInt, s.src[start:k], start)
		s.off = k
	case c == '\'' || c == '"':
		k := start + 1
		for k < len(s.src) && s.src[k] != c && s.src[k] != '\n' {
			if s.src[k] == '\\' && k+1 < len(s.src) && s.src[k+1] != '\n' {
				k++
			}
			k++
		}
		if k >= len(s.src) || s.src[k] != c {
			if c == '"' {
				s.errorf(start, "unterminated string")
			} else {
				s.errorf(start, "unterminated character constant")
			}
			s.skipStatement()
			return
		}
		t := tokChar
		if c == '"' {
			t = tokString
		}
		s.emit(t, s.src[start:k+1], start)
		s.off = k + 1
	case (c == '<' || c == '>') && s.peek(1) == c:
		s.emit(tokPunct, s.src[start:start+2], start)
		s.off += 2
	case c == ',' && s.parts && s.depth == 0:
		s.emit(tokSep, ",", start)
		s.off++
	case strings.IndexByte("+-*/%&|^~(),[].=", c) >= 0:
		if s.parts && c == '(' {
			s.depth++
		} else if s.parts && c == ')' && s.depth > 0 {
			s.depth--
		}
		s.emit(tokPunct, s.src[start:start+1], start)
		s.off++
	default:
		r, n := utf8.DecodeRuneInString(s.src[start:])
		switch {
		case r == '\ufeff':
			s.errorf(start, "byte order mark (U+FEFF) inside the file: only the first bytes of a file may be one; remove it")
		case r == utf8.RuneError && n == 1:
			s.errorf(start, "unexpected byte 0x%02x: not UTF-8 text", c)
		case r < 0x20 || r >= 0x7f && r <= 0x9f:
			s.errorf(start, "unexpected control character %q", r)
		case r >= 0x80:
			s.errorf(start, "unexpected character %q (U+%04X)", r, r)
		default:
			s.errorf(start, "unexpected character '%c'", c)
		}
		s.skipStatement()
	}
}

// skipStatement skips the rest of a statement after a lexical error and
// marks it with a tokBad, so the parser does not report the same mistake
// a second time.
func (s *scanner) skipStatement() {
	s.tokens = append(s.tokens, lexer.Token{Type: tokBad, Pos: s.pos(s.off)})
	s.pending = true
	for s.off < len(s.src) && s.src[s.off] != '\n' && s.src[s.off] != ';' {
		s.off++
	}
	s.atStmt = true
	s.valKey = ""
	s.parts = false
}

// normKey folds a keyword to its canonical spelling: lower case, without
// spaces or underscores ("Pass Count", "pass_count" -> "passcount").
func normKey(k string) string {
	b := make([]byte, 0, len(k))
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c == ' ' || c == '\t' || c == '_':
			continue
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return string(b)
}

// lexDef adapts the scanner's token slice to participle.
type lexDef struct{}

func (lexDef) Symbols() map[string]lexer.TokenType { return tokenSymbols() }

func (lexDef) Lex(string, io.Reader) (lexer.Lexer, error) {
	return nil, errors.New("dpdf: the grammar is fed pre-lexed tokens; use dpdf.Parse")
}

type sliceLexer struct {
	toks []lexer.Token
	i    int
}

func (l *sliceLexer) Next() (lexer.Token, error) {
	if l.i >= len(l.toks) {
		return lexer.Token{Type: tokEOF}, nil
	}
	t := l.toks[l.i]
	l.i++
	return t, nil
}
