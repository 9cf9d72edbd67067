package dpdf

import (
	"github.com/alecthomas/participle/v2/lexer"
)

// MaxNesting bounds how deeply a constant expression nests: parentheses
// and brackets, unary operators, and binary operators applied to the
// result of another operation each count one level. Real expressions nest
// a handful of levels; the bound keeps every recursive walk of an
// expression (the grammar, Eval, External, String) far from the Go stack
// limit on hostile input, such as 200,000 nested parentheses.
const MaxNesting = 256

// nestingMsg is the message of an expression nested past MaxNesting.
const nestingMsg = "expression nested too deeply: at most %d levels of parentheses and operators"

// checkNesting scans the tokens of one statement (or of one expression)
// and returns the position of the first token that opens a level past
// MaxNesting: a '(' or '[' or a unary operator. It runs before the
// grammar, whose parser recurses once per parenthesis.
//
// A level is an open bracket, or a unary operator whose operand has not
// been read yet. A unary '-', '+' or '~' is one that does not follow an
// operand (a number, a character, a name, ')' or ']').
func checkNesting(toks []lexer.Token) (lexer.Position, bool) {
	level, pending := 0, 0
	var saved []int // pending unary operators outside each open bracket
	operandEnd := false
	for i, t := range toks {
		switch {
		case t.Type == tokPunct && (t.Value == "(" || t.Value == "["):
			saved = append(saved, pending)
			pending = 0
			level++
			operandEnd = false
			if level > MaxNesting {
				return t.Pos, false
			}
		case t.Type == tokPunct && (t.Value == ")" || t.Value == "]"):
			level -= pending
			pending = 0
			if len(saved) > 0 {
				level--
				pending = saved[len(saved)-1]
				saved = saved[:len(saved)-1]
				// the bracket was the operand of the unary operators
				// before it
				level -= pending
				pending = 0
			}
			operandEnd = true
		case t.Type == tokPunct && (t.Value == "-" || t.Value == "+" || t.Value == "~") && !operandEnd:
			pending++
			level++
			if level > MaxNesting {
				return t.Pos, false
			}
		case t.Type == tokInt || t.Type == tokChar || t.Type == tokIdent || t.Type == tokString || t.Type == tokSrcLine:
			// the mnemonic opening an instruction is not an operand:
			// what follows it starts one
			mnemonic := t.Type == tokIdent && (i == 0 || toks[i-1].Type == tokLabel)
			if !mnemonic {
				level -= pending
				pending = 0
			}
			operandEnd = !mnemonic
		default:
			operandEnd = false
		}
	}
	return lexer.Position{}, true
}
