package bpf

import (
	"github.com/cilium/ebpf/asm"

	"github.com/gprobes/gprobes/rpn"
)

// Switching (docs/kernel.md, "Switching"): the switches of a
// module are one byte per minor, 0 on and 1 off, in a one-entry array of
// SwitchSize bytes (Maps.Switch, NewSwitch), byte m for minor m. The
// sources of one module inserted with --merge share it (MapOptions.Switch,
// as they share lv), so that enable and disable reach the probes of every
// source, and any minor's byte has its address before a probe of it is
// placed.
//
// The prologue loads the probe's minor's byte, after the process filter
// and before anything is counted: a probe switched off is no hit (no
// hits, no skipped, no run). enable MINOR and disable MINOR store 0 and 1
// to MINOR's byte (a single byte store, seen by every later hit on every
// CPU). gprobes switches from outside by writing the map's memory (it is
// mmapable: SetSwitch).

// SwitchSize is the bytes of a module's switch map: one per minor.
const SwitchSize = 1 << 16

// MapSwitch is the switch map's name in a program compiled without Maps.
const MapSwitch = "gprobes_switch"

// switchBase loads into dst the address of minor's byte in the switch map.
func (c *compiler) switchBase(dst asm.Register, minor uint16) {
	c.mapRef(dst, MapSwitch, c.maps().Switch, true, uint32(minor))
}

// switchCheck is the prologue's: a probe switched off returns at once.
func (c *compiler) switchCheck() {
	c.switchBase(asm.R1, c.pr.Minor)
	c.emit(asm.LoadMem(asm.R2, asm.R1, 0, asm.Byte))
	c.a.jmpImm(asm.JNE, asm.R2, 0, c.lDone, false)
}

// switchStore compiles enable and disable.
func (c *compiler) switchStore(in rpn.Insn) {
	v := int64(0)
	if in.Op == rpn.OpDisable {
		v = 1
	}
	c.switchBase(asm.R1, in.B)
	c.emit(asm.StoreImm(asm.R1, 0, v, asm.Byte))
}
