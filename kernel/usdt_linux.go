//go:build linux

package kernel

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/usdt"
)

// USDT (docs/global.md, "USDT"): the static probes sys/sdt.h compiles into
// a program or library. Each is a nop at a place in the code and a note in
// the file's .note.stapsdt section (type 3, owner "stapsdt") that gives
// the nop's address, the address of .stapsdt.base as the note was written
// (a prelinked file's sections may have moved since: the difference is
// added), the address of a semaphore (a 2-byte counter the program tests
// before it computes the arguments; 0 when the probe has none), the
// provider, the name, and where each argument is ("-4@%edi 8@-16(%rbp)").
// One PROVIDER:NAME may have several sites (a probe in an inlined
// function): a usdt probe goes on every one, each with its own program
// (the arguments may be in other registers there), all counting into
// the probe's counters.

// usdtSite is one site of a static probe (package usdt).
type usdtSite = usdt.Site

// usdtSites reads the file's notes for PROVIDER:NAME (usdt.Sites).
func usdtSites(path, provider, name string) ([]usdtSite, []string, error) {
	return usdt.Sites(path, provider, name)
}

// parseUSDTArgs reads a note's argument descriptions (usdt.ParseArgs).
func parseUSDTArgs(s string, _ uint64) ([]bpf.USDTArg, error) { return usdt.ParseArgs(s) }

// usdtSite is placed as a uprobe at the nop, with the semaphore (its
// offset in the file) counted up by the kernel while the probe is in:
// the kernel increments it in every process that maps the file, and
// decrements it at removal, so a program's "if (PROBE_ENABLED())" holds
// exactly while a probe is in.
func (t *Target) attachUSDT(p *bprobe, o bpf.Options) error {
	d := p.def()
	f := p.s.mod.file
	prov, name, _ := strings.Cut(d.Loc.Text, ":")
	sites, all, err := usdtSites(f.path, prov, name)
	if err != nil {
		return err
	}
	if len(sites) == 0 {
		if len(all) > 12 {
			all = append(all[:12], fmt.Sprintf("and %d more", len(all)-12))
		}
		return fmt.Errorf("usdt = %s: %s has no such static probe (it has %s)", d.Loc.Text, f.path, strings.Join(all, ", "))
	}
	if err := t.mech.Uprobe; err != nil {
		return fmt.Errorf("uprobe: %v", err)
	}
	uses := usesArgs(p.s.prog, p.Index)
	var placed []siteLink
	var atts []attachment
	fail := func(err error) error {
		for _, s := range placed {
			s.link.Close()
			s.prog.Close()
		}
		return err
	}
	for _, site := range sites {
		if uses && site.ArgErr != "" {
			return fail(fmt.Errorf("usdt = %s at %#x: %s", d.Loc.Text, site.PC, site.ArgErr))
		}
		foff, err := f.fileOffset(site.PC)
		if err != nil {
			return fail(err)
		}
		so := o
		so.Kind, so.Addr, so.Args = bpf.KindUprobe, site.PC, site.Args
		so.Biased = f.biased(p.s.src, p.Index)
		prog, err := t.load(p.s, p, so)
		if err != nil {
			return fail(err)
		}
		uo := &link.UprobeOptions{Address: foff}
		if site.Sema != 0 {
			if uo.RefCtrOffset, err = f.dataOffset(site.Sema); err != nil {
				prog.Close()
				return fail(fmt.Errorf("usdt = %s: its semaphore: %v", d.Loc.Text, err))
			}
		}
		l, err := f.exe.Uprobe("", prog, uo)
		if err != nil {
			prog.Close()
			return fail(fmt.Errorf("usdt = %s: uprobe %s at file offset %#x: %w", d.Loc.Text, f.path, foff, err))
		}
		placed = append(placed, siteLink{prog: prog, link: l})
		atts = append(atts, attachment{foff: foff, refCtr: uo.RefCtrOffset, prog: prog})
	}
	p.Addr = sites[0].PC
	p.prog, p.link = placed[0].prog, placed[0].link
	p.extra = placed[1:]
	p.atts = atts
	p.How = "usdt"
	if len(sites) > 1 {
		p.How = fmt.Sprintf("usdt (%d sites)", len(sites))
	}
	return nil
}

// siteLink is a usdt probe's program and link at one more site.
type siteLink struct {
	prog *ebpf.Program
	link link.Link
}

// usesArgs reports whether probe pi's program reads its arguments.
func usesArgs(p *rpn.Program, pi int) bool {
	for i := p.Entry(pi); i < p.End(pi); i++ {
		if p.Insn(i).Op == rpn.OpPushArg {
			return true
		}
	}
	return false
}

// dataOffset is the file offset of a link-time address in any loaded
// segment (a semaphore is data).
func (f *ufile) dataOffset(vaddr uint64) (uint64, error) {
	for _, p := range f.loads {
		if vaddr >= p.Vaddr && vaddr < p.Vaddr+p.Filesz {
			return vaddr - p.Vaddr + p.Off, nil
		}
	}
	return 0, fmt.Errorf("%#x is in no segment %s loads from the file", vaddr, f.path)
}
