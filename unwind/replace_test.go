package unwind

import (
	"debug/elf"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/gprobes/gprobes/internal/testkit"
)

// A file replaced at the same path (a program rebuilt while a daemon
// runs) is another file: frames in a mapping of the new one are named
// from it, frames in the old one's mapping still from the old one.
func TestReplacedFile(t *testing.T) {
	dir := t.TempDir()
	src := func(name string) string {
		p := filepath.Join(dir, name+".c")
		os.WriteFile(p, []byte("int "+name+"(int x) { return x * 3 + 1; }\nint main(void) { return "+name+"(1) == 4 ? 0 : 1; }\n"), 0o644)
		return p
	}
	a := testkit.CC(t, "replaced-a", "-O2", "-no-pie", src("first_a"))
	b := testkit.CC(t, "replaced-b", "-O2", "-no-pie", src("first_b"))
	path := filepath.Join(dir, "prog")
	mapping := func(from string) (Mapping, uint64) {
		data, _ := os.ReadFile(from)
		// the old file lives on under another name (as a running
		// program's does), the new one is renamed to the path
		os.Link(path, path+".old."+filepath.Base(from))
		if err := os.WriteFile(path+".new", data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		f, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		syms, _ := f.Symbols()
		var fn uint64
		for _, s := range syms {
			if s.Name == "first_a" || s.Name == "first_b" {
				fn = s.Value
			}
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
				return Mapping{Start: p.Vaddr, End: p.Vaddr + p.Memsz, Offset: p.Off, Path: path, Dev: "00:01", Inode: st.Ino}, fn
			}
		}
		t.Fatal("no text segment")
		return Mapping{}, 0
	}
	u := New()
	ma, fa := mapping(a)
	if got := u.Name([]uint64{fa}, 1, Modules{ma}); got[0].Function != "first_a" {
		t.Fatalf("first file: %+v", got)
	}
	mb, fb := mapping(b)
	if ma.Inode == mb.Inode {
		t.Fatalf("the new file has the old one's inode %d", ma.Inode)
	}
	if got := u.Name([]uint64{fb}, 1, Modules{mb}); got[0].Function != "first_b" {
		t.Errorf("the file replaced at the same path: %+v, want first_b", got)
	}
	if got := u.Name([]uint64{fa}, 1, Modules{ma}); got[0].Function != "first_a" {
		t.Errorf("the old file's mapping: %+v, want first_a", got)
	}
}
