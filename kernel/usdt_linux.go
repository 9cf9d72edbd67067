//go:build linux

package kernel

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/rpn"
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

// usdtSite is one site of a static probe.
type usdtSite struct {
	pc   uint64 // link-time address of the nop
	sema uint64 // link-time address of the semaphore, 0 if none
	args []bpf.USDTArg
	// argErr, when set, says why the arguments cannot be read (an
	// operand form gprobes does not read): push arg is refused, the
	// probe without it goes in
	argErr string
}

// usdtSites reads the file's notes for PROVIDER:NAME.
func usdtSites(path, provider, name string) ([]usdtSite, []string, error) {
	ef, err := elf.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer ef.Close()
	sec := ef.Section(".note.stapsdt")
	if sec == nil {
		return nil, nil, fmt.Errorf("%s has no static probes (no .note.stapsdt section)", path)
	}
	b, err := sec.Data()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: .note.stapsdt: %w", path, err)
	}
	var base uint64
	var hasBase bool
	if s := ef.Section(".stapsdt.base"); s != nil {
		base, hasBase = s.Addr, true
	}
	var out []usdtSite
	var all []string
	le := binary.LittleEndian
	for len(b) >= 12 {
		namesz, descsz, typ := le.Uint32(b), le.Uint32(b[4:]), le.Uint32(b[8:])
		b = b[12:]
		nlen, dlen := int(namesz+3)&^3, int(descsz+3)&^3
		if nlen > len(b) || nlen+dlen > len(b) || int(descsz) > dlen {
			return nil, nil, fmt.Errorf("%s: .note.stapsdt: a note runs past the section", path)
		}
		owner := string(bytes.TrimRight(b[:namesz], "\x00"))
		desc := b[nlen : nlen+int(descsz)]
		b = b[nlen+dlen:]
		if typ != 3 || owner != "stapsdt" || len(desc) < 24 {
			continue
		}
		pc, noteBase, sema := le.Uint64(desc), le.Uint64(desc[8:]), le.Uint64(desc[16:])
		strs := strings.SplitN(string(desc[24:]), "\x00", 4)
		if len(strs) < 3 {
			continue
		}
		all = append(all, strs[0]+":"+strs[1])
		if strs[0] != provider || strs[1] != name {
			continue
		}
		if hasBase && noteBase != 0 {
			pc += base - noteBase
		}
		site := usdtSite{pc: pc, sema: sema}
		site.args, err = parseUSDTArgs(strs[2], pc)
		if err != nil {
			site.argErr = err.Error()
		}
		out = append(out, site)
	}
	return out, all, nil
}

// parseUSDTArgs reads a note's argument descriptions: "SIZE@OPERAND"
// separated by spaces, SIZE negative for a signed value; OPERAND a
// register (%edi), a constant ($5), memory at a register plus a
// displacement (-16(%rbp), (%rax)), or a symbol relative to rip
// (counter(%rip), counter+8(%rip)), read at the symbol's address in the
// process. An index register (8(%rax,%rbx,8)) is refused.
func parseUSDTArgs(s string, pc uint64) ([]bpf.USDTArg, error) {
	var out []bpf.USDTArg
	for _, f := range strings.Fields(s) {
		sz, op, ok := strings.Cut(f, "@")
		if !ok {
			return nil, fmt.Errorf("argument %d %q: no SIZE@", len(out)+1, f)
		}
		n, err := strconv.Atoi(sz)
		if err != nil || n == 0 || abs(n) > 8 || abs(n)&(abs(n)-1) != 0 {
			return nil, fmt.Errorf("argument %d %q: size %q", len(out)+1, f, sz)
		}
		a := bpf.USDTArg{Size: abs(n), Signed: n < 0}
		switch {
		case strings.HasPrefix(op, "$"):
			v, err := strconv.ParseInt(op[1:], 0, 64)
			if err != nil {
				return nil, fmt.Errorf("argument %d %q: constant %q", len(out)+1, f, op)
			}
			a.Kind, a.Value = bpf.ArgConst, v
		case strings.HasPrefix(op, "%"):
			r, err := noteReg(op[1:])
			if err != nil {
				return nil, fmt.Errorf("argument %d %q: %v", len(out)+1, f, err)
			}
			a.Kind, a.Reg = bpf.ArgReg, r
		case strings.HasSuffix(op, ")") && strings.Contains(op, "("):
			i := strings.LastIndex(op, "(")
			disp, inner := op[:i], op[i+1:len(op)-1]
			if strings.Contains(inner, ",") {
				return nil, fmt.Errorf("argument %d %q: an index register: not read by gprobes", len(out)+1, f)
			}
			r, err := noteReg(strings.TrimPrefix(inner, "%"))
			if err != nil {
				return nil, fmt.Errorf("argument %d %q: %v", len(out)+1, f, err)
			}
			a.Kind, a.Reg = bpf.ArgMem, r
			if disp != "" {
				v, err := strconv.ParseInt(disp, 0, 64)
				if err != nil {
					return nil, fmt.Errorf("argument %d %q: a displacement gprobes does not read (%q: a symbol is read only relative to rip, not yet)", len(out)+1, f, disp)
				}
				a.Value = v
			}
		default:
			return nil, fmt.Errorf("argument %d %q: operand %q not read by gprobes", len(out)+1, f, op)
		}
		out = append(out, a)
	}
	return out, nil
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// noteReg is the 64-bit register a note's register name (any width) is
// part of: %eax, %ax and %al are rax's low bytes (the note's size says
// how many); the high bytes (%ah) are refused.
func noteReg(name string) (rpn.Reg, error) {
	alias := map[string]string{
		"eax": "rax", "ax": "rax", "al": "rax", "ebx": "rbx", "bx": "rbx", "bl": "rbx",
		"ecx": "rcx", "cx": "rcx", "cl": "rcx", "edx": "rdx", "dx": "rdx", "dl": "rdx",
		"esi": "rsi", "si": "rsi", "sil": "rsi", "edi": "rdi", "di": "rdi", "dil": "rdi",
		"ebp": "rbp", "bp": "rbp", "bpl": "rbp", "esp": "rsp", "sp": "rsp", "spl": "rsp",
	}
	n := strings.ToLower(name)
	if a, ok := alias[n]; ok {
		n = a
	} else if strings.HasPrefix(n, "r") {
		n = strings.TrimRight(n, "dwb") // r8d, r8w, r8b
	}
	r, ok := rpn.LookupReg(rpn.ArchX86_64, n)
	if !ok || r.Is32() {
		return 0, fmt.Errorf("register %%%s: not one gprobes reads", name)
	}
	return r.Canonical(), nil
}

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
		if uses && site.argErr != "" {
			return fail(fmt.Errorf("usdt = %s at %#x: %s", d.Loc.Text, site.pc, site.argErr))
		}
		foff, err := f.fileOffset(site.pc)
		if err != nil {
			return fail(err)
		}
		so := o
		so.Kind, so.Addr, so.Args = bpf.KindUprobe, site.pc, site.args
		so.Biased = f.biased(p.s.src, p.Index)
		prog, err := t.load(p.s, p, so)
		if err != nil {
			return fail(err)
		}
		uo := &link.UprobeOptions{Address: foff}
		if site.sema != 0 {
			if uo.RefCtrOffset, err = f.dataOffset(site.sema); err != nil {
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
	p.Addr = sites[0].pc
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
