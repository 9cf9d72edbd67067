//go:build !linux

package xen

import (
	"time"

	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/linuxkernel"
)

// On systems other than Linux the package keeps what the rest of gprobes
// calls (Open with its Options, Recover), failing with ErrNotSupported,
// and the parts that need no hypervisor (Context, the page-table walker).
// The Hypervisor, the event channel and the Target are Linux-only; their
// documentation is in the _linux.go files.

// Options configure a Xen target (see target_linux.go).
type Options struct {
	linuxkernel.Options
	Breakpoints string
	Poll        time.Duration
}

// Breakpoint modes.
const (
	BreakAuto = "auto"
	BreakDR   = "dr"
	BreakInt3 = "int3"
	BreakInt1 = "int1"
)

// Open fails with ErrNotSupported when the engine opens it.
func Open(dom int, opts Options) func() (engine.Target, error) {
	return func() (engine.Target, error) { return nil, ErrNotSupported }
}

// Recover returns ErrNotSupported.
func Recover() ([]string, error) { return nil, ErrNotSupported }

// RecoverOwner: nothing to put back where Xen cannot be probed.
func RecoverOwner(owner int) ([]string, error) { return nil, ErrNotSupported }
