package coredump

import "errors"

// ErrNotSupported is returned by Write and WriteFile when gprobes was built
// for another system than Linux: a core is made of a Linux process's /proc
// files and ptrace registers.
var ErrNotSupported = errors.New("coredump: not supported on this OS: gprobes traces processes and guests from Linux")
