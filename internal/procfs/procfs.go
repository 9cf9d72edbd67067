// Package procfs reads the few facts of /proc that the recovery journals
// need. The trap: a pid is used again, so a process is named by its pid
// and its start time together, never by its pid alone.
package procfs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

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
