package ptrace

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ptraceSeccompGetFilter is PTRACE_SECCOMP_GET_FILTER.
const ptraceSeccompGetFilter = 0x420c

// sysCall is a system call gprobes would inject, with its arguments.
type sysCall struct {
	name string
	nr   uint64
	args []uint64
}

// seccompFilters reads the seccomp filters of stopped thread tid, newest
// first (PTRACE_SECCOMP_GET_FILTER: it needs CAP_SYS_ADMIN).
func seccompFilters(tid int) ([][]bpfInsn, error) {
	var out [][]bpfInsn
	for i := 0; ; i++ {
		n, _, errno := unix.Syscall6(unix.SYS_PTRACE, ptraceSeccompGetFilter, uintptr(tid), uintptr(i), 0, 0, 0)
		if errno == unix.ENOENT {
			return out, nil
		}
		if errno != 0 {
			return nil, errno
		}
		if n == 0 || n > 4096 {
			return nil, fmt.Errorf("filter %d has %d instructions", i, n)
		}
		prog := make([]bpfInsn, n)
		m, _, errno := unix.Syscall6(unix.SYS_PTRACE, ptraceSeccompGetFilter, uintptr(tid), uintptr(i), uintptr(unsafe.Pointer(&prog[0])), 0, 0)
		if errno != 0 {
			return nil, errno
		}
		out = append(out, prog[:m])
	}
}

// seccompError is a refusal to inject for a thread's seccomp state.
type seccompError struct{ msg string }

func (e *seccompError) Error() string { return e.msg }

func refuseSeccomp(format string, args ...any) error {
	return &seccompError{fmt.Sprintf(format, args...)}
}

// seccompCheck says why thread tid of process pid may not run the calls
// (made at ip), or nil: its seccomp mode (/proc/PID/task/TID/status) and,
// under filters, what they return for each call with its arguments. In
// strict mode only read, write, exit and sigreturn are allowed: anything
// gprobes injects would kill the process. A filter that cannot be read
// (gprobes without CAP_SYS_ADMIN) is a refusal too: nothing says what it
// would do. Allowed: ALLOW and LOG; every other action (KILL, TRAP's
// SIGSYS, ERRNO, a supervisor's USER_NOTIF, TRACE) is a refusal.
func seccompCheck(pid, tid int, ip uint64, calls ...sysCall) error {
	st := procStatusOf(fmt.Sprintf("/proc/%d/task/%d/status", pid, tid))
	mode := st["Seccomp"]
	switch mode {
	case "", "0":
		return nil
	case "1":
		return refuseSeccomp("thread %d runs in seccomp strict mode (only read, write, exit and sigreturn): gprobes injects no system call into it", tid)
	}
	filters, err := seccompFilters(tid)
	if err != nil {
		why := err.Error()
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			why = "reading it needs CAP_SYS_ADMIN"
		} else if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EIO) {
			why = "the kernel does not give filters to tracers (CONFIG_CHECKPOINT_RESTORE)"
		}
		return refuseSeccomp("thread %d runs under %s seccomp filter(s) gprobes cannot read (%s): it injects no system call, which a filter might answer by killing the process", tid, orSome(st["Seccomp_filters"]), why)
	}
	var bad []string
	for _, c := range calls {
		d := seccompData{Nr: int32(c.nr), Arch: auditArchX86_64, IP: ip}
		copy(d.Args[:], c.args)
		r, err := seccompVerdict(filters, &d)
		if err != nil {
			return refuseSeccomp("thread %d: %v: gprobes injects no system call", tid, err)
		}
		switch r & secActionFull {
		case secAllow, secLog:
			continue
		}
		bad = append(bad, fmt.Sprintf("%s: %s", c.name, seccompAction(r)))
	}
	if len(bad) > 0 {
		return refuseSeccomp("thread %d's seccomp filters would answer the system calls gprobes injects with %s: none is injected", tid, strings.Join(bad, ", "))
	}
	return nil
}

func orSome(n string) string {
	if n == "" {
		return "its"
	}
	return n
}
