package xen

// setupHVM takes an HVM or PVH domain (hvm.go): its breakpoint mode.
func (t *Target) setupHVM() error {
	mode, err := hvmBreakpoints(t.opts.Breakpoints)
	if err != nil {
		return err
	}
	t.hvm = t.opts.Breakpoints
	t.opts.Breakpoints = mode
	trace("an HVM or PVH domain: breakpoints %s (asked %s)", mode, t.hvm)
	return nil
}

// drHint completes the refusal of a fifth probe address in mode dr.
func (t *Target) drHint() string {
	if t.hvm == BreakAuto {
		return hvmFull
	}
	return ""
}
