package engine

// A module is bound to the build it was compiled for: each space takes
// the build of a pack whose build ID is the one of the file, kernel or
// kernel module loaded there (probe.SelectBuild), and refuses the module
// where none is.

// buildWhere names what runs a loaded module, for a BuildError.
func (e *Engine) buildWhere(ld *Loaded) string {
	if e.os.Kernel() {
		return "the guest kernel (" + ld.Key + ")"
	}
	return ld.Key
}
