package kernel

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
)

func gnuNote(id []byte) []byte {
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, 4)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(id)))
	b = binary.LittleEndian.AppendUint32(b, 3)
	return append(append(b, "GNU\x00"...), id...)
}

// TestSelectBuildModule: a kernel module's build is the one of its
// /sys/module/NAME/notes/.note.gnu.build-id (dashes in its name as
// underscores), the kernel image's that of /sys/kernel/notes; a pack
// without that build is refused naming both, and a module whose notes
// cannot be read has no build ID to choose by.
func TestSelectBuildModule(t *testing.T) {
	dir := t.TempDir()
	oldK, oldM := kernelNotes, moduleNotes
	t.Cleanup(func() { kernelNotes, moduleNotes = oldK, oldM })
	kernelNotes, moduleNotes = filepath.Join(dir, "kernel-notes"), filepath.Join(dir, "module")
	os.WriteFile(kernelNotes, gnuNote([]byte{1, 2, 3, 4}), 0o644)
	os.MkdirAll(filepath.Join(moduleNotes, "my_mod", "notes"), 0o755)
	os.WriteFile(filepath.Join(moduleNotes, "my_mod", "notes", ".note.gnu.build-id"), gnuNote([]byte{9, 9, 9, 9}), 0o644)

	tg := &Target{syms: &ksyms{release: "6.1.0-test"}}
	mk := func(name string, id ...byte) *rpn.Module {
		return &rpn.Module{Header: rpn.Header{Name: name, ModType: rpn.ModKernel}, BuildID: id}
	}
	a, b := mk("my-mod", 9, 9, 9, 9), mk("my-mod", 8, 8, 8, 8)
	s := &source{mod: &kmodule{Module: &probe.Module{Name: "my-mod"}, kmod: "my-mod"}, src: b, Source: &probe.Source{Builds: []*rpn.Module{b, a}}}
	if err := tg.selectBuild(s); err != nil || s.src != a {
		t.Fatalf("module: %v, took %x", err, s.src.BuildID)
	}
	s = &source{mod: &kmodule{Module: &probe.Module{Name: "my-mod"}, kmod: "my-mod"}, src: b, Source: &probe.Source{Builds: []*rpn.Module{b}}}
	err := tg.selectBuild(s)
	var be *probe.BuildError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "kernel module my-mod has build ID 09090909, the pack was built for 08080808") {
		t.Errorf("module, another build: %v", err)
	}
	k := mk("vmlinux", 1, 2, 3, 4)
	s = &source{mod: &kmodule{Module: &probe.Module{Name: "vmlinux"}}, src: k, Source: &probe.Source{Builds: []*rpn.Module{mk("vmlinux", 5), k}}}
	if err := tg.selectBuild(s); err != nil || s.src != k {
		t.Errorf("kernel: %v", err)
	}
	s = &source{mod: &kmodule{Module: &probe.Module{Name: "gone"}, kmod: "gone"}, src: a, Source: &probe.Source{Builds: []*rpn.Module{a, b}}}
	if err := tg.selectBuild(s); err == nil || !strings.Contains(err.Error(), "no build ID gprobes could read") {
		t.Errorf("a module without notes: %v", err)
	}
}
