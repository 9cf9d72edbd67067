package kernel

import (
	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/rpn"
)

// ivRoles decides which probes of a source share calls' instance
// variables (bpf/iv.go, docs/kernel.md "Instance variables"): for each
// function the source has a return probe on, the offset probes at its
// first instruction whose programs use push iv or pop iv are its entry
// probes (kprobes: the first of them in the file starts each call's words
// at zero, the others go on with them), and the return probe takes the
// call's words. A return probe without such an entry probe, and any other
// probe using iv, has 8 words of zero of its own. Nil when no probe has a
// part. Locations that do not resolve are left to attach, which refuses
// them.
func (t *Target) ivRoles(s *source, prog *rpn.Program) map[int]*bpf.IVOptions {
	m := s.src
	fnOf := func(i int) (uint64, uint64, bool) {
		d := &m.Probes[i]
		if d.Kind != rpn.ProbeOffset && d.Kind != rpn.ProbeRetprobe {
			return 0, 0, false
		}
		addr, err := t.address(d, s.mod.kmod)
		if err != nil {
			return 0, 0, false
		}
		fn, off, err := t.function(addr)
		if err != nil {
			return 0, 0, false
		}
		return fn.Addr, off, true
	}
	rets := map[uint64][]int{}
	for i := range m.Probes {
		if m.Probes[i].Kind == rpn.ProbeRetprobe {
			if fn, _, ok := fnOf(i); ok {
				rets[fn] = append(rets[fn], i)
			}
		}
	}
	if len(rets) == 0 {
		return nil
	}
	roles := map[int]*bpf.IVOptions{}
	entered := map[uint64]bool{}
	for i := range m.Probes {
		if m.Probes[i].Kind != rpn.ProbeOffset || !usesIV(prog, i) {
			continue
		}
		fn, off, ok := fnOf(i)
		if !ok || off != 0 || rets[fn] == nil {
			continue
		}
		role := bpf.IVEntry
		if !entered[fn] {
			role, entered[fn] = bpf.IVEntryFirst, true
		}
		roles[i] = &bpf.IVOptions{Role: role, Func: fn}
	}
	for fn := range entered {
		for _, i := range rets[fn] {
			roles[i] = &bpf.IVOptions{Role: bpf.IVReturn, Func: fn}
		}
	}
	if len(roles) == 0 {
		return nil
	}
	return roles
}

// usesIV reports whether probe pi's program has push iv or pop iv.
func usesIV(p *rpn.Program, pi int) bool {
	for i := p.Entry(pi); i < p.End(pi); i++ {
		if op := p.Insn(i).Op; op == rpn.OpPushIV || op == rpn.OpPopIV {
			return true
		}
	}
	return false
}
