package ptrace

import "github.com/gprobes/gprobes/internal/procmaps"

// Mapping is one line of /proc/PID/maps.
type Mapping = procmaps.Mapping

// Maps reads the memory map of a process.
func Maps(pid int) ([]Mapping, error) { return procmaps.Read(pid) }
