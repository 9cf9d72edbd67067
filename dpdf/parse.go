package dpdf

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"
)

// Options controls how a DPDF is read.
type Options struct {
	Defines  []string // -D NAME[=VALUE], for the C preprocessor
	Includes []string // -I DIR, for the C preprocessor
	CPP      string   // preprocessor command line; empty chooses $GPROBES_CPP, cpp, gcc -E or cc -E
	// NoPreprocessor refuses '#' directives instead of running the
	// preprocessor (for fuzzing and for untrusted input).
	NoPreprocessor bool
}

// File is a parsed DPDF: its header keywords and its probes, each with
// its keywords and program, in file order.
type File struct {
	Path         string
	Header       []*KeyValue
	Probes       []*ProbeDef
	Deps         []string // files read: the DPDF, then every #include, in order of first use
	Preprocessed bool
	// Errors holds the syntax errors found while parsing. A File with
	// errors is still returned, so a compiler can report its own errors
	// on the statements that did parse, all in one list.
	Errors ErrorList

	src *sources
}

// ProbeDef is one probe: the line that starts it, its keywords and its
// program.
type ProbeDef struct {
	Pos lexer.Position
	// Offset is the line that starts the probe: "offset = LOC",
	// "retprobe = SYMBOL", "tracepoint = SUBSYS:EVENT", "watch =
	// EXPR,LEN,MODE" or "usdt = PROVIDER:NAME" (Offset.Norm() says which;
	// see StartKeys).
	Offset *KeyValue
	Keys   []*KeyValue
	Body   []*Stmt // labels and instructions
}

// StartKeys are the keywords that start a probe, one per probe kind
// (docs/language.md, "Probe kinds"), in canonical spelling.
var StartKeys = []string{"offset", "retprobe", "tracepoint", "watch", "usdt"}

// probeStart is what messages say a probe starts with.
const probeStart = `a probe starts with "offset = LOCATION", "retprobe = SYMBOL", "tracepoint = SUBSYS:EVENT", "watch = ADDRESS,LEN,MODE" or "usdt = PROVIDER:NAME"`

// Header keywords and probe keywords, in canonical (normKey) spelling.
var (
	headerKeys = []string{"name", "modtype", "major", "jmpmax", "logmax", "dfltexit", "vars", "gvars", "arch", "autostacktrace"}
	probeKeys  = []string{"offset", "retprobe", "tracepoint", "watch", "usdt", "opcode", "minor", "passcount", "maxhits", "logonfault", "maxactive", "enabled", "format", "autostacktrace"}
	// spelling used in messages
	keyDisplay = map[string]string{"passcount": "pass count", "maxhits": "max hits"}
)

// KeyName is the canonical spelling of a keyword for messages.
func KeyName(norm string) string {
	if d, ok := keyDisplay[norm]; ok {
		return d
	}
	return norm
}

// Norm returns the canonical form of the keyword: lower case, without
// spaces or underscores.
func (kv *KeyValue) Norm() string { return normKey(kv.Key) }

// Parse reads and parses the DPDF at path. Lines starting with '#' send
// the file through the C preprocessor first. The error is an ErrorList
// holding every error found, or an I/O error.
func Parse(path string, opts Options) (*File, error) {
	text, regular, err := readText(path)
	if err != nil {
		return nil, fmt.Errorf("read DPDF: %w", err)
	}
	return parse(path, text, opts, regular)
}

// ParseSource parses DPDF text held in memory; name is used in positions.
// Preprocessing reads the text from a temporary copy, so #include "x"
// resolves against -I directories and the current directory.
func ParseSource(name string, src []byte, opts Options) (*File, error) {
	return parse(name, string(src), opts, false)
}

func parse(path string, text string, opts Options, onDisk bool) (*File, error) {
	r, err := newReader(path, text, opts, onDisk)
	if err != nil {
		return nil, err
	}
	f := &File{Path: path, Deps: r.Deps, Preprocessed: r.Preprocessed, src: r.src}
	var cur *ProbeDef
	for {
		it, ok := r.Next()
		if !ok {
			break
		}
		switch {
		case it.Header != nil:
			f.Header = append(f.Header, it.Header)
		case it.Probe != nil:
			cur = it.Probe
			f.Probes = append(f.Probes, cur)
		case it.Key != nil:
			cur.Keys = append(cur.Keys, it.Key)
		case it.Stmt != nil:
			cur.Body = append(cur.Body, it.Stmt)
		}
	}
	errs := r.Errors()
	r.Finish(&errs)
	f.Errors = errs
	if len(errs) > 0 {
		return f, errs
	}
	return f, nil
}

// hasDirectives reports whether any line starts with '#'.
func hasDirectives(s string) bool {
	for len(s) > 0 {
		i := 0
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i < len(s) && s[i] == '#' {
			return true
		}
		nl := strings.IndexByte(s, '\n')
		if nl < 0 {
			return false
		}
		s = s[nl+1:]
	}
	return false
}

// fixColumns recovers the columns of tokens in preprocessor output, which
// collapses runs of blanks: each token is looked up, left to right, in the
// original line. A token that a macro produced keeps the column of the
// preprocessed text. cur is where the search stands in the line of the
// last token, kept from one batch of tokens to the next.
func fixColumns(toks []lexer.Token, src *sources, cur *columnCursor) {
	for i := range toks {
		t := &toks[i]
		if t.Type == tokEOL || t.Type == tokEOF || t.Type == tokBad {
			continue
		}
		k := lineKey{t.Pos.Filename, t.Pos.Line}
		if k != cur.key {
			*cur = columnCursor{key: k}
		}
		orig := src.line(k.file, k.line)
		if orig == "" {
			continue
		}
		needle := t.Value
		if t.Type == tokKey {
			needle = strings.Fields(t.Value)[0]
		}
		if cur.from > len(orig) {
			continue
		}
		if j := strings.Index(orig[cur.from:], needle); j >= 0 {
			t.Pos.Column = cur.from + j + 1
			cur.from += j + len(needle)
		}
	}
}

// columnCursor is where fixColumns stands: a line and an offset in it.
type columnCursor struct {
	key  lineKey
	from int
}

// parseStatements parses each statement (the tokens up to an EOL) with the
// participle grammar, collecting the errors of every statement. Statements
// are independent, so large files are parsed on every CPU.
func parseStatements(toks []lexer.Token, text string, errs *ErrorList) []*Stmt {
	var lines [][]lexer.Token
	start := 0
	for i, t := range toks {
		if t.Type == tokEOL {
			lines = append(lines, toks[start:i+1])
			start = i + 1
		}
	}
	stmts := make([]*Stmt, len(lines))
	lineErrs := make([]ErrorList, len(lines))
	parse := func(from, to int) {
		for i := from; i < to; i++ {
			stmts[i] = parseStatement(lines[i], text, &lineErrs[i])
		}
	}
	workers := runtime.GOMAXPROCS(0)
	if len(lines) < 512 || workers < 2 {
		parse(0, len(lines))
	} else {
		var wg sync.WaitGroup
		chunk := (len(lines) + workers - 1) / workers
		for from := 0; from < len(lines); from += chunk {
			wg.Add(1)
			go func(from, to int) {
				defer wg.Done()
				parse(from, to)
			}(from, min(from+chunk, len(lines)))
		}
		wg.Wait()
	}
	out := stmts[:0]
	for i, st := range stmts {
		*errs = append(*errs, lineErrs[i]...)
		if st != nil {
			out = append(out, st)
		}
	}
	return out
}

// parseStatement parses one statement, or reports why it cannot. A
// statement that fails keeps what the rest of the file depends on, so one
// mistake is one error: its label, which jumps name, and its keyword, which
// decides where a probe starts (with a nil Value).
func parseStatement(line []lexer.Token, text string, errs *ErrorList) *Stmt {
	for _, t := range line {
		if t.Type == tokBad {
			return brokenStatement(line) // the lexer reported it
		}
	}
	if pos, ok := checkNesting(line); !ok {
		errs.add(pos, nestingMsg, MaxNesting)
		return brokenStatement(line)
	}
	if st, ok := fastStatement(line); ok {
		fillText(st, text)
		return st
	}
	eof := lexer.Token{Type: tokEOF, Pos: line[len(line)-1].Pos}
	pl, _ := lexer.Upgrade(&sliceLexer{toks: append(line[:len(line):len(line)], eof)})
	st, err := stmtParser.ParseFromLexer(pl)
	if err != nil {
		whole := line
		if line[0].Type == tokLabel && len(line) > 2 {
			// "label: instr" fails on the instruction; parse it alone
			// for the error inside it rather than "expected end".
			pl, _ := lexer.Upgrade(&sliceLexer{toks: append(line[1:len(line):len(line)], eof)})
			if _, ierr := stmtParser.ParseFromLexer(pl); ierr != nil {
				err = ierr
				line = line[1:]
			}
		}
		errs.addParse(err, line)
		return brokenStatement(whole)
	}
	fillText(st, text)
	return st
}

// brokenStatement is what remains of a statement that failed to parse:
// its label, or its keyword without a value, or nothing.
func brokenStatement(line []lexer.Token) *Stmt {
	switch first := line[0]; first.Type {
	case tokLabel:
		return &Stmt{Pos: first.Pos, Label: &Label{Pos: first.Pos, Name: first.Value}, broken: true}
	case tokKey:
		return &Stmt{Pos: first.Pos, KV: &KeyValue{Pos: first.Pos, Key: first.Value}, broken: true}
	}
	return nil
}

// fillText sets Value.Text and Value.Head to the value as written.
func fillText(st *Stmt, text string) {
	if st.KV == nil || st.KV.Value == nil {
		return
	}
	v := st.KV.Value
	v.Text = tokenText(v.Tokens, text)
	v.Head = v.Text
	for i, t := range v.Tokens {
		if t.Type == tokSep {
			v.Head = tokenText(v.Tokens[:i], text)
			break
		}
	}
}

// tokenText returns the source text spanned by toks.
func tokenText(toks []lexer.Token, text string) string {
	if len(toks) == 0 {
		return ""
	}
	first, last := toks[0], toks[len(toks)-1]
	for last.Type == tokEOL && len(toks) > 1 {
		toks = toks[:len(toks)-1]
		last = toks[len(toks)-1]
	}
	a, b := first.Pos.Offset, last.Pos.Offset+len(last.Value)
	if a < 0 || b > len(text) || a > b {
		var s []string
		for _, t := range toks {
			s = append(s, t.Value)
		}
		return strings.Join(s, " ")
	}
	return text[a:b]
}

// Text returns the expression as written.
func (e *Expr) Text() string {
	var b strings.Builder
	prev := -1
	for _, t := range e.Tokens {
		if prev >= 0 && t.Pos.Offset > prev {
			b.WriteByte(' ')
		}
		b.WriteString(t.Value)
		prev = t.Pos.Offset + len(t.Value)
	}
	return b.String()
}

// mnemonics lists every instruction word, for suggestions.
var mnemonics = []string{"push", "pop", "log", "move", "inc", "dec", "jmp", "jz", "jnz", "jlt", "jle", "jgt", "jge",
	"loop", "call", "ret", "exit", "abort", "rem", "nop", "setmaj", "setmin", "add", "sub", "mul", "div", "idiv",
	"and", "or", "xor", "not", "neg", "shl", "shr", "sar", "rol", "ror", "vfy_r", "vfy_rw", "dup", "xchg", "ros",
	"enable", "disable", "log_st"}

// addParse turns a participle error into a positioned error with a
// message a user can act on.
func (l *ErrorList) addParse(err error, line []lexer.Token) {
	var perr participle.Error
	if !errors.As(err, &perr) {
		l.add(line[0].Pos, "%v", err)
		return
	}
	pos := perr.Position()
	first := line[0]
	if first.Type == tokLabel && len(line) > 1 {
		first = line[1]
	}
	if pos == first.Pos {
		switch first.Type {
		case tokIdent:
			if contains(mnemonics, strings.ToLower(first.Value)) {
				break // a known instruction with bad operands
			}
			msg := fmt.Sprintf("unknown instruction %q", first.Value)
			if s := suggest(strings.ToLower(first.Value), mnemonics); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			l.add(pos, "%s", msg)
			return
		case tokKey:
			// keyword lines fail on their value
		default:
			l.add(pos, "expected an instruction, a label or \"keyword = value\", found %s", describe(first))
			return
		}
	}
	var ut *participle.UnexpectedTokenError
	if errors.As(err, &ut) {
		tok := ut.Unexpected
		what := describe(tok)
		if tok.Type != tokEOL && tok.Type != tokEOF && completeBefore(line, tok) {
			l.add(pos, "unexpected %s after a complete statement", what)
			return
		}
		if tok.Type == tokEOL || tok.Type == tokEOF {
			l.add(pos, "unexpected end of statement: %s", expectedAfter(line, tok))
			return
		}
		l.add(pos, "unexpected %s: %s", what, expectedAfter(line, tok))
		return
	}
	l.add(pos, "%s", perr.Message())
}

// completeBefore reports whether the tokens of line before tok form a
// complete statement on their own.
func completeBefore(line []lexer.Token, tok lexer.Token) bool {
	var head []lexer.Token
	for _, t := range line {
		if t.Pos == tok.Pos {
			break
		}
		head = append(head, t)
	}
	if len(head) == 0 || len(head) == len(line) {
		return false
	}
	head = append(head, lexer.Token{Type: tokEOL, Pos: tok.Pos}, lexer.Token{Type: tokEOF, Pos: tok.Pos})
	pl, err := lexer.Upgrade(&sliceLexer{toks: head})
	if err != nil {
		return false
	}
	_, err = stmtParser.ParseFromLexer(pl)
	return err == nil
}

// describe names a token for a message.
func describe(t lexer.Token) string {
	switch t.Type {
	case tokEOL, tokEOF:
		return "end of statement"
	case tokIdent:
		return fmt.Sprintf("%q", t.Value)
	case tokInt:
		return "number " + t.Value
	case tokKey:
		return fmt.Sprintf("keyword %q", t.Value)
	case tokLabel:
		return fmt.Sprintf("label %q", t.Value)
	case tokSrcLine:
		return "source line " + t.Value
	case tokEvent:
		return "event " + t.Value
	case tokSep:
		return `","`
	}
	return fmt.Sprintf("%q", t.Value)
}

// expectedAfter says what the instruction or keyword that begins line
// takes, for parse errors inside it.
func expectedAfter(line []lexer.Token, at lexer.Token) string {
	first := line[0]
	if first.Type == tokLabel && len(line) > 1 {
		first = line[1]
	}
	if first.Type == tokKey {
		if normKey(first.Value) == "watch" {
			return "watch takes ADDRESS,LEN,MODE, such as jiffies,8,w"
		}
		return fmt.Sprintf("%s takes one value", first.Value)
	}
	if first.Type != tokIdent {
		return "malformed statement"
	}
	syn, ok := syntax[strings.ToLower(first.Value)]
	if !ok {
		return "malformed statement"
	}
	return "expected " + syn
}

// syntax is the operand summary of each instruction, for messages.
var syntax = map[string]string{
	"push":   "push r,REG | u,REG | d,EXPR | lv[,I] | gv[,I] | iv,I | mrf[,SIZE] | io,SIZE | field,NAME | arg,N | pid | tid | procid | task | ts | lp",
	"pop":    "pop | pop r,REG | u,REG | lv[,I] | gv[,I] | iv,I | mrf[,SIZE] | io,SIZE | lp",
	"log":    "log N | log str | log mrf | log lv,I,N | log gv,I,N | log ustack[,N] | log kstack[,N]",
	"move":   "move lv[,I] | move gv[,I]",
	"inc":    "inc lv[,I] | inc gv[,I]",
	"dec":    "dec lv[,I] | dec gv[,I]",
	"exit":   "exit [N]",
	"setmaj": "setmaj [N]",
	"setmin": "setmin [N]",
	"shl":    "shl [N]", "shr": "shr [N]", "sar": "sar [N]", "rol": "rol [N]", "ror": "ror [N]",
	"ros":    "ros N",
	"enable": "enable MINOR", "disable": "disable MINOR",
}

func init() {
	for _, j := range []string{"jmp", "jz", "jnz", "jlt", "jle", "jgt", "jge", "loop", "call"} {
		syntax[j] = j + " LABEL"
	}
	for _, s := range []string{"nop", "ret", "abort", "rem", "add", "sub", "mul", "div", "idiv", "and", "or",
		"xor", "not", "neg", "vfy_r", "vfy_rw", "dup", "xchg", "log_st"} {
		syntax[s] = s + " takes no operand"
	}
}

// HasErrorsIn reports whether a syntax error lies in lines [from, to) of
// file; to = 0 means to the end of the file.
func (f *File) HasErrorsIn(file string, from, to int) bool {
	for _, e := range f.Errors {
		if e.Pos.Filename == file && e.Pos.Line >= from && (to == 0 || e.Pos.Line < to) {
			return true
		}
	}
	return false
}

// Finish sorts errs and attaches source lines for caret displays.
func (f *File) Finish(errs *ErrorList) {
	errs.Sort()
	f.src.annotate(*errs)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// suggest returns the closest word of list within edit distance 2 of w.
func suggest(w string, list []string) string {
	best, bestD := "", 3
	for _, c := range list {
		if d := editDistance(w, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// Suggest returns the closest candidate to w within a small edit
// distance, or "".
func Suggest(w string, candidates []string) string { return suggest(w, candidates) }

func editDistance(a, b string) int {
	if a == b {
		return 0
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// ParseExpr parses a constant expression on its own, such as a location
// stored in a PPDF, for evaluation at insert time.
func ParseExpr(text string) (Node, error) {
	var errs ErrorList
	sc := newScanner("expr", text, false, &errs)
	sc.atStmt = false
	toks := sc.scan()
	if len(errs) > 0 {
		return nil, errs
	}
	if len(toks) < 2 {
		return nil, fmt.Errorf("empty expression")
	}
	body := toks[:len(toks)-2] // drop EOL and EOF
	if pos, ok := checkNesting(body); !ok {
		errs.add(pos, nestingMsg, MaxNesting)
		return nil, errs
	}
	eof := lexer.Token{Type: tokEOF}
	pl, _ := lexer.Upgrade(&sliceLexer{toks: append(body[:len(body):len(body)], eof)})
	e, err := exprParser.ParseFromLexer(pl)
	if err != nil {
		return nil, fmt.Errorf("parse expression %q: %v", text, err)
	}
	n := e.Tree(&errs)
	if len(errs) > 0 {
		return nil, errs
	}
	return n, nil
}

var exprParser = participle.MustBuild[Expr](
	participle.Lexer(lexDef{}),
	participle.CaseInsensitive("Ident"),
	participle.UseLookahead(2),
)
