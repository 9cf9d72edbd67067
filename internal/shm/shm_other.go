//go:build !linux

// Package shm is memory gprobes shares with the processes it probes; off
// Linux it is plain memory (no process is probed there).
package shm

import "unsafe"

type Mem struct {
	FD    int
	Bytes []byte
}

func Create(name string, size int) (*Mem, error) {
	return &Mem{FD: -1, Bytes: make([]byte, (size+4095)&^4095)}, nil
}

func (m *Mem) Words(off, n int) []uint64 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&m.Bytes[off])), n)
}

func (m *Mem) Word(off int) *uint64 { return (*uint64)(unsafe.Pointer(&m.Bytes[off])) }

func (m *Mem) Close() error { return nil }
