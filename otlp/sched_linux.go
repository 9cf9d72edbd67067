package otlp

import (
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// idle makes every thread of process pid (0: this one) SCHED_IDLE, at
// nice forwarderNice if that is refused: a SCHED_IDLE thread runs when
// nothing else wants the CPU, and is preempted at once when something
// does. Linux's policy and nice are a thread's; the threads started
// later inherit them.
func idle(pid int) {
	dir := "/proc/self/task/*"
	if pid != 0 {
		dir = "/proc/" + strconv.Itoa(pid) + "/task/*"
	}
	tasks, _ := filepath.Glob(dir)
	for _, t := range tasks {
		tid, err := strconv.Atoi(filepath.Base(t))
		if err != nil {
			continue
		}
		unix.Setpriority(unix.PRIO_PROCESS, tid, forwarderNice)
		unix.SchedSetAttr(tid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}, 0)
	}
}
