package coredump

import "github.com/gprobes/gprobes/internal/platform"

// ErrNotSupported is returned by Write and WriteFile when gprobes was built
// for another system than Linux: a core is made of a Linux process's /proc
// files and ptrace registers. It is platform.ErrNotSupported, the one
// value every backend returns.
var ErrNotSupported = platform.ErrNotSupported
