package symbols

import "sort"

// Functions are the table's functions (STT_FUNC and STT_GNU_IFUNC
// symbols of an ELF file's .symtab and .dynsym; text symbols of a
// System.map or kallsyms), as an offset line names them: each name once,
// a versioned name ("malloc@@GLIBC_2.2.5") by its bare name, sorted by
// name, then module. Of one name at several addresses (static functions
// of several files) the first is kept: a probe on that name is refused as
// ambiguous, and the listing says so by Dups.
func (t *Table) Functions() []Function {
	type key struct{ name, mod string }
	at := map[key]int{}
	var out []Function
	for _, e := range t.syms {
		if !e.fn {
			continue
		}
		s := e.Symbol
		s.Name = bareName(s.Name)
		k := key{s.Name, s.Module}
		if i, ok := at[k]; ok {
			if out[i].Addr != s.Addr {
				out[i].Dups++
			}
			continue
		}
		at[k] = len(out)
		out = append(out, Function{Symbol: s})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Module < out[j].Module
	})
	return out
}

// Function is a function of a table: its symbol, and how many other
// addresses have its name (Dups, 0 for a name of one function).
type Function struct {
	Symbol
	Dups int
}
