//go:build !linux

package main

import (
	"fmt"
	"runtime"

	"github.com/gprobes/gprobes/ptrace"
)

// liveErr stops the live commands (see live): the ptrace and Xen backends
// are Linux-only.
var liveErr = fmt.Errorf("%w (this is %s); check, build, disasm and sim work here", ptrace.ErrNotSupported, runtime.GOOS)
