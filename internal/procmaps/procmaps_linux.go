// Package procmaps reads /proc/PID/maps: the process target places probes
// and pads with it, the kernel target names user stack frames with it.
package procmaps

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	Start, End uint64
	Perm       string // "r-xp"
	Offset     uint64
	Dev        string // "fd:01": the file's device, major:minor in hex
	Inode      uint64
	Path       string // file path, "[heap]", "[stack]", "" for anonymous
}

// Exec reports whether the mapping is executable.
func (m Mapping) Exec() bool { return len(m.Perm) > 2 && m.Perm[2] == 'x' }

// Read reads the memory map of a process.
func Read(pid int) ([]Mapping, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Mapping
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		var m Mapping
		m.Start, _ = strconv.ParseUint(lo, 16, 64)
		m.End, _ = strconv.ParseUint(hi, 16, 64)
		m.Perm = fields[1]
		m.Offset, _ = strconv.ParseUint(fields[2], 16, 64)
		m.Dev = fields[3]
		m.Inode, _ = strconv.ParseUint(fields[4], 10, 64)
		if len(fields) >= 6 {
			// the path is the rest of the line after the inode column
			idx := strings.Index(line, fields[4]+" ")
			if idx >= 0 {
				m.Path = strings.TrimSpace(line[idx+len(fields[4]):])
			} else {
				m.Path = fields[5]
			}
		}
		out = append(out, m)
	}
	return out, sc.Err()
}
