package xen

import (
	"errors"
	"fmt"

	"github.com/gprobes/gprobes/engine"
)

// InsertBreakpoint takes a free debug register (modes auto and dr) or
// writes an int3/int1 byte. Debug registers reach every vCPU when the
// domain runs next.
func (t *Target) InsertBreakpoint(space int, addr uint64, orig []byte) error {
	mode := t.opts.Breakpoints
	if mode == BreakAuto || mode == BreakDR {
		for i, a := range t.dr {
			if a == 0 && t.wdr[i] == nil {
				t.dr[i] = addr
				if err := t.writeJournal(); err != nil {
					t.dr[i] = 0
					return err
				}
				delete(t.drGone, addr)
				return nil
			}
		}
		if mode == BreakDR {
			return fmt.Errorf("%#x: the four debug registers hold probes and watches already (breakpoints = dr%s)", addr, t.drHint())
		}
	}
	op := byte(opInt3)
	if mode == BreakInt1 {
		op = opInt1
	}
	if len(orig) == 0 {
		return fmt.Errorf("no original byte for %#x", addr)
	}
	// journaled first: a gprobes that dies between the two leaves a
	// journal whose byte is not in, which recovery skips
	t.bps[addr], t.orig[addr] = true, orig[0]
	if err := t.writeJournal(); err != nil {
		delete(t.bps, addr)
		return err
	}
	if err := t.WriteMem(0, addr, []byte{op}); err != nil {
		delete(t.bps, addr)
		return errors.Join(err, t.writeJournal())
	}
	if tr, err := t.translate(addr); err == nil { // the write just used it
		fn := tr.Phys >> 12
		t.unframe(addr) // counted once, should it be in already
		t.bpFrame[addr] = fn
		t.bpsIn[fn]++
	}
	delete(t.gone, addr)
	return nil
}

// dropWritable unmaps, before the domain runs on, the writable mappings
// of frames that hold none of gprobes' breakpoint bytes. On a PV domain a
// frame dom0 maps writable cannot become a page table or a descriptor
// table of the guest: Xen refuses the type change, the guest's pin
// (mmuext_op) fails with EINVAL and the guest process it was for dies. A
// kernel module's text freed by rmmod, a page a probe wrote, is soon
// reused as one. A breakpoint taken out for a step in place keeps its
// frame's mapping (Step does not come here); one taken out for good, or
// forgotten with the module, loses it at the next Resume. Only the frames
// that changed since the last Resume are looked at (loose): a hit costs a
// lookup or two, whatever the number of probes.
func (t *Target) dropWritable() {
	for fn := range t.loose {
		if b, ok := t.wframes[fn]; ok && t.bpsIn[fn] == 0 {
			UnmapFrame(b)
			delete(t.wframes, fn)
		}
	}
	clear(t.loose)
}

// unframe drops addr's breakpoint byte from its frame's count; a frame
// left with none is looked at by the next dropWritable.
func (t *Target) unframe(addr uint64) {
	fn, ok := t.bpFrame[addr]
	if !ok {
		return
	}
	delete(t.bpFrame, addr)
	if t.bpsIn[fn]--; t.bpsIn[fn] <= 0 {
		delete(t.bpsIn, fn)
		t.loose[fn] = true
	}
}

func (t *Target) RemoveBreakpoint(space int, addr uint64, orig []byte) error {
	for i, a := range t.dr {
		if a == addr {
			t.dr[i] = 0
			t.drGone[addr] = true
			return t.writeJournal()
		}
	}
	if len(orig) == 0 {
		return fmt.Errorf("no original byte for %#x", addr)
	}
	if err := t.WriteMem(0, addr, orig[:1]); err != nil {
		return err
	}
	delete(t.bps, addr)
	t.unframe(addr)
	delete(t.orig, addr)
	t.gone[addr] = true
	return t.writeJournal()
}

// TrapPC: a vCPU stops past an int3/int1 byte (a trap), on a debug
// register's address (a fault).
func (t *Target) TrapPC(tid int, rip uint64) uint64 {
	if v, err := t.vcpu(tid); err == nil && (t.why[v] == stopDR || t.why[v] == stopWatch) {
		return rip
	}
	return rip - 1
}

// OS: a Linux guest kernel (linuxkernel.Guest).
func (t *Target) OS() engine.OS { return t.os }
