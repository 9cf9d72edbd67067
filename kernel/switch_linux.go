//go:build linux

package kernel

import (
	"fmt"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/probe"
)

// Switching (docs/kernel.md, "Switching"): a module's switches are one
// switch map (bpf.NewSwitch, a byte per minor), made with the module and
// shared by every source inserted into it (--merge), as lv is: so a
// program of one source switches the probes of another, and a
// gprobes enable reaches them all. Each program's prologue checks its
// minor's byte before it counts anything.

// SetSwitch switches a minor of a module on or off, the module's switch
// map made at the first (probe.Book sets the switches of a source's
// minors as its probes say before any of them is attached).
func (k kmech) SetSwitch(m *probe.Module, minor uint16, on bool) error {
	km := m.Impl.(*kmodule)
	if km.sw == nil {
		sw, err := bpf.NewSwitch()
		if err != nil {
			return err
		}
		km.sw = sw
	}
	return bpf.SetSwitch(km.sw, minor, on)
}

// SwitchedOff reports whether a minor of a module is switched off.
func (k kmech) SwitchedOff(m *probe.Module, minor uint16) bool {
	km := m.Impl.(*kmodule)
	if km.sw == nil {
		return false
	}
	off, err := bpf.SwitchedOff(km.sw, minor)
	if err != nil {
		k.t.warn(fmt.Sprintf("module %s: reading the switch of minor %d: %v", m.Name, minor, err))
	}
	return off
}

// Switch switches a module's probes on or off (gprobes enable and
// disable): those with the given minors, or all of them; it returns how
// many probes that concerns (probe.Book.Switch).
func (t *Target) Switch(name string, minors []uint16, on bool) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.book.Switch(name, minors, on)
}
