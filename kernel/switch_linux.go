//go:build linux

package kernel

import (
	"fmt"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
)

// Switching (docs/kernel.md, "Switching"): a module's switches are one
// switch map (bpf.NewSwitch, a byte per minor), made with the module and
// shared by every source inserted into it (--merge), as lv is: so a
// program of one source switches the probes of another, and a
// gprobes enable reaches them all. Each program's prologue checks its
// minor's byte before it counts anything.

// switchInsert gives a module its switch map (the first insert) and sets
// the switches of the source's minors as its probes say (enabled = no
// off, else on), before any of them is attached.
func (t *Target) switchInsert(mod *module, m *rpn.Module) error {
	if mod.sw == nil {
		sw, err := bpf.NewSwitch()
		if err != nil {
			return err
		}
		mod.sw = sw
	}
	for i := range m.Probes {
		d := &m.Probes[i]
		if err := bpf.SetSwitch(mod.sw, d.Minor, !d.Disabled); err != nil {
			return err
		}
	}
	return nil
}

// Switch switches a module's probes on or off (gprobes enable and
// disable): those with the given minors, or all of them; it returns how
// many probes that concerns (probe.Prober).
func (t *Target) Switch(name string, minors []uint16, on bool) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.module(name)
	if m == nil || m.sw == nil {
		return 0, fmt.Errorf("no module %q", name)
	}
	var have []uint16
	for _, s := range m.srcs {
		for _, p := range s.probes {
			have = append(have, p.def().Minor)
		}
	}
	var err error
	n, serr := probe.SwitchMinors(name, have, minors, func(mi uint16) {
		if e := bpf.SetSwitch(m.sw, mi, on); e != nil && err == nil {
			err = e
		}
	})
	if serr != nil {
		return 0, serr
	}
	return n, err
}

// disabledInfo gives a probe query shows active its disabled state:
// ended by max hits or rem, or switched off.
func (t *Target) disabledInfo(p *bprobe, c bpf.Counters, info *probe.Info) {
	if info.State != probe.StateActive {
		return
	}
	if c.Disabled {
		info.State, info.Reason = probe.StateDisabled, probe.ReasonEnded
		return
	}
	if sw := p.s.mod.sw; sw != nil {
		if off, err := bpf.SwitchedOff(sw, p.def().Minor); err == nil && off {
			info.State, info.Reason = probe.StateDisabled, probe.ReasonSwitchedOff(p.def().Minor)
		}
	}
}
