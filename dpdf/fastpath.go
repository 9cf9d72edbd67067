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
		"vfy_rw": true, "dup": true, "xchg": true, "log_st": true}
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

// trivialExpr builds the Expr of a one-token expression (a number, a
// character or a symbol) as the grammar would, without running it: most
// expressions in a DPDF are one token.
func trivialExpr(toks []lexer.Token) (*Expr, bool) {
	if len(toks) != 1 {
		return nil, false
	}
	return flatExpr(toks)
}

// flatExpr builds the Expr of operands joined by binary operators, without
// parentheses, prefix operators, sizeof or offsetof (func+0x10, a|b<<3),
// as the grammar would, without running it.
func flatExpr(toks []lexer.Token) (*Expr, bool) {
	if len(toks)%2 == 0 {
		return nil, false
	}
	head, ok := operand(toks[0])
	if !ok {
		return nil, false
	}
	e := &Expr{Pos: toks[0].Pos, Tokens: toks[:len(toks):len(toks)], Head: head}
	for i := 1; i < len(toks); i += 2 {
		op := toks[i]
		if op.Type != tokPunct || !binaryOps[op.Value] {
			return nil, false
		}
		y, ok := operand(toks[i+1])
		if !ok {
			return nil, false
		}
		e.Tail = append(e.Tail, &BinOp{Pos: op.Pos, Op: op.Value, Y: y})
	}
	return e, true
}

// binaryOps are the operators of BinOp.
var binaryOps = map[string]bool{"|": true, "^": true, "&": true, "<<": true, ">>": true, "+": true, "-": true, "*": true, "/": true, "%": true}

// operand builds the Unary of a one-token operand: a number, a character
// or a symbol.
func operand(t lexer.Token) (*Unary, bool) {
	v := t.Value
	p := &Primary{Pos: t.Pos}
	switch t.Type {
	case tokInt:
		p.Num = &v
	case tokChar:
		p.Char = &v
	case tokIdent:
		if strings.EqualFold(v, "sizeof") || strings.EqualFold(v, "offsetof") {
			return nil, false
		}
		p.Sym = &v
	default:
		return nil, false
	}
	return &Unary{Pos: t.Pos, Primary: p}, true
}

// expr parses an expression, the flat case without the grammar.
func expr(toks []lexer.Token) (*Expr, bool) {
	if e, ok := flatExpr(toks); ok {
		return e, true
	}
	return parseProd(exprProd, toks)
}

// isWord reports whether t is the identifier w, in any case.
func isWord(t lexer.Token, w string) bool { return t.Type == tokIdent && strings.EqualFold(t.Value, w) }

// fastKV parses "key = value" with a one-token value or a flat
// expression.
func fastKV(toks []lexer.Token) (*KeyValue, bool) {
	if len(toks) < 3 || toks[1].Type != tokPunct || toks[1].Value != "=" {
		return parseProd(kvProd, toks)
	}
	if len(toks) > 3 {
		e, ok := flatExpr(toks[2:])
		if !ok {
			return parseProd(kvProd, toks)
		}
		v := &Value{Pos: toks[2].Pos, Tokens: e.Tokens, Expr: e}
		return &KeyValue{Pos: toks[0].Pos, Key: toks[0].Value, Value: v}, true
	}
	t := toks[2]
	v := &Value{Pos: t.Pos, Tokens: []lexer.Token{t}}
	val := t.Value
	switch t.Type {
	case tokString:
		v.Str = &val
	case tokSrcLine:
		v.Line = &val
	case tokEvent:
		v.Event = &val
	default:
		e, ok := trivialExpr(toks[2:])
		if !ok {
			return parseProd(kvProd, toks)
		}
		v.Expr = e
	}
	return &KeyValue{Pos: toks[0].Pos, Key: toks[0].Value, Value: v}, true
}

// fastPush handles the common operand forms "d,X", "r,REG", "field,NAME",
// "lv,I" and "iv,I" with a one-token X, and hands anything else to the
// push production.
func fastPush(toks []lexer.Token) (*PushOperand, bool) {
	switch {
	case len(toks) == 1 && toks[0].Type == tokIdent && pushSys[strings.ToLower(toks[0].Value)]:
		return &PushOperand{Pos: toks[0].Pos, Sys: toks[0].Value}, true
	case len(toks) == 1 && isWord(toks[0], "mrf"):
		return &PushOperand{Pos: toks[0].Pos, MrfKw: true}, true
	case len(toks) > 3 && isWord(toks[0], "d") && isComma(toks[1]):
		if e, ok := flatExpr(toks[2:]); ok {
			return &PushOperand{Pos: toks[0].Pos, Const: e}, true
		}
	}
	if len(toks) == 3 && toks[1].Value == "," && toks[1].Type == tokPunct {
		op := &PushOperand{Pos: toks[0].Pos}
		switch {
		case isWord(toks[0], "d"):
			e, ok := trivialExpr(toks[2:])
			op.Const = e
			if ok {
				return op, true
			}
		case isWord(toks[0], "r") || isWord(toks[0], "u"):
			if toks[2].Type == tokIdent {
				op.Reg = &RegRef{Pos: toks[0].Pos, Set: toks[0].Value, Name: &Name{Pos: toks[2].Pos, Value: toks[2].Value}}
				return op, true
			}
		case isWord(toks[0], "field"):
			if toks[2].Type == tokIdent {
				op.Field = &Name{Pos: toks[2].Pos, Value: toks[2].Value}
				return op, true
			}
		case isWord(toks[0], "lv") || isWord(toks[0], "gv"):
			e, ok := trivialExpr(toks[2:])
			op.Var = &VarRef{Pos: toks[0].Pos, Space: toks[0].Value, Index: e}
			if ok {
				return op, true
			}
		case isWord(toks[0], "iv"):
			e, ok := trivialExpr(toks[2:])
			op.IV = e
			if ok {
				return op, true
			}
		case isWord(toks[0], "arg"):
			e, ok := trivialExpr(toks[2:])
			op.Arg = e
			if ok {
				return op, true
			}
		case isWord(toks[0], "mrf"):
			e, ok := trivialExpr(toks[2:])
			op.MrfKw, op.Size = true, e
			if ok {
				return op, true
			}
		}
	}
	return parseProd(pushProd, toks)
}

// pushSys are the words of "push WORD" (PushOperand.Sys).
var pushSys = map[string]bool{"pid": true, "tid": true, "procid": true, "task": true, "ts": true, "lp": true}

func isComma(t lexer.Token) bool { return t.Type == tokPunct && t.Value == "," }

// fastVarRef handles "lv", "gv", "lv,I" and "gv,I" with a one-token I.
func fastVarRef(toks []lexer.Token) (*VarRef, bool) {
	if len(toks) >= 1 && (isWord(toks[0], "lv") || isWord(toks[0], "gv")) {
		v := &VarRef{Pos: toks[0].Pos, Space: toks[0].Value}
		if len(toks) == 1 {
			return v, true
		}
		if len(toks) == 3 && isComma(toks[1]) {
			if e, ok := trivialExpr(toks[2:]); ok {
				v.Index = e
				return v, true
			}
		}
	}
	return parseProd(varProd, toks)
}

// fastPop handles "pop lp", "pop mrf", "pop r,REG", "pop u,REG" and the
// forms of fastVarRef.
func fastPop(toks []lexer.Token) (*PopOperand, bool) {
	switch {
	case len(toks) == 1 && isWord(toks[0], "lp"):
		return &PopOperand{Pos: toks[0].Pos, LP: true}, true
	case len(toks) == 1 && isWord(toks[0], "mrf"):
		return &PopOperand{Pos: toks[0].Pos, MrfKw: true}, true
	case len(toks) == 3 && (isWord(toks[0], "r") || isWord(toks[0], "u")) && isComma(toks[1]) && toks[2].Type == tokIdent:
		return &PopOperand{Pos: toks[0].Pos, Reg: &RegRef{Pos: toks[0].Pos, Set: toks[0].Value, Name: &Name{Pos: toks[2].Pos, Value: toks[2].Value}}}, true
	case len(toks) >= 1 && (isWord(toks[0], "lv") || isWord(toks[0], "gv")):
		if v, ok := fastVarRef(toks); ok {
			return &PopOperand{Pos: toks[0].Pos, Var: v}, true
		}
	}
	return parseProd(popProd, toks)
}

// fastLog handles "log str", "log mrf", "log ustack", "log kstack" and
// "log N" with a one-token N.
func fastLog(toks []lexer.Token) (*LogOperand, bool) {
	if len(toks) == 1 {
		switch t := toks[0]; {
		case isWord(t, "str"):
			return &LogOperand{Pos: t.Pos, Str: true}, true
		case isWord(t, "mrf"):
			return &LogOperand{Pos: t.Pos, Mrf: true}, true
		case isWord(t, "ustack") || isWord(t, "kstack"):
			return &LogOperand{Pos: t.Pos, Stack: t.Value}, true
		case !isWord(t, "lv") && !isWord(t, "gv"):
			if e, ok := trivialExpr(toks); ok {
				return &LogOperand{Pos: t.Pos, Words: e}, true
			}
		}
	}
	return parseProd(logProd, toks)
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
		kv, ok := fastKV(toks)
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
		e, good := expr(rest)
		ok = ok && good
		return e
	}
	switch {
	case mn == "push":
		in.Push, ok = fastPush(rest)
	case mn == "pop":
		in.PopKw = true
		if len(rest) > 0 {
			in.Pop, ok = fastPop(rest)
		}
	case mn == "log":
		in.Log, ok = fastLog(rest)
	case mn == "move" || mn == "inc" || mn == "dec":
		in.VarOp = word
		in.VarRef, ok = fastVarRef(rest)
	case jumpWords[mn]:
		var label *Name
		if len(rest) == 1 && rest[0].Type == tokIdent {
			label = &Name{Pos: rest[0].Pos, Value: rest[0].Value}
		} else {
			label, ok = parseProd(nameProd, rest)
		}
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
		in.Ros, ok = expr(rest)
	case mn == "enable" || mn == "disable":
		in.Switch = word
		in.Minor, ok = expr(rest)
	case simpleOps[mn]:
		in.Simple = word
		ok = len(rest) == 0
	default:
		ok = false
	}
	return in, ok
}
