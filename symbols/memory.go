package symbols

import (
	"fmt"
)

// Tables made from what a running kernel holds in its memory rather than
// from a file: the symbols a guest kernel's kallsyms tables decode to, the
// BTF between its __start_BTF and __stop_BTF. name stands for the path in
// messages (Path, Files); nothing is read from it.

// NewKallsyms makes the table of symbols decoded from a kernel's kallsyms
// tables, with the rules of a kallsyms file: an uppercase type letter is
// global, t/T/w/W/i/I a function. The symbols' Module is kept.
func NewKallsyms(name string, syms []Symbol) (*Table, error) {
	t := newTable(name, FormatKallsyms, len(syms))
	nonzero := false
	for _, s := range syms {
		k := s.Kind
		t.add(entry{Symbol: s, global: ('A' <= k && k <= 'Z') || k == 'u', fn: textKind(k)})
		nonzero = nonzero || s.Addr != 0
	}
	if len(t.syms) == 0 {
		return nil, fmt.Errorf("%s: %w", name, ErrNoSymbols)
	}
	if !nonzero {
		return nil, fmt.Errorf("%s: %w", name, ErrZeroAddresses)
	}
	t.names.build(t.syms)
	return t, nil
}

// NewBTF makes the table of a raw BTF blob held in memory (a kernel's
// .BTF read from its memory): types, no symbols. The header is checked
// now; the types are parsed on the first query, as for a file.
func NewBTF(name string, raw []byte) (*Table, error) {
	if err := checkBTFHeader(raw, int64(len(raw))); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	t := newTable(name, FormatBTF, 0)
	t.ptrSize = 8
	t.hasBTF = true
	t.btfLen = int64(len(raw))
	t.raw = raw
	return t, nil
}

// Symbols returns the table's definitions in the order they were read.
func (t *Table) Symbols() []Symbol {
	out := make([]Symbol, len(t.syms))
	for i, e := range t.syms {
		out[i] = e.Symbol
	}
	return out
}
