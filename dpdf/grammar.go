package dpdf

import (
	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"
)

// The participle grammar of one DPDF statement. A DPDF is parsed statement
// by statement (see Parse), so that every syntax error in a file is
// reported, not only the first; the file structure (header, then probes)
// is checked afterwards on the statements.
//
// Keywords, mnemonics and operand words are matched case-insensitively;
// symbols and labels keep their case.

// Stmt is one statement: a keyword line, or a label and/or an instruction.
type Stmt struct {
	Pos   lexer.Position
	KV    *KeyValue `parser:"(  @@"`
	Label *Label    `parser:" | @@"`
	Instr *Instr    `parser:"   @@? | @@ ) EOL"`

	// broken marks what remains of a statement that failed to parse (see
	// brokenStatement); its error is already reported.
	broken bool
}

// KeyValue is "keyword = value". Value is nil when the value failed to
// parse (the error is in File.Errors): the keyword still counts as given.
type KeyValue struct {
	Pos   lexer.Position
	Key   string `parser:"@Key \"=\""`
	Value *Value `parser:"@@"`
}

// Value is a keyword's value: a string (the module name), a source line
// (an offset), a tracepoint event "SUBSYS:EVENT" as written (its form is
// the compiler's to check) or a constant expression; words such as "user"
// or "yes" are expressions holding a single symbol. A "watch =" value has
// parts, EXPR,LEN,MODE: the first is the value, the others are Args (the
// lexer separates parts in watch values only; the compiler checks their
// number).
type Value struct {
	Pos    lexer.Position
	Tokens []lexer.Token
	Text   string // the value as written (after preprocessing), Args included
	// Head is the first part as written, Text when there are no Args: a
	// watch probe's address expression
	Head  string
	Str   *string `parser:"(  @String"`
	Line  *string `parser:" | @SrcLine"`
	Event *string `parser:" | @Event"`
	Expr  *Expr   `parser:" | @@ )"`
	Args  []*Expr `parser:"( Sep @@ )*"`
}

// Label is "identifier:".
type Label struct {
	Pos  lexer.Position
	Name string `parser:"@Label"`
}

// Instr is one instruction of the RPN machine (docs/language.md) with its
// operands.
type Instr struct {
	Pos lexer.Position

	Push   *PushOperand `parser:"(  \"push\" @@"`
	PopKw  bool         `parser:" | @\"pop\""`
	Pop    *PopOperand  `parser:"   @@?"`
	Log    *LogOperand  `parser:" | \"log\" @@"`
	VarOp  string       `parser:" | @( \"move\" | \"inc\" | \"dec\" )"`
	VarRef *VarRef      `parser:"   @@"`
	Jump   *Jump        `parser:" | @@"`
	ExitKw bool         `parser:" | @\"exit\""`
	Exit   *Expr        `parser:"   @@?"`
	SetOp  string       `parser:" | @( \"setmaj\" | \"setmin\" )"`
	SetArg *Expr        `parser:"   @@?"`
	Shift  string       `parser:" | @( \"shl\" | \"shr\" | \"sar\" | \"rol\" | \"ror\" )"`
	Count  *Expr        `parser:"   @@?"`
	Ros    *Expr        `parser:" | \"ros\" @@"`
	Switch string       `parser:" | @( \"enable\" | \"disable\" )"`
	Minor  *Expr        `parser:"   @@"`
	Simple string       `parser:" | @( \"nop\" | \"ret\" | \"abort\" | \"rem\" | \"add\" | \"sub\" | \"mul\" | \"div\" | \"idiv\" | \"and\" | \"or\" | \"xor\" | \"not\" | \"neg\" | \"vfy_r\" | \"vfy_rw\" | \"dup\" | \"xchg\" | \"log_st\" ) )"`
}

// PushOperand is what follows "push".
type PushOperand struct {
	Pos   lexer.Position
	Const *Expr   `parser:"  \"d\" \",\" @@"`
	Reg   *RegRef `parser:"| @@"`
	Var   *VarRef `parser:"| @@"`
	Sys   string  `parser:"| @( \"pid\" | \"tid\" | \"procid\" | \"task\" | \"ts\" | \"lp\" )"`
	MrfKw bool    `parser:"| @\"mrf\""`
	Size  *Expr   `parser:"  ( \",\" @@ )?"`
	IO    *Expr   `parser:"| \"io\" \",\" @@"`
	Field *Name   `parser:"| \"field\" \",\" @@"` // a tracepoint event's field, its name as written
	IV    *Expr   `parser:"| \"iv\" \",\" @@"`    // an instance variable's index
	Arg   *Expr   `parser:"| \"arg\" \",\" @@"`   // a usdt probe's argument, from 1
}

// PopOperand is what follows "pop"; nil for a bare "pop".
type PopOperand struct {
	Pos   lexer.Position
	Reg   *RegRef `parser:"  @@"`
	Var   *VarRef `parser:"| @@"`
	MrfKw bool    `parser:"| @\"mrf\""`
	Size  *Expr   `parser:"  ( \",\" @@ )?"`
	IO    *Expr   `parser:"| \"io\" \",\" @@"`
	IV    *Expr   `parser:"| \"iv\" \",\" @@"`
	LP    bool    `parser:"| @\"lp\""`
}

// RegRef is "r,REG" or "u,REG".
type RegRef struct {
	Pos  lexer.Position
	Set  string `parser:"@( \"r\" | \"u\" ) \",\""`
	Name *Name  `parser:"@@"`
}

// Name is an identifier with its position.
type Name struct {
	Pos   lexer.Position
	Value string `parser:"@Ident"`
}

// VarRef is "lv[,I]" or "gv[,I]"; without an index the index is popped.
type VarRef struct {
	Pos   lexer.Position
	Space string `parser:"@( \"lv\" | \"gv\" )"`
	Index *Expr  `parser:"( \",\" @@ )?"`
}

// LogOperand is what follows "log".
type LogOperand struct {
	Pos lexer.Position
	Str bool `parser:"  @\"str\""`
	Mrf bool `parser:"| @\"mrf\""`
	// Stack is "ustack" or "kstack" (log ustack[,N]), Frames its N
	Stack  string `parser:"| @( \"ustack\" | \"kstack\" )"`
	Frames *Expr  `parser:"  ( \",\" @@ )?"`
	Space  string `parser:"| @( \"lv\" | \"gv\" ) \",\""`
	Index  *Expr  `parser:"  @@ \",\""`
	Count  *Expr  `parser:"  @@"`
	Words  *Expr  `parser:"| @@"`
}

// Jump is a jump, loop or call to a label.
type Jump struct {
	Pos   lexer.Position
	Op    string `parser:"@( \"jmp\" | \"jz\" | \"jnz\" | \"jlt\" | \"jle\" | \"jgt\" | \"jge\" | \"loop\" | \"call\" )"`
	Label *Name  `parser:"@@"`
}

// Expr is a constant expression as parsed: an operand followed by binary
// operators and operands, flat. Tree builds the precedence tree.
type Expr struct {
	Pos    lexer.Position
	Tokens []lexer.Token
	Head   *Unary   `parser:"@@"`
	Tail   []*BinOp `parser:"@@*"`
}

// BinOp is one "operator operand" pair of a flat Expr.
type BinOp struct {
	Pos lexer.Position
	Op  string `parser:"@( \"|\" | \"^\" | \"&\" | \"<<\" | \">>\" | \"+\" | \"-\" | \"*\" | \"/\" | \"%\" )"`
	Y   *Unary `parser:"@@"`
}

// Unary is an operand with its prefix operators.
type Unary struct {
	Pos     lexer.Position
	Ops     []string `parser:"@( \"-\" | \"~\" | \"+\" )*"`
	Primary *Primary `parser:"@@"`
}

// Primary is a number, character, symbol, sizeof, offsetof or a
// parenthesised expression.
type Primary struct {
	Pos      lexer.Position
	Num      *string     `parser:"  @Int"`
	Char     *string     `parser:"| @Char"`
	Sizeof   *TypeName   `parser:"| \"sizeof\" \"(\" @@ \")\""`
	Offsetof *OffsetofOp `parser:"| \"offsetof\" \"(\" @@ \")\""`
	Sym      *string     `parser:"| @Ident"`
	Paren    *Expr       `parser:"| \"(\" @@ \")\""`
}

// TypeName is a C type name: "struct task_struct", "unsigned long",
// "pid_t", with optional pointer stars.
type TypeName struct {
	Pos   lexer.Position
	Words []string `parser:"@Ident+"`
	Stars []string `parser:"@\"*\"*"`
}

// OffsetofOp is the argument list of offsetof(TYPE, FIELD).
type OffsetofOp struct {
	Pos   lexer.Position
	Type  *TypeName    `parser:"@@ \",\""`
	Field *FieldPath   `parser:"@@"`
	Parts []*FieldPart `parser:"@@*"`
}

// FieldPath is the first member name of an offsetof field designator.
type FieldPath struct {
	Pos  lexer.Position
	Name string `parser:"@Ident"`
}

// FieldPart is ".member" or "[index]" after the first member.
type FieldPart struct {
	Pos    lexer.Position
	Member *string `parser:"  \".\" @Ident"`
	Index  *Expr   `parser:"| \"[\" @@ \"]\""`
}

var stmtParser = participle.MustBuild[Stmt](
	participle.Lexer(lexDef{}),
	participle.CaseInsensitive("Ident"),
	participle.UseLookahead(1),
)
