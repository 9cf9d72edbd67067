package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/usdt"
)

// USDT on a process (docs/global.md, "USDT"): a usdt = PROVIDER:NAME
// probe goes on every site of that name in its file's .note.stapsdt
// (package usdt), at the site's address plus the file's load bias, each
// site a placement of the one probe (a breakpoint, or a jump where its
// program runs in a pad): query shows one probe whose hits are those of
// all its sites. push arg,N reads the argument where the note of the
// site hit says. A semaphore-guarded probe counts the semaphore (a
// 2-byte counter in the process's data) up once per probe while it is
// in a space, and down when it leaves (remove, detach): the program's
// "if (PROBE_ENABLED())" holds exactly while a probe is in.

// usdtNop is the instruction sys/sdt.h puts at a site on x86-64 (nop).
const usdtNop = 0x90

// usdtIn is a usdt probe in one space: its sites (addresses in the
// space) with where their arguments are, and the semaphores it counted
// up there.
type usdtIn struct {
	addrs []uint64
	args  map[uint64][]usdt.Arg
	semas []uint64
}

// usdtArgs are the arguments of probe p's site at addr in sp, nil when p
// is no usdt probe.
func (sp *space) usdtArgs(p *eprobe, addr uint64) []usdt.Arg {
	if in := sp.usdt[p]; in != nil {
		return in.args[addr]
	}
	return nil
}

// Arg is rpn.ArgEnv: argument n (from 1) of the usdt site hit, as its
// note says, sign- or zero-extended from its size.
func (h *hitEnv) Arg(n int) (uint64, bool) {
	if n < 1 || n > len(h.args) {
		return 0, false
	}
	return h.args[n-1].Read(func(r rpn.Reg) (uint64, bool) {
		if int(r) >= len(h.th.regs) {
			return 0, false
		}
		return h.th.regs[r], true
	}, func(addr uint64, p []byte) bool {
		return h.e.tgt.ReadMem(h.th.space, addr, p) == nil
	})
}

var _ rpn.ArgEnv = (*hitEnv)(nil)

// maxArg is the highest N of the push arg,N of probe pi's program, 0
// when it reads none.
func maxArg(p *rpn.Program, pi int) int {
	n := 0
	for i := p.Entry(pi); i < p.End(pi); i++ {
		if in := p.Insn(i); in.Op == rpn.OpPushArg {
			n = max(n, int(in.A))
		}
	}
	return n
}

// placeUSDT puts a usdt probe on every site of its name in one space,
// and counts its semaphores up; where one site cannot take it, none does.
func (e *Engine) placeUSDT(sp *space, inst *instance, p *eprobe) {
	if _, ok := p.in[sp.id]; ok {
		return
	}
	d := inst.def(p)
	refuse := func(st ProbeState, format string, args ...any) {
		if len(p.in) == 0 {
			p.State, p.Reason = st, fmt.Sprintf(format, args...)
		}
	}
	if inst.ld.USDT == nil {
		refuse(StateRefused, "usdt = %s: this target cannot read %s's static probes", d.Loc.Text, inst.key)
		return
	}
	prov, name, _ := strings.Cut(d.Loc.Text, ":")
	sites, all, err := inst.ld.USDT(prov, name)
	if err != nil {
		refuse(StateRefused, "usdt = %s: %v", d.Loc.Text, err)
		return
	}
	if len(sites) == 0 {
		if len(all) > 12 {
			all = append(all[:12], fmt.Sprintf("and %d more", len(all)-12))
		}
		refuse(StateRefused, "usdt = %s: %s has no such static probe (it has %s)", d.Loc.Text, inst.key, strings.Join(all, ", "))
		return
	}
	if n := maxArg(inst.prog, p.Index); n > 0 {
		for _, s := range sites {
			if s.ArgErr != "" {
				refuse(StateRefused, "usdt = %s at %#x: %s", d.Loc.Text, s.PC, s.ArgErr)
				return
			}
			if n > len(s.Args) {
				refuse(StateRefused, "usdt = %s at %#x: push arg,%d: the probe's note describes %d arguments", d.Loc.Text, s.PC, n, len(s.Args))
				return
			}
		}
	}
	in := &usdtIn{args: map[uint64][]usdt.Arg{}}
	undo := func() {
		for _, a := range in.addrs {
			if err := e.unplaceAt(sp, a, p); err != nil {
				e.warn(fmt.Sprintf("usdt = %s: take the site at %#x out again: %v", d.Loc.Text, a, err))
			}
		}
		delete(p.in, sp.id)
	}
	var how string
	for _, s := range sites {
		addr := s.PC + inst.bias
		if _, dup := in.args[addr]; dup {
			continue
		}
		delete(p.in, sp.id) // placeAt marks it; the probe is in once every site is
		st, why := e.placeAt(sp, inst, p, d, s.PC)
		if why != "" {
			undo()
			refuse(st, "usdt = %s, its site at %#x: %s", d.Loc.Text, addr, why)
			return
		}
		if how == "" {
			how = p.How
		}
		in.addrs = append(in.addrs, addr)
		in.args[addr] = s.Args
	}
	// the semaphores, each once
	seen := map[uint64]bool{}
	for _, s := range sites {
		if s.Sema == 0 || seen[s.Sema] {
			continue
		}
		seen[s.Sema] = true
		a := s.Sema + inst.bias
		if err := e.addSemaphore(sp, a, 1); err != nil {
			if derr := e.dropSemaphores(sp, in); derr != nil {
				// the ones counted up before this one stay up: the
				// process runs their guarded code (no probe is there)
				e.warn(fmt.Sprintf("usdt = %s, refused: %v", d.Loc.Text, derr))
			}
			undo()
			refuse(StateRefused, "usdt = %s: its semaphore at %#x: %v", d.Loc.Text, a, err)
			return
		}
		in.semas = append(in.semas, a)
	}
	if sp.usdt == nil {
		sp.usdt = map[*eprobe]*usdtIn{}
	}
	sp.usdt[p] = in
	p.in[sp.id] = in.addrs[0]
	p.Addr = in.addrs[0]
	p.State, p.Reason = StateActive, ""
	p.How = how
	if len(in.addrs) > 1 {
		p.How = fmt.Sprintf("%s (%d sites)", how, len(in.addrs))
	}
}

// addSemaphore adds delta to the 2-byte semaphore at addr in sp. The
// target's journal (SemaphoreJournaler) learns of a +1 after it is
// written and of a -1 before: a gprobes killed in between leaves the
// semaphore counted up (harmless: the program computes arguments for a
// nop), never counted down twice (another tool's count taken away).
func (e *Engine) addSemaphore(sp *space, addr uint64, delta int) error {
	sj := e.ab.journaler
	if sj != nil && delta < 0 {
		if err := sj.JournalSemaphore(sp.id, addr, delta); err != nil {
			e.warn(fmt.Sprintf("usdt semaphore at %#x: %v", addr, err))
		}
	}
	if err := e.writeSemaphore(sp, addr, delta); err != nil {
		return err
	}
	if sj != nil && delta > 0 {
		if err := sj.JournalSemaphore(sp.id, addr, delta); err != nil {
			e.warn(fmt.Sprintf("usdt semaphore at %#x: %v", addr, err))
		}
	}
	return nil
}

func (e *Engine) writeSemaphore(sp *space, addr uint64, delta int) error {
	var b [2]byte
	if err := e.tgt.ReadMem(sp.id, addr, b[:]); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	v := int(binary.LittleEndian.Uint16(b[:])) + delta
	if v < 0 || v > 0xffff {
		return fmt.Errorf("it is %d: cannot count it %+d", v-delta, delta)
	}
	binary.LittleEndian.PutUint16(b[:], uint16(v))
	if err := e.tgt.WriteMem(sp.id, addr, b[:]); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// dropSemaphores counts down the semaphores a usdt probe counted up in
// sp.
func (e *Engine) dropSemaphores(sp *space, in *usdtIn) error {
	var errs []error
	for _, a := range in.semas {
		if err := e.addSemaphore(sp, a, -1); err != nil {
			errs = append(errs, fmt.Errorf("count the usdt semaphore at %#x down: %w", a, err))
		}
	}
	in.semas = nil
	return errors.Join(errs...)
}

// unplaceUSDT takes a usdt probe off every site in sp and counts its
// semaphores down.
func (e *Engine) unplaceUSDT(sp *space, p *eprobe) error {
	in := sp.usdt[p]
	if in == nil {
		return nil
	}
	delete(sp.usdt, p)
	var errs []error
	for _, a := range in.addrs {
		if err := e.unplaceAt(sp, a, p); err != nil {
			errs = append(errs, err)
		}
	}
	if !sp.detached && !sp.unmapped {
		errs = append(errs, e.dropSemaphores(sp, in))
	}
	return errors.Join(errs...)
}

// releaseSemaphores counts down every usdt semaphore of sp (at detach:
// the probes' breakpoints and pads go next).
func (e *Engine) releaseSemaphores(sp *space) error {
	var errs []error
	for _, in := range sp.usdt {
		errs = append(errs, e.dropSemaphores(sp, in))
	}
	return errors.Join(errs...)
}

// usdtForked gives a child the usdt probes of its parent: its memory is
// a copy, the semaphores counted up included, and so are the
// breakpoints and pads.
func (e *Engine) usdtForked(child, parent *space) {
	if len(parent.usdt) == 0 {
		return
	}
	child.usdt = map[*eprobe]*usdtIn{}
	for p, in := range parent.usdt {
		c := *in
		c.semas = append([]uint64(nil), in.semas...)
		child.usdt[p] = &c
	}
}

// usdtUnmapped forgets the usdt probes of src in sp once its file is
// unmapped (dlclose): the sites and the semaphores went with it, nothing
// is written back (the breakpoints are forgotten by the caller); the
// journal forgets the semaphores too.
func (e *Engine) usdtUnmapped(sp *space, src *rpn.Module) {
	sj := e.ab.journaler
	for p, in := range sp.usdt {
		if p.src != src {
			continue
		}
		if sj != nil {
			for _, a := range in.semas {
				if err := sj.JournalSemaphore(sp.id, a, -1); err != nil {
					e.warn(fmt.Sprintf("usdt semaphore at %#x: %v", a, err))
				}
			}
		}
		delete(sp.usdt, p)
	}
}
