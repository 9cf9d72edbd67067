// Package shm is memory gprobes shares with the processes it probes: a
// memfd, mapped in gprobes and, through its file descriptor, in a process
// (jump pads' data region, the daemon's global variables).
package shm

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Mem is a memfd and gprobes' mapping of it.
type Mem struct {
	FD    int
	Bytes []byte
}

// Create makes a memfd of size bytes (rounded up to pages) and maps it.
func Create(name string, size int) (*Mem, error) {
	size = (size + 4095) &^ 4095
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("size the shared memory: %w", err)
	}
	b, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("map the shared memory: %w", err)
	}
	return &Mem{FD: fd, Bytes: b}, nil
}

// Words returns n 8-byte words at byte offset off, aliasing the mapping.
func (m *Mem) Words(off, n int) []uint64 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&m.Bytes[off])), n)
}

// Word returns a pointer to the 8-byte word at off, for atomic access.
func (m *Mem) Word(off int) *uint64 { return (*uint64)(unsafe.Pointer(&m.Bytes[off])) }

// Close unmaps and closes. Processes keep their own mappings.
func (m *Mem) Close() error {
	if m == nil || m.Bytes == nil {
		return nil
	}
	err := unix.Munmap(m.Bytes)
	unix.Close(m.FD)
	m.Bytes = nil
	return err
}
