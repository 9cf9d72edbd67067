//go:build !linux

package kernel

import (
	"time"

	"github.com/gprobes/gprobes/probe"
)

// Options configure the kernel target (see the Linux build).
type Options struct {
	Sink     probe.Sink
	Warn     func(msg string)
	RingSize int
	PID      int
	Children bool
	Symbols  []string
	Poll     time.Duration
	User     bool
}

// Target is the running kernel; it cannot be opened off Linux.
type Target struct{ probe.Prober }

// Start fails off Linux.
func Start(o Options) (*Target, error) { return nil, ErrNotSupported }

// GV is the kernel target's global variables.
func (t *Target) GV(n int) []uint64 { return nil }
