package coredump

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// mapping is one line of /proc/PID/maps, with the VmFlags of smaps when
// they could be read.
type mapping struct {
	start, end uint64
	perms      string // "rwxp" as in maps
	offset     uint64
	path       string          // the rest of the line: a file, [heap], [stack], …, or ""
	flags      map[string]bool // VmFlags of smaps; nil without smaps
	anonKB     uint64          // "Anonymous:" of smaps: pages copied on write
}

func (m *mapping) readable() bool { return len(m.perms) > 0 && m.perms[0] == 'r' }
func (m *mapping) writable() bool { return len(m.perms) > 1 && m.perms[1] == 'w' }
func (m *mapping) exec() bool     { return len(m.perms) > 2 && m.perms[2] == 'x' }
func (m *mapping) shared() bool   { return len(m.perms) > 3 && m.perms[3] == 's' }

// fileBacked reports whether the mapping has a file behind it (what the
// kernel lists in NT_FILE): maps shows a path for those, pseudo-names in
// brackets for the others.
func (m *mapping) fileBacked() bool { return strings.HasPrefix(m.path, "/") }

// rereadable reports whether the file behind a mapping still holds what
// the mapping shows, so a debugger can take it from there: the file is
// still there, and no page was copied on write (relocated data made
// read-only afterwards, such as the dynamic section that holds the
// debugger's link map). Without smaps nothing is known to be rereadable.
func (m *mapping) rereadable() bool {
	return m.fileBacked() && m.flags != nil && m.anonKB == 0 &&
		!strings.HasSuffix(m.path, " (deleted)") &&
		!strings.HasPrefix(m.path, "/memfd:") && !strings.HasPrefix(m.path, "/SYSV")
}

// readMaps reads smaps (maps with VmFlags) in a /proc/PID or
// /proc/PID/task/TID directory, or maps when smaps is missing.
func readMaps(dir string) ([]mapping, error) {
	data, err := os.ReadFile(dir + "/smaps")
	if err != nil {
		var err2 error
		if data, err2 = os.ReadFile(dir + "/maps"); err2 != nil {
			return nil, fmt.Errorf("memory map: %w", err)
		}
	}
	var maps []mapping
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "VmFlags:"); ok {
			if len(maps) > 0 {
				m := &maps[len(maps)-1]
				m.flags = map[string]bool{}
				for _, f := range strings.Fields(rest) {
					m.flags[f] = true
				}
			}
			continue
		}
		if rest, ok := strings.CutPrefix(line, "Anonymous:"); ok {
			if len(maps) > 0 {
				kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				maps[len(maps)-1].anonKB = kb
			}
			continue
		}
		m, ok, err := parseMapsLine(line)
		if err != nil {
			return nil, fmt.Errorf("%s/smaps: %w", dir, err)
		}
		if ok {
			maps = append(maps, m)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s/smaps: %w", dir, err)
	}
	return maps, nil
}

// parseMapsLine parses "start-end perms offset dev inode path". Lines of
// smaps that are not mapping headers ("Rss:   4 kB") give ok false.
func parseMapsLine(line string) (m mapping, ok bool, err error) {
	rest := line
	field := func() string {
		rest = strings.TrimLeft(rest, " \t")
		i := strings.IndexAny(rest, " \t")
		if i < 0 {
			f := rest
			rest = ""
			return f
		}
		f := rest[:i]
		rest = rest[i:]
		return f
	}
	rng := field()
	lo, hi, found := strings.Cut(rng, "-")
	if !found {
		return m, false, nil // an smaps field line
	}
	if m.start, err = strconv.ParseUint(lo, 16, 64); err != nil {
		return m, false, nil
	}
	if m.end, err = strconv.ParseUint(hi, 16, 64); err != nil {
		return m, false, fmt.Errorf("bad line %q", line)
	}
	m.perms = field()
	off := field()
	field() // device
	field() // inode
	if len(m.perms) != 4 || m.end <= m.start {
		return m, false, fmt.Errorf("bad line %q", line)
	}
	if m.offset, err = strconv.ParseUint(off, 16, 64); err != nil {
		return m, false, fmt.Errorf("bad line %q", line)
	}
	m.path = strings.TrimLeft(rest, " \t")
	return m, true, nil
}

// procStat is what the core needs from /proc/PID/stat (or a task's stat).
type procStat struct {
	comm                         string
	state                        byte
	ppid, pgrp, sid              int
	flags                        uint64
	utime, stime, cutime, cstime uint64 // clock ticks
	nice                         int
}

func readStat(path string) (procStat, error) {
	var s procStat
	data, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	text := string(data)
	open, closing := strings.IndexByte(text, '('), strings.LastIndexByte(text, ')')
	if open < 0 || closing < open {
		return s, fmt.Errorf("%s: unexpected contents", path)
	}
	s.comm = text[open+1 : closing]
	f := strings.Fields(text[closing+1:])
	// f[0] state, 1 ppid, 2 pgrp, 3 session, 4 tty, 5 tpgid, 6 flags,
	// 7-10 faults, 11 utime, 12 stime, 13 cutime, 14 cstime, 15 priority, 16 nice
	if len(f) < 17 || len(f[0]) != 1 {
		return s, fmt.Errorf("%s: unexpected contents", path)
	}
	s.state = f[0][0]
	ints := []*int{&s.ppid, &s.pgrp, &s.sid}
	for i, p := range ints {
		v, err := strconv.Atoi(f[1+i])
		if err != nil {
			return s, fmt.Errorf("%s: %w", path, err)
		}
		*p = v
	}
	uints := map[int]*uint64{6: &s.flags, 11: &s.utime, 12: &s.stime, 13: &s.cutime, 14: &s.cstime}
	for i, p := range uints {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			// cutime and cstime are signed in the kernel; negative never happens in practice
			return s, fmt.Errorf("%s: %w", path, err)
		}
		*p = v
	}
	if s.nice, err = strconv.Atoi(f[16]); err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// readStatus returns the fields of a /proc status file.
func readStatus(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out, nil
}

// statusHex parses a hexadecimal signal mask (SigPnd, SigBlk).
func statusHex(st map[string]string, key string) uint64 {
	v, _ := strconv.ParseUint(st[key], 16, 64)
	return v
}

// statusFirst parses the first number of a field such as "Uid: 0 0 0 0".
func statusFirst(st map[string]string, key string) uint32 {
	f := strings.Fields(st[key])
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseUint(f[0], 10, 32)
	return uint32(v)
}

// taskIDs lists /proc/PID/task.
func taskIDs(pid int) ([]int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, err
	}
	var ids []int
	for _, e := range ents {
		if id, err := strconv.Atoi(e.Name()); err == nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// exeClass returns the ELF class byte of the process's executable, 0 if
// it cannot be read.
func exeClass(pid int) byte {
	f, err := os.Open(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	var id [5]byte
	if n, _ := f.ReadAt(id[:], 0); n < 5 || string(id[:4]) != "\x7fELF" {
		return 0
	}
	return id[4]
}
