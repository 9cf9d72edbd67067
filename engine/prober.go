package engine

// The engine is a probe.Prober: the daemon and gprobes run drive it as
// they drive the kernel target.
var (
	_ Prober       = (*Engine)(nil)
	_ PackInserter = (*Engine)(nil)
	_ SymbolAdder  = (*Engine)(nil)
)

// AddSymbols gives the target's OS more symbol files, if it takes them.
func (e *Engine) AddSymbols(paths []string) error {
	return e.WithTarget(func(Target) error {
		if e.ab.loader != nil {
			return e.ab.loader.AddSymbols(paths)
		}
		return nil
	})
}
