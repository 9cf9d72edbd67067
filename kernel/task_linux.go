//go:build linux

package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// taskStruct finds the task_struct of process pid (its thread-group
// leader, ids in the root PID namespace), for a watch probe whose
// address names "task". Nothing in /proc gives a kernel address, and a
// kernel without CONFIG_KALLSYMS_ALL does not list init_task, so it walks
// the kernel's list of processes (task_struct.tasks, which links the
// thread-group leaders) from gprobes' own leader (current->group_leader,
// its task from a program of its own: kmem.currentTask), reading each
// task's pid and tgid through kmem, with the offsets from the kernel's
// BTF. The walk is many reads, not one RCU section: a process that exits
// meanwhile can break it, so a walk that does not come back to its start
// is done again, three times at most; the task found is read again to
// check it.
func (t *Target) taskStruct(pid int) (uint64, error) {
	if t.kmem == nil {
		return 0, errors.New("the kernel's memory cannot be read here (a BPF_PROG_TYPE_SYSCALL program), so no task_struct can be found")
	}
	off := map[string]uint64{}
	for _, f := range []string{"tasks", "pid", "tgid", "group_leader"} {
		v, err := t.syms.set.Offsetof("struct task_struct", f)
		if err != nil {
			return 0, fmt.Errorf("offsetof(struct task_struct, %s): %v", f, err)
		}
		off[f] = v
	}
	self, err := t.kmem.currentTask()
	if err != nil {
		return 0, err
	}
	leader, err := t.readWord(self + off["group_leader"])
	if err != nil {
		return 0, fmt.Errorf("gprobes' own task's group_leader: %v", err)
	}
	lo := min(off["tasks"], off["pid"], off["tgid"])
	hi := max(off["tasks"]+8, off["pid"]+4, off["tgid"]+4)
	if hi-lo > kmemChunk {
		return 0, fmt.Errorf("task_struct's tasks, pid and tgid are %d bytes apart", hi-lo)
	}
	buf := make([]byte, hi-lo)
	// ids reads a task's pid, tgid and its tasks.next
	ids := func(task uint64) (p, tg uint32, next uint64, err error) {
		if err := t.kmem.read(task+lo, buf); err != nil {
			return 0, 0, 0, err
		}
		return binary.LittleEndian.Uint32(buf[off["pid"]-lo:]), binary.LittleEndian.Uint32(buf[off["tgid"]-lo:]),
			binary.LittleEndian.Uint64(buf[off["tasks"]-lo:]), nil
	}
	const maxTasks = 1 << 22 // pid_max's limit
	var last error
	for try := 0; try < 3; try++ {
		task, n := leader, 0
		for ; n < maxTasks; n++ {
			p, tg, next, err := ids(task)
			if err != nil {
				last = fmt.Errorf("reading the task at %#x: %v", task, err)
				break
			}
			if p == uint32(pid) && tg == uint32(pid) {
				// read again: a task freed and used again meanwhile
				// would not keep both
				if p, tg, _, err := ids(task); err == nil && p == uint32(pid) && tg == uint32(pid) {
					return task, nil
				}
			}
			task = next - off["tasks"]
			if task == leader {
				return 0, fmt.Errorf("no process %d in the kernel's list of %d processes (it has exited?)", pid, n+1)
			}
		}
		if n == maxTasks {
			last = fmt.Errorf("the kernel's list of processes did not come back to its start in %d steps", maxTasks)
		}
	}
	return 0, fmt.Errorf("walking the kernel's list of processes: %v", last)
}

// readWord reads the 8 bytes at a kernel address.
func (t *Target) readWord(addr uint64) (uint64, error) {
	b := make([]byte, 8)
	if err := t.kmem.read(addr, b); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}
