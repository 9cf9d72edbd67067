package engine

import "github.com/gprobes/gprobes/symbols"

// isGo reports whether a file is a Go program, from its symbols: it has
// the runtime's stack-growth entry, runtime.morestack, which is named
// runtime.morestack.abi0 since Go's register ABI (Go 1.17). Go code gets
// no jump pads (its goroutine stacks are small and move), and its return
// probes key calls by goroutine.
func isGo(set *symbols.Set) bool {
	if set == nil {
		return false
	}
	for _, name := range []string{"runtime.morestack.abi0", "runtime.morestack"} {
		if _, err := set.Lookup(name); err == nil {
			return true
		}
	}
	return false
}
