// Package corecheck checks an ELF core of a lab guest with gdb (the QEMU
// lab's and the Xen lab's tests). Not in lab/qemulab: symbols' own tests
// import lab/qemulab, and this imports symbols.
package corecheck

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/gprobes/gprobes/symbols"
)

// CoreCheck checks an ELF core of a lab guest (exit 3) the way a user
// would: gdb opens it with the lab kernel's vmlinux and prints jiffies,
// linux_banner and init_task.comm. The vmlinux extracted from the vmlinuz
// has no symbol table, so the addresses come from System.map and comm's
// offset from the vmlinux's BTF. Used by the QEMU lab's and the Xen lab's
// tests (the Xen domUs run this kernel too).
type CoreCheck struct {
	set  *symbols.Set
	comm uint64
}

// New reads the lab kernel's symbols from art (lab/qemulab's Artifacts()).
func New(art string) (*CoreCheck, error) {
	set := symbols.NewSet()
	for _, f := range []string{"System.map", "vmlinux"} {
		tab, err := symbols.Open(filepath.Join(art, f))
		if err != nil {
			return nil, err
		}
		set.Add(tab)
	}
	comm, err := set.Offsetof("struct task_struct", "comm")
	if err != nil {
		return nil, err
	}
	return &CoreCheck{set: set, comm: comm}, nil
}

// Addr is a lab kernel symbol's link-time address.
func (c *CoreCheck) Addr(name string) (uint64, error) {
	s, err := c.set.Lookup(name)
	if err != nil {
		return 0, err
	}
	return s.Addr, nil
}

// GdbArgs are gdb's arguments after the vmlinux's path: the core, the
// three values printed, and the threads.
func (c *CoreCheck) GdbArgs(core string) ([]string, error) {
	var a [3]uint64
	for i, n := range []string{"jiffies", "linux_banner", "init_task"} {
		v, err := c.Addr(n)
		if err != nil {
			return nil, err
		}
		a[i] = v
	}
	return []string{"-ex", "core-file " + core,
		"-ex", fmt.Sprintf(`printf "JIFFIES %%lx\n", *(unsigned long *)%#x`, a[0]),
		"-ex", fmt.Sprintf(`printf "BANNER %%s\n", (char *)%#x`, a[1]),
		"-ex", fmt.Sprintf(`printf "COMM %%s\n", (char *)%#x`, a[2]+c.comm),
		"-ex", "info threads"}, nil
}

// ShellArgs is GdbArgs quoted for sh (none of them holds a single quote).
func ShellArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + a + "'"
	}
	return strings.Join(q, " ")
}

// Verify reads gdb's output: jiffies must be what the probe read live,
// the banner Linux 6.1's, init_task's comm swapper/0. It returns what
// is wrong, nothing when all is right.
func (c *CoreCheck) Verify(out string, jiffies uint64) []string {
	var bad []string
	if m := regexp.MustCompile(`JIFFIES ([0-9a-f]+)`).FindStringSubmatch(out); m == nil {
		bad = append(bad, "gdb read no jiffies from the core")
	} else if got, _ := strconv.ParseUint(m[1], 16, 64); got != jiffies {
		bad = append(bad, fmt.Sprintf("jiffies in the core %#x, the probe read %#x live", got, jiffies))
	}
	if !strings.Contains(out, "BANNER Linux version 6.1") {
		bad = append(bad, "no linux_banner in the core")
	}
	if !strings.Contains(out, "COMM swapper/0") {
		bad = append(bad, "init_task.comm is not swapper/0 in the core")
	}
	return bad
}
