package kernel

import "github.com/gprobes/gprobes/internal/platform"

// ErrNotSupported is what Start returns when gprobes was built for another
// system than Linux (target_other.go): the kernel target is Linux's eBPF.
// It is platform.ErrNotSupported, the one value every backend returns.
var ErrNotSupported = platform.ErrNotSupported
