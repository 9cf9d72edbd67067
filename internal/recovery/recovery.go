// Package recovery is what the recovery journals of the process and Xen
// targets share: a JSON file written atomically (a crash leaves the old
// one or the new one, never half of either), and the start time that
// names a process. The trap: a pid is used again, so an owner or a
// traced process is named by its pid and its start time together, never
// by its pid alone.
package recovery

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gprobes/gprobes/internal/outfile"
)

// Read reads the journal at path into v.
func Read(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// Write writes v to path atomically: a new file (a name of its own,
// created exclusively) renamed over the old one (internal/outfile).
func Write(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return outfile.WriteFile(path, b, 0o600)
}

// StartTime is a process's start time (clock ticks after boot, field 22
// of /proc/PID/stat). ok is false when the process is gone, or dead and
// not yet reaped (a zombie, whose pid names nothing that runs).
func StartTime(pid int) (start uint64, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	return v, err == nil
}

// Running reports whether the process pid that started at start still runs.
func Running(pid int, start uint64) bool {
	st, ok := StartTime(pid)
	return ok && st == start
}
