package dpdf

import (
	"strings"

	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"
)

// Statement parsing dispatches on the first token (a keyword, a label or a
// mnemonic) to the participle parser of that instruction's operands, a
// production of the same grammar as Stmt. Trying every alternative of Stmt
// costs participle a branch per alternative and dominated the time to
// check a 1,000-probe file (about 8 us per statement). When the fast path
// fails, the statement is parsed again with the whole Stmt grammar, whose
// error is the one reported; the fast path builds exactly the AST the Stmt
// grammar does, which TestFastPathMatchesGrammar checks.

var (
	kvProd    = production[KeyValue]()
	pushProd  = production[PushOperand]()
	popProd   = production[PopOperand]()
	logProd   = production[LogOperand]()
	varProd   = production[VarRef]()
	nameProd  = production[Name]()
	exprProd  = production[Expr]()
	jumpWords = map[string]bool{"jmp": true, "jz": true, "jnz": true, "jlt": true, "jle": true, "jgt": true, "jge": true, "loop": true, "call": true}
	simpleOps = map[string]bool{"nop": true, "ret": true, "abort": true, "rem": true, "add": true, "sub": true, "mul": true,
		"div": true, "idiv": true, "and": true, "or": true, "xor": true, "not": true, "neg": true, "vfy_r": true,
		"vfy_rw": true, "dup": true, "xchg": true}
)

func production[P any]() *participle.Parser[P] {
	p, err := participle.ParserForProduction[P](stmtParser)
	if err != nil {
		panic(err) // the productions are part of the static grammar
	}
	return p
}

// parseProd parses toks (without EOL) as production P.
func parseProd[P any](p *participle.Parser[P], toks []lexer.Token) (*P, bool) {
	if len(toks) == 0 {
		return nil, false
	}
	last := toks[len(toks)-1]
	eof := lexer.Token{Type: tokEOF, Pos: last.Pos}
	pl, err := lexer.Upgrade(&sliceLexer{toks: append(toks[:len(toks):len(toks)], eof)})
	if err != nil {
		return nil, false
	}
	v, err := p.ParseFromLexer(pl)
	if err != nil {
		return nil, false
	}
	return v, true
}

// fastStatement parses one statement (its tokens, ending with EOL) by
// dispatching on its first token. It reports false when it cannot, and the
// caller then uses the full grammar.
func fastStatement(line []lexer.Token) (*Stmt, bool) {
	toks := line[:len(line)-1] // drop EOL
	if len(toks) == 0 {
		return nil, false
	}
	st := &Stmt{Pos: toks[0].Pos}
	switch toks[0].Type {
	case tokKey:
		kv, ok := parseProd(kvProd, toks)
		st.KV = kv
		return st, ok
	case tokLabel:
		st.Label = &Label{Pos: toks[0].Pos, Name: toks[0].Value}
		toks = toks[1:]
		if len(toks) == 0 {
			return st, true
		}
	}
	if toks[0].Type != tokIdent {
		return nil, false
	}
	in, ok := fastInstr(toks)
	st.Instr = in
	return st, ok
}

func fastInstr(toks []lexer.Token) (*Instr, bool) {
	word := toks[0].Value
	mn := strings.ToLower(word)
	rest := toks[1:]
	in := &Instr{Pos: toks[0].Pos}
	ok := true
	optExpr := func() *Expr {
		if len(rest) == 0 {
			return nil
		}
		e, good := parseProd(exprProd, rest)
		ok = ok && good
		return e
	}
	switch {
	case mn == "push":
		in.Push, ok = parseProd(pushProd, rest)
	case mn == "pop":
		in.PopKw = true
		if len(rest) > 0 {
			in.Pop, ok = parseProd(popProd, rest)
		}
	case mn == "log":
		in.Log, ok = parseProd(logProd, rest)
	case mn == "move" || mn == "inc" || mn == "dec":
		in.VarOp = word
		in.VarRef, ok = parseProd(varProd, rest)
	case jumpWords[mn]:
		var label *Name
		label, ok = parseProd(nameProd, rest)
		in.Jump = &Jump{Pos: toks[0].Pos, Op: word, Label: label}
	case mn == "exit":
		in.ExitKw = true
		in.Exit = optExpr()
	case mn == "setmaj" || mn == "setmin":
		in.SetOp = word
		in.SetArg = optExpr()
	case mn == "shl" || mn == "shr" || mn == "sar" || mn == "rol" || mn == "ror":
		in.Shift = word
		in.Count = optExpr()
	case mn == "ros":
		in.Ros, ok = parseProd(exprProd, rest)
	case simpleOps[mn]:
		in.Simple = word
		ok = len(rest) == 0
	default:
		ok = false
	}
	return in, ok
}
