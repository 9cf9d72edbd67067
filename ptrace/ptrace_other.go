//go:build !linux

package ptrace

import (
	"os"

	"github.com/gprobes/gprobes/engine"
)

// On systems other than Linux the package keeps the entry points the rest
// of gprobes calls (the openers and the journal recovery), each failing
// with ErrNotSupported, so that the offline commands (check, build,
// disasm, sim) build and run there. The Tracer, the Target and the rest
// of the Linux API have no counterpart; their documentation is in the
// _linux.go files.

// Exec fails with ErrNotSupported when the engine opens it.
func Exec(path string, argv, env []string, dir string, files ...*os.File) func() (engine.Target, error) {
	return func() (engine.Target, error) { return nil, ErrNotSupported }
}

// Attach fails with ErrNotSupported when the engine opens it.
func Attach(pid int) func() (engine.Target, error) {
	return func() (engine.Target, error) { return nil, ErrNotSupported }
}

// Recover returns ErrNotSupported.
func Recover() ([]string, error) { return nil, ErrNotSupported }

// RecoverOwner returns ErrNotSupported.
func RecoverOwner(owner int) ([]string, error) { return nil, ErrNotSupported }

// RecoverDir returns ErrNotSupported.
func RecoverDir(dir string, owner int) ([]string, error) { return nil, ErrNotSupported }
