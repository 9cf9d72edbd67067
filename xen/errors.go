package xen

import "github.com/gprobes/gprobes/internal/platform"

// ErrNotSupported is returned by Open and the Recover functions when
// gprobes was built for another system than Linux (xen_other.go): the Xen
// backend runs in a Linux dom0. It is platform.ErrNotSupported, the one
// value every backend returns.
var ErrNotSupported = platform.ErrNotSupported
