package ptrace

import "github.com/gprobes/gprobes/internal/platform"

// ErrNotSupported is returned by every entry point of the package when
// gprobes was built for another system than Linux (ptrace_other.go): the
// offline commands work there, live tracing does not. It is
// platform.ErrNotSupported, the one value every backend returns.
var ErrNotSupported = platform.ErrNotSupported
