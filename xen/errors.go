package xen

import "errors"

// ErrNotSupported is returned by Open and the Recover functions when
// gprobes was built for another system than Linux (xen_other.go): the Xen
// backend runs in a Linux dom0.
var ErrNotSupported = errors.New("xen: not supported on this OS: gprobes traces processes and guests from Linux")
