//go:build linux

package bpf

import (
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// NewSwitch makes a module's switch map (MapOptions.Switch): every minor
// on.
func NewSwitch() (*ebpf.Map, error) {
	mp, err := ebpf.NewMap(&ebpf.MapSpec{Name: "gp_switch", Type: ebpf.Array, KeySize: 4, ValueSize: SwitchSize, MaxEntries: 1, Flags: unix.BPF_F_MMAPABLE})
	if err != nil {
		return nil, missing("the gp_switch map", err)
	}
	return mp, nil
}

// SetSwitch switches minor on or off in a switch map: one byte written
// through the map's memory, so that the programs' own stores to other
// minors meanwhile are kept.
func SetSwitch(mp *ebpf.Map, minor uint16, on bool) error {
	mm, err := mp.Memory()
	if err != nil {
		return fmt.Errorf("bpf: the switch map's memory: %w", err)
	}
	b := []byte{1}
	if on {
		b[0] = 0
	}
	_, err = mm.WriteAt(b, int64(minor))
	return err
}

// SwitchedOff reports whether minor is switched off in a switch map.
func SwitchedOff(mp *ebpf.Map, minor uint16) (bool, error) {
	mm, err := mp.Memory()
	if err != nil {
		return false, fmt.Errorf("bpf: the switch map's memory: %w", err)
	}
	var b [1]byte
	if _, err := mm.ReadAt(b[:], int64(minor)); err != nil {
		return false, err
	}
	return b[0] != 0, nil
}
