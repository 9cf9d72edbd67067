package ptrace

import "errors"

// ErrNotSupported is returned by every entry point of the package when
// gprobes was built for another system than Linux (ptrace_other.go): the
// offline commands work there, live tracing does not.
var ErrNotSupported = errors.New("ptrace: not supported on this OS: gprobes traces processes and guests from Linux")
