package symbols

import "sort"

// Next returns the symbol with the lowest address above addr, over every
// table of the set (absolute, debugging and undefined symbols are not
// considered, as for Nearest): where a function of a source without sizes
// (System.map, kallsyms) ends at the latest. The engine's return probes
// decode a function up to there to find its returns.
func (s *Set) Next(addr uint64) (Symbol, bool) {
	var best Symbol
	found := false
	for _, t := range s.tables {
		t.sortIndex()
		idx := t.byAddr
		i := sort.Search(len(idx), func(i int) bool { return t.syms[idx[i]].Addr > addr })
		if i < len(idx) {
			if e := t.syms[idx[i]]; !found || e.Addr < best.Addr {
				best, found = e.Symbol, true
			}
		}
	}
	return best, found
}
