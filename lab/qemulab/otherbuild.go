package qemulab

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
)

// OtherBuild is a copy of an ELF file (a lab .ko) with one byte of its
// build ID changed: another build of the same module, for packs and
// build checks. id is the file's build ID, other the copy's.
func OtherBuild(path string) (data, id, other []byte, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, nil, err
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	sec := f.Section(".note.gnu.build-id")
	if sec == nil {
		return nil, nil, nil, fmt.Errorf("%s has no .note.gnu.build-id", path)
	}
	note, err := sec.Data()
	if err != nil || len(note) < 16+20 {
		return nil, nil, nil, fmt.Errorf("%s's build-ID note: %x %v", path, note, err)
	}
	id = bytes.Clone(note[16:])
	other = bytes.Clone(id)
	other[0] ^= 0xff
	data = bytes.Clone(b)
	copy(data[sec.Offset+16:], other)
	return data, id, other, nil
}
