//go:build linux

package bpf

import (
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/rpn"
)

// NewLV makes an lv map of n words that several modules' maps can share
// (MapOptions.LV).
func NewLV(n int) (*ebpf.Map, error) {
	if n <= 0 || n > rpn.MaxVars {
		return nil, fmt.Errorf("bpf: an lv map of %d words", n)
	}
	mp, err := ebpf.NewMap(&ebpf.MapSpec{Name: "gp_lv", Type: ebpf.Array, KeySize: 4, ValueSize: uint32(n * 8), MaxEntries: 1, Flags: unix.BPF_F_MMAPABLE})
	if err != nil {
		return nil, missing("the gp_lv map", err)
	}
	return mp, nil
}

// ReadWords reads the words of a one-entry array map (lv, gv).
func ReadWords(mp *ebpf.Map) ([]uint64, error) {
	b, err := mp.LookupBytes(uint32(0))
	if err != nil {
		return nil, err
	}
	out := make([]uint64, len(b)/8)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(b[i*8:])
	}
	return out, nil
}

// WriteWords writes v over the first words of a one-entry array map, the
// others kept.
func WriteWords(mp *ebpf.Map, v []uint64) error {
	b, err := mp.LookupBytes(uint32(0))
	if err != nil {
		return err
	}
	for i, x := range v {
		if (i+1)*8 > len(b) {
			break
		}
		binary.LittleEndian.PutUint64(b[i*8:], x)
	}
	return mp.Update(uint32(0), b, ebpf.UpdateExist)
}
