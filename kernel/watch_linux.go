package kernel

import (
	"fmt"

	"github.com/gprobes/gprobes/bpf"
)

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
