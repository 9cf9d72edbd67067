package kernel

import (
	"fmt"

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

// attachWatch puts a watch probe in: a hardware breakpoint on every
// online CPU (bpf.AttachWatch), its program run after each access.
func (t *Target) attachWatch(p *probe, o bpf.Options) error {
	d := p.def()
	addr, err := t.address(d, p.s.mod.kmod)
	if err != nil {
		return err
	}
	n := uint64(d.WatchLen)
	if addr%n != 0 {
		return fmt.Errorf("watch = %s: %#x is not a multiple of the length %d (the aligned range starts at %#x)", d.Loc.Text, addr, n, addr&^(n-1))
	}
	if addr < kernelSpace {
		return fmt.Errorf("watch = %s: %#x is not a kernel address: --target kernel watches the kernel's memory", d.Loc.Text, addr)
	}
	o.Kind = bpf.KindWatch
	prog, err := t.load(p.s, p, o)
	if err != nil {
		return err
	}
	l, err := bpf.AttachWatch(prog, addr, int(n), d.WatchMode)
	if err != nil {
		prog.Close()
		return err
	}
	p.addr, p.prog, p.link, p.how = addr, prog, l, "watch"
	return nil
}

// kernelSpace is where x86-64's kernel half of the address space starts.
const kernelSpace = 0xffff800000000000
