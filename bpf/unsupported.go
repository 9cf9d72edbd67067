package bpf

import "github.com/gprobes/gprobes/internal/platform"

// ErrNotSupported is what the loaders and everything else that needs the
// running kernel return when gprobes was built for another system than
// Linux (load_other.go); the compiler works anywhere. It is
// platform.ErrNotSupported, the one value every backend returns.
var ErrNotSupported = platform.ErrNotSupported
