//go:build !linux

package bpf

import "github.com/cilium/ebpf"

// FollowMax is how many processes a Follow set holds at once.
const FollowMax = 1 << 16

// Follow is a process and every process it starts (Linux only).
type Follow struct{ Map *ebpf.Map }

// NewFollow returns ErrNotSupported.
func NewFollow(pid uint32) (*Follow, error) { return nil, ErrNotSupported }

// Full is 0.
func (f *Follow) Full() uint64 { return 0 }

// Close does nothing.
func (f *Follow) Close() error { return nil }
