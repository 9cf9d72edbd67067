package kernel

import (
	"errors"
	"fmt"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/rpn"
)

// attachWatch puts a watch probe in: a hardware breakpoint on every
// online CPU (bpf.AttachWatch), its program run after each access. The
// address is resolved first (where the probe is, even when it is
// refused), then checked (aligned, in the kernel's half), then the
// kernel's ability: a kernel that refuses breakpoints on its own
// addresses (bpf.Probe found it out) has every watch probe refused
// naming that, before a program is loaded. There is no other route:
// nothing but a debug register sees the kernel's own accesses to its
// memory (a tracepoint or kprobe on the writers would need them known,
// and would miss the others).
func (t *Target) attachWatch(p *bprobe, o bpf.Options) error {
	d := p.def()
	addr, err := t.watchAddress(d, p.s.mod.kmod)
	if err != nil {
		return err
	}
	p.Addr = addr
	n := uint64(d.WatchLen)
	if addr%n != 0 {
		return fmt.Errorf("watch = %s: %#x is not a multiple of the length %d (the aligned range starts at %#x)", d.Loc.Text, addr, n, addr&^(n-1))
	}
	if addr < kernelSpace {
		return fmt.Errorf("watch = %s: %#x is not a kernel address: --target kernel watches the kernel's memory", d.Loc.Text, addr)
	}
	if err := t.mech.ForKind(bpf.KindWatch); err != nil {
		return fmt.Errorf("watch = %s (%#x): %v; gprobes has no other way to watch the kernel's memory", d.Loc.Text, addr, err)
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
	p.Addr, p.prog, p.link, p.How = addr, prog, l, "watch"
	return nil
}

// watchAddress resolves a watch probe's address, where "task" names the
// task_struct of the process the probes follow (run --target kernel --
// CMD): its address, found at insert (taskStruct), plus offsetof a field
// makes a watch on that process's field, which kallsyms' symbols cannot
// give.
func (t *Target) watchAddress(d *rpn.Probe, kmod string) (uint64, error) {
	env := symEnv{k: t.syms, kmod: kmod, task: func() (uint64, error) {
		if t.opts.PID == 0 {
			return 0, errors.New("task is the task_struct of the process the probes follow (run --target kernel -- CMD), and these follow every process")
		}
		a, err := t.taskStruct(t.opts.PID)
		if err != nil {
			return 0, fmt.Errorf("task, process %d's task_struct: %v", t.opts.PID, err)
		}
		return a, nil
	}}
	return t.resolver(env).Location(d)
}

// kernelSpace is where x86-64's kernel half of the address space starts.
const kernelSpace = 0xffff800000000000
