package kernel

import (
	"os"
	"path/filepath"

	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/symbols"
)

// The kernel target binds a module to the build it runs (docs/ppdf.md,
// "Packs for customers"): the
// kernel image's build ID is in /sys/kernel/notes, a loaded kernel
// module's in /sys/module/NAME/notes/.note.gnu.build-id (the note the
// kernel keeps of the .ko's). Both are read at each placement, so a
// module unloaded and loaded again as another build is checked again.

// Where the kernel shows its notes; tests point them elsewhere.
var (
	kernelNotes = "/sys/kernel/notes"
	moduleNotes = "/sys/module"
)

// selectBuild takes, among the source's builds, the one of what runs now,
// or says why none is.
func (t *Target) selectBuild(s *source) error {
	have, where := t.runningBuildID(s.mod.kmod)
	b, err := probe.SelectBuild(s.Builds, have, where)
	if err != nil {
		return err
	}
	s.src = b
	return nil
}

// runningBuildID is the build ID of the running kernel (kmod "") or of a
// loaded kernel module, nil when the kernel does not show it, and how
// messages name it.
func (t *Target) runningBuildID(kmod string) ([]byte, string) {
	if kmod == "" {
		b, _ := os.ReadFile(kernelNotes)
		return symbols.NotesBuildID(b), "the running kernel (" + t.syms.release + ")"
	}
	b, _ := os.ReadFile(filepath.Join(moduleNotes, normMod(kmod), "notes", ".note.gnu.build-id"))
	return symbols.NotesBuildID(b), "kernel module " + kmod
}

var _ probe.PackInserter = (*Target)(nil)
