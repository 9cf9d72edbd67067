// Package platform declares what every live backend returns when gprobes
// was built for another system than Linux. It is a leaf: ptrace, xen,
// coredump, bpf and kernel re-export its ErrNotSupported, so one
// errors.Is test holds for all of them.
package platform

import "errors"

// ErrNotSupported is the one error of a live entry point (tracing a
// process, a Xen guest or the kernel, writing a core) on a build for
// another system than Linux. The offline commands (check, build, disasm,
// sim) work there. ptrace, xen, coredump, bpf and kernel re-export it as
// their own ErrNotSupported: the same value, so errors.Is(err,
// ptrace.ErrNotSupported) also holds for an error of xen or kernel.
var ErrNotSupported = errors.New("not supported on this OS: gprobes traces processes, guests and the kernel from Linux")
