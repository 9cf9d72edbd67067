//go:build !linux

package coredump

// Regs stands for the Linux user_regs_struct (27 words on amd64) on
// systems without it, so that the package's types compile everywhere.
// Write and WriteFile refuse with ErrNotSupported there.
type Regs [regsSize / 8]uint64
