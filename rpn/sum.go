package rpn

import (
	"fmt"
	"strings"
)

// A symbolic value (a probe location such as "do_fork+0x1c", a push d
// constant such as "offsetof(struct task_struct, pid)+8" or "a-b") is kept
// as data, not as text: a Sum of terms with constant factors plus a
// constant. The compiler reduces every expression that depends on symbols
// or types to one, and refuses those it cannot (sym & 0xfff, sizeof(T)/8:
// a program computes those at run time); the engine evaluates it against
// the live target with a symbol table alone, without parsing anything.
// All arithmetic wraps at 64 bits, as the DPDF's does.

// TermKind is what a term of a Sum stands for.
type TermKind uint8

const (
	TermSymbol   TermKind = iota // the address of symbol Name
	TermSizeof                   // sizeof(Name), Name a type: "struct task_struct"
	TermOffsetof                 // offsetof(Name, Field): "pid", "a.b", "arr[3].x"
)

func (k TermKind) String() string {
	switch k {
	case TermSymbol:
		return "symbol"
	case TermSizeof:
		return "sizeof"
	case TermOffsetof:
		return "offsetof"
	}
	return fmt.Sprintf("termkind(%d)", uint8(k))
}

// MaxTerms is the most terms a Sum may have: far above any expression a
// person writes, it bounds the lookups a hostile PPDF can ask for.
const MaxTerms = 256

// Term is Factor times the value of one symbol or type layout.
type Term struct {
	Kind   TermKind
	Factor uint64 // wrapping: -1 is 0xffff_ffff_ffff_ffff
	Name   string // the symbol, or the type of sizeof and offsetof
	Field  string // the field of offsetof; empty for the other kinds
}

// Sum is Addend plus the sum of its terms, in 64-bit wrapping arithmetic.
type Sum struct {
	Terms  []Term
	Addend uint64
}

// SumEnv answers what a Sum asks: symbol addresses (to which the caller
// adds the load bias, if any) and type layouts. symbols.Set provides them.
type SumEnv interface {
	Symbol(name string) (uint64, error)
	Sizeof(typ string) (uint64, error)
	Offsetof(typ, field string) (uint64, error)
}

// IsSymbol reports whether s is one symbol's address and nothing else.
func (s Sum) IsSymbol() bool {
	return s.Addend == 0 && len(s.Terms) == 1 && s.Terms[0].Kind == TermSymbol && s.Terms[0].Factor == 1
}

// Eval computes s against env. The first term env cannot answer is the
// error, as env reported it.
func (s Sum) Eval(env SumEnv) (uint64, error) {
	v := s.Addend
	for _, t := range s.Terms {
		var x uint64
		var err error
		switch t.Kind {
		case TermSymbol:
			x, err = env.Symbol(t.Name)
		case TermSizeof:
			x, err = env.Sizeof(t.Name)
		case TermOffsetof:
			x, err = env.Offsetof(t.Name, t.Field)
		default:
			err = fmt.Errorf("unknown term kind %d", t.Kind)
		}
		if err != nil {
			return 0, err
		}
		v += t.Factor * x
	}
	return v, nil
}

// BiasFactor is how many times the load bias counts in s: the sum of the
// factors of its symbol terms. A value computed against link-time
// addresses becomes the live one by adding BiasFactor times the bias
// ("a" moves with the module, "a-b" and "sizeof(T)" do not).
func (s Sum) BiasFactor() uint64 {
	var f uint64
	for _, t := range s.Terms {
		if t.Kind == TermSymbol {
			f += t.Factor
		}
	}
	return f
}

// String writes s for people and tests: "2*a - b + sizeof(struct s) + 0x10".
func (s Sum) String() string {
	var b strings.Builder
	for i, t := range s.Terms {
		f := t.Factor
		switch {
		case i > 0 && int64(f) < 0:
			b.WriteString(" - ")
			f = -f
		case i > 0:
			b.WriteString(" + ")
		case int64(f) < 0:
			b.WriteString("-")
			f = -f
		}
		if f != 1 {
			fmt.Fprintf(&b, "%d*", f)
		}
		b.WriteString(t.String())
	}
	switch {
	case len(s.Terms) == 0:
		fmt.Fprintf(&b, "%#x", s.Addend)
	case int64(s.Addend) < 0:
		fmt.Fprintf(&b, " - %#x", -s.Addend)
	case s.Addend != 0:
		fmt.Fprintf(&b, " + %#x", s.Addend)
	}
	return b.String()
}

func (t Term) String() string {
	switch t.Kind {
	case TermSizeof:
		return "sizeof(" + t.Name + ")"
	case TermOffsetof:
		return "offsetof(" + t.Name + ", " + t.Field + ")"
	}
	return t.Name
}

// add adds f times t to s, merging it with an equal term and dropping a
// term whose factor becomes 0.
func (s *Sum) add(t Term, f uint64) {
	for i := range s.Terms {
		u := &s.Terms[i]
		if u.Kind == t.Kind && u.Name == t.Name && u.Field == t.Field {
			u.Factor += f * t.Factor
			if u.Factor == 0 {
				s.Terms = append(s.Terms[:i], s.Terms[i+1:]...)
			}
			return
		}
	}
	if f*t.Factor != 0 {
		t.Factor *= f
		s.Terms = append(s.Terms, t)
	}
}

// Plus returns s + f*o.
func (s Sum) Plus(o Sum, f uint64) Sum {
	r := Sum{Terms: append([]Term(nil), s.Terms...), Addend: s.Addend + f*o.Addend}
	for _, t := range o.Terms {
		r.add(t, f)
	}
	return r
}

// Scaled returns f*s.
func (s Sum) Scaled(f uint64) Sum {
	return Sum{}.Plus(s, f)
}
