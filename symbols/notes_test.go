package symbols

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// note is one little-endian ELF note.
func note(name string, typ uint32, desc []byte) []byte {
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, uint32(len(name)+1))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(desc)))
	b = binary.LittleEndian.AppendUint32(b, typ)
	b = append(b, name...)
	b = append(b, 0)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	b = append(b, desc...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// TestNotesFile: a copy of /sys/kernel/notes (a Xen note, then the GNU
// build ID, then Linux's) opens as a table with the build ID and no
// symbols; notes without a build ID are refused.
func TestNotesFile(t *testing.T) {
	id := []byte{0x4a, 0x5a, 0x9b, 0x0a, 0xff, 0xb6, 0x6c, 0x43, 0x7a, 0xbc, 0xd4, 0x55, 0xd2, 0x73, 0x8a, 0xf8, 0x79, 0x98, 0x5f, 0xa9}
	notes := append(note("Xen", 6, []byte("linux\x00")), note("GNU", ntGNUBuildID, id)...)
	notes = append(notes, note("Linux", 0x100, []byte("6.1.0\x00"))...)
	dir := t.TempDir()
	path := filepath.Join(dir, "notes")
	os.WriteFile(path, notes, 0o644)
	tab, err := Open(path)
	if err != nil || tab.Format() != FormatNotes || !bytes.Equal(tab.BuildID(), id) || tab.Len() != 0 {
		t.Fatalf("%v %+v", err, tab)
	}
	if got := NotesBuildID(notes); !bytes.Equal(got, id) {
		t.Errorf("NotesBuildID: %x", got)
	}
	os.WriteFile(path, note("Xen", 6, []byte("linux\x00")), 0o644)
	if _, err := Open(path); !errors.Is(err, ErrUnknownFormat) {
		t.Errorf("notes without a build ID: %v", err)
	}
	if NotesBuildID(notes[:20]) != nil {
		t.Error("a truncated note gives a build ID")
	}
}
