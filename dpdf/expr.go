package dpdf

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/alecthomas/participle/v2/lexer"
)

// Node is a constant expression as a tree, with C precedence applied.
type Node interface {
	Position() lexer.Position
	String() string
}

// Num is a number or character constant.
type Num struct {
	Pos   lexer.Position
	Value uint64
	Text  string
}

// Sym is a symbol: its value is its address.
type Sym struct {
	Pos  lexer.Position
	Name string
}

// SizeofNode is sizeof(TYPE).
type SizeofNode struct {
	Pos  lexer.Position
	Type string // normalized: "struct task_struct", "unsigned long", "char *"
}

// OffsetofNode is offsetof(TYPE, FIELD).
type OffsetofNode struct {
	Pos   lexer.Position
	Type  string
	Field string // "pid", "a.b", "arr[3].x"
}

// UnaryNode is -x, ~x or +x.
type UnaryNode struct {
	Pos lexer.Position
	Op  string
	X   Node
}

// BinaryNode is x op y.
type BinaryNode struct {
	Pos  lexer.Position
	Op   string
	X, Y Node
}

func (n *Num) Position() lexer.Position          { return n.Pos }
func (n *Sym) Position() lexer.Position          { return n.Pos }
func (n *SizeofNode) Position() lexer.Position   { return n.Pos }
func (n *OffsetofNode) Position() lexer.Position { return n.Pos }
func (n *UnaryNode) Position() lexer.Position    { return n.Pos }
func (n *BinaryNode) Position() lexer.Position   { return n.Pos }

func (n *Num) String() string          { return n.Text }
func (n *Sym) String() string          { return n.Name }
func (n *SizeofNode) String() string   { return "sizeof(" + n.Type + ")" }
func (n *OffsetofNode) String() string { return "offsetof(" + n.Type + ", " + n.Field + ")" }
func (n *UnaryNode) String() string    { return n.Op + n.X.String() }
func (n *BinaryNode) String() string {
	return "(" + n.X.String() + " " + n.Op + " " + n.Y.String() + ")"
}

// C precedence of the binary operators, loosest first.
var precedence = map[string]int{
	"|": 1, "^": 2, "&": 3, "<<": 4, ">>": 4, "+": 5, "-": 5, "*": 6, "/": 6, "%": 6,
}

// Tree builds the expression tree of e, reporting malformed numbers and
// characters to errs. It returns nil when e is nil. A tree deeper than
// MaxNesting is reported and replaced by a zero constant, so that nothing
// walks it recursively.
func (e *Expr) Tree(errs *ErrorList) Node {
	if e == nil {
		return nil
	}
	b := &treeBuilder{errs: errs}
	n, _ := b.expr(e)
	if b.tooDeep {
		errs.add(b.deepAt, nestingMsg, MaxNesting)
		return &Num{Pos: e.Pos, Text: "0"}
	}
	return n
}

// treeBuilder builds expression trees and measures their depth: the
// number of operator nodes on the longest path from the root.
type treeBuilder struct {
	errs    *ErrorList
	tooDeep bool
	deepAt  lexer.Position // where the depth first passed MaxNesting
}

func (b *treeBuilder) deeper(d int, pos lexer.Position) {
	if d > MaxNesting && !b.tooDeep {
		b.tooDeep, b.deepAt = true, pos
	}
}

func (b *treeBuilder) expr(e *Expr) (Node, int) {
	head, hd := b.unary(e.Head)
	operands := []Node{head}
	depths := []int{hd}
	var ops []*BinOp
	reduce := func() {
		op := ops[len(ops)-1]
		ops = ops[:len(ops)-1]
		y := operands[len(operands)-1]
		x := operands[len(operands)-2]
		d := max(depths[len(depths)-1], depths[len(depths)-2]) + 1
		b.deeper(d, op.Pos)
		operands = operands[:len(operands)-2]
		depths = depths[:len(depths)-2]
		operands = append(operands, &BinaryNode{Pos: op.Pos, Op: op.Op, X: x, Y: y})
		depths = append(depths, d)
	}
	for _, bin := range e.Tail {
		for len(ops) > 0 && precedence[ops[len(ops)-1].Op] >= precedence[bin.Op] {
			reduce()
		}
		ops = append(ops, bin)
		y, yd := b.unary(bin.Y)
		operands = append(operands, y)
		depths = append(depths, yd)
	}
	for len(ops) > 0 {
		reduce()
	}
	return operands[0], depths[0]
}

func (b *treeBuilder) unary(u *Unary) (Node, int) {
	n, d := b.primary(u.Primary)
	for i := len(u.Ops) - 1; i >= 0; i-- {
		n = &UnaryNode{Pos: u.Pos, Op: u.Ops[i], X: n}
	}
	d += len(u.Ops)
	b.deeper(d, u.Pos)
	return n, d
}

func (b *treeBuilder) primary(p *Primary) (Node, int) {
	errs := b.errs
	switch {
	case p.Num != nil:
		v, err := ParseNumber(*p.Num)
		if err != nil {
			errs.add(p.Pos, "%v", err)
		}
		return &Num{Pos: p.Pos, Value: v, Text: *p.Num}, 0
	case p.Char != nil:
		v, err := parseChar(*p.Char)
		if err != nil {
			errs.add(p.Pos, "%v", err)
		}
		return &Num{Pos: p.Pos, Value: v, Text: *p.Char}, 0
	case p.Sizeof != nil:
		return &SizeofNode{Pos: p.Pos, Type: p.Sizeof.normalize()}, 0
	case p.Offsetof != nil:
		var f strings.Builder
		f.WriteString(p.Offsetof.Field.Name)
		for _, part := range p.Offsetof.Parts {
			if part.Member != nil {
				f.WriteString("." + *part.Member)
				continue
			}
			idx, _ := b.expr(part.Index)
			n, ok := idx.(*Num)
			if !ok {
				errs.add(part.Pos, "an offsetof array index must be a number")
				f.WriteString("[0]")
				continue
			}
			fmt.Fprintf(&f, "[%d]", n.Value)
		}
		return &OffsetofNode{Pos: p.Pos, Type: p.Offsetof.Type.normalize(), Field: f.String()}, 0
	case p.Sym != nil:
		return &Sym{Pos: p.Pos, Name: *p.Sym}, 0
	case p.Paren != nil:
		return b.expr(p.Paren)
	}
	errs.add(p.Pos, "empty expression")
	return &Num{Pos: p.Pos}, 0
}

// normalize spells a type name with single spaces, the C keywords in lower
// case and stars at the end: "struct task_struct *".
func (t *TypeName) normalize() string {
	words := make([]string, len(t.Words))
	for i, w := range t.Words {
		switch lw := strings.ToLower(w); lw {
		case "struct", "union", "enum", "unsigned", "signed", "const", "volatile",
			"char", "short", "int", "long", "void", "float", "double":
			words[i] = lw
		default:
			words[i] = w
		}
	}
	s := strings.Join(words, " ")
	if len(t.Stars) > 0 {
		s += " " + strings.Repeat("*", len(t.Stars))
	}
	return s
}

// ParseNumber reads a number as DPDF writes it: decimal, 0x hex, 0o octal
// or 0b binary. A leading zero on a decimal number is refused, because C
// would read it as octal and the two readings differ silently.
func ParseNumber(s string) (uint64, error) {
	base := 10
	digits := s
	if len(s) > 2 && s[0] == '0' {
		switch s[1] {
		case 'x', 'X':
			base, digits = 16, s[2:]
		case 'o', 'O':
			base, digits = 8, s[2:]
		case 'b', 'B':
			base, digits = 2, s[2:]
		}
	}
	if base == 10 && len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("ambiguous number %s: write %s for decimal, or 0o%s for octal", s, strings.TrimLeft(s, "0"), s[1:])
	}
	v, err := strconv.ParseUint(strings.ReplaceAll(digits, "_", ""), base, 64)
	if err != nil {
		var ne *strconv.NumError
		if ok := asNumError(err, &ne); ok && ne.Err == strconv.ErrRange {
			return 0, fmt.Errorf("number %s does not fit in 64 bits", s)
		}
		return 0, fmt.Errorf("malformed number %s", s)
	}
	return v, nil
}

func asNumError(err error, target **strconv.NumError) bool {
	ne, ok := err.(*strconv.NumError)
	if ok {
		*target = ne
	}
	return ok
}

// parseChar reads 'c', with C escapes: \n \t \r \0 \\ \' \" \a \b \f \v
// \xHH and octal \NNN.
func parseChar(s string) (uint64, error) {
	if len(s) < 3 || s[0] != '\'' || s[len(s)-1] != '\'' {
		return 0, fmt.Errorf("malformed character constant %s", s)
	}
	body := s[1 : len(s)-1]
	if body[0] != '\\' {
		if len(body) != 1 {
			return 0, fmt.Errorf("character constant %s holds more than one character", s)
		}
		return uint64(body[0]), nil
	}
	esc := body[1:]
	switch {
	case len(esc) == 1 && strings.Contains(`ntr0\'"abfv`, esc):
		return uint64(map[byte]byte{'n': '\n', 't': '\t', 'r': '\r', '0': 0, '\\': '\\', '\'': '\'',
			'"': '"', 'a': 7, 'b': 8, 'f': 12, 'v': 11}[esc[0]]), nil
	case len(esc) >= 2 && (esc[0] == 'x' || esc[0] == 'X'):
		v, err := strconv.ParseUint(esc[1:], 16, 8)
		if err == nil {
			return v, nil
		}
	case len(esc) >= 1 && len(esc) <= 3 && esc[0] >= '0' && esc[0] <= '7':
		v, err := strconv.ParseUint(esc, 8, 8)
		if err == nil {
			return v, nil
		}
	}
	return 0, fmt.Errorf("unknown escape in character constant %s", s)
}

// EvalError is an error while evaluating a constant expression.
type EvalError struct {
	Pos lexer.Position
	Msg string
	Err error // the Env's error, when it gave one
}

func (e *EvalError) Error() string { return e.Msg }

// Unwrap is the Env's error.
func (e *EvalError) Unwrap() error { return e.Err }

// Env answers the questions a constant expression may ask: symbol
// addresses and type layouts. A nil Env knows nothing.
type Env interface {
	Symbol(name string) (uint64, error)
	Sizeof(typ string) (uint64, error)
	Offsetof(typ, field string) (uint64, error)
}

// Eval computes n in 64-bit wrapping arithmetic. Division by zero is an
// error; shifts by 64 or more give 0.
func Eval(n Node, env Env) (uint64, error) {
	switch n := n.(type) {
	case *Num:
		return n.Value, nil
	case *Sym:
		if env == nil {
			return 0, &EvalError{n.Pos, fmt.Sprintf("symbol %s needs a symbol table", n.Name), nil}
		}
		v, err := env.Symbol(n.Name)
		if err != nil {
			return 0, &EvalError{n.Pos, err.Error(), err}
		}
		return v, nil
	case *SizeofNode:
		if env == nil {
			return 0, &EvalError{n.Pos, fmt.Sprintf("sizeof(%s) needs type information", n.Type), nil}
		}
		v, err := env.Sizeof(n.Type)
		if err != nil {
			return 0, &EvalError{n.Pos, err.Error(), err}
		}
		return v, nil
	case *OffsetofNode:
		if env == nil {
			return 0, &EvalError{n.Pos, fmt.Sprintf("offsetof(%s, %s) needs type information", n.Type, n.Field), nil}
		}
		v, err := env.Offsetof(n.Type, n.Field)
		if err != nil {
			return 0, &EvalError{n.Pos, err.Error(), err}
		}
		return v, nil
	case *UnaryNode:
		x, err := Eval(n.X, env)
		if err != nil {
			return 0, err
		}
		switch n.Op {
		case "-":
			return -x, nil
		case "~":
			return ^x, nil
		}
		return x, nil
	case *BinaryNode:
		x, err := Eval(n.X, env)
		if err != nil {
			return 0, err
		}
		y, err := Eval(n.Y, env)
		if err != nil {
			return 0, err
		}
		switch n.Op {
		case "+":
			return x + y, nil
		case "-":
			return x - y, nil
		case "*":
			return x * y, nil
		case "/", "%":
			if y == 0 {
				return 0, &EvalError{n.Pos, "division by zero in a constant expression", nil}
			}
			if n.Op == "/" {
				return x / y, nil
			}
			return x % y, nil
		case "&":
			return x & y, nil
		case "|":
			return x | y, nil
		case "^":
			return x ^ y, nil
		case "<<":
			if y >= 64 {
				return 0, nil
			}
			return x << y, nil
		case ">>":
			if y >= 64 {
				return 0, nil
			}
			return x >> y, nil
		}
	}
	return 0, &EvalError{n.Position(), "unknown expression", nil}
}

// External reports whether n depends on anything outside the DPDF: a
// symbol or a type layout. Such values may change with the target and are
// re-evaluated when a probe is inserted.
func External(n Node) bool {
	switch n := n.(type) {
	case *Sym, *SizeofNode, *OffsetofNode:
		return true
	case *UnaryNode:
		return External(n.X)
	case *BinaryNode:
		return External(n.X) || External(n.Y)
	}
	return false
}

// Word returns the single identifier n consists of, if any: the form of
// keyword values such as "user", "kernel", "yes" and "x86_64".
func Word(n Node) (string, bool) {
	s, ok := n.(*Sym)
	if !ok {
		return "", false
	}
	return s.Name, true
}
