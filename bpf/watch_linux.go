//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/rpn"
)

// perf's hardware breakpoint types (linux/hw_breakpoint.h)
const (
	hwBreakpointW  = 2
	hwBreakpointRW = 3
)

// AttachWatch attaches prog (compiled with KindWatch) to a hardware
// breakpoint on n bytes at the kernel address addr, on every online CPU:
// one perf event (PERF_TYPE_BREAKPOINT, pid -1) and one BPF link per CPU,
// closed together by the link returned. The program runs after each
// access of the mode's kind (x86: writes, or reads and writes) by the
// kernel on any CPU.
func AttachWatch(prog *ebpf.Program, addr uint64, n int, mode rpn.WatchMode) (link.Link, error) {
	typ := uint64(hwBreakpointW)
	if mode == rpn.WatchReadWrite {
		typ = hwBreakpointRW
	}
	cpus, err := onlineCPUs()
	if err != nil {
		return nil, err
	}
	w := &watchLink{}
	for _, cpu := range cpus {
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_BREAKPOINT,
			Size:   unix.PERF_ATTR_SIZE_VER1,
			Sample: 1,
			Ext1:   addr,      // bp_addr
			Ext2:   uint64(n), // bp_len
		}
		attr.Bp_type = uint32(typ)
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			w.Close()
			return nil, watchError(addr, n, cpu, err)
		}
		l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: prog, Attach: ebpf.AttachPerfEvent})
		unix.Close(fd) // the link holds the event
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("watch %#x: attaching the program to CPU %d's breakpoint: %w", addr, cpu, err)
		}
		if w.Link == nil {
			w.Link = l
		} else {
			w.more = append(w.more, l)
		}
	}
	if w.Link == nil {
		return nil, errors.New("watch: no CPU online")
	}
	return w, nil
}

func watchError(addr uint64, n, cpu int, err error) error {
	what := fmt.Sprintf("watch %#x,%d on CPU %d", addr, n, cpu)
	switch {
	case errors.Is(err, unix.ENOSPC):
		return fmt.Errorf("%s: %w: each CPU has four, shared with gdb, perf and other watch probes (%v)", what, ErrNoDebugRegister, err)
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		// why: Probe tried a kernel address and a user one (the
		// kernel's policy, CAP_SYS_ADMIN, or perf's permissions)
		if m := Probe().KernelWatch; m != nil && !errors.Is(m, ErrNoDebugRegister) {
			return fmt.Errorf("%s: %w", what, m)
		}
		return fmt.Errorf("%s: perf_event_open: %s, though a breakpoint on a kernel address went in when gprobes started (%v)", what, errnoName(err), err)
	case errors.Is(err, unix.EINVAL):
		return fmt.Errorf("%s: the kernel refuses the breakpoint: the address must be a kernel address aligned to the length (%v)", what, err)
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENODEV):
		return fmt.Errorf("%s: no hardware breakpoints here (CONFIG_HAVE_HW_BREAKPOINT, or a hypervisor without debug registers) (%v)", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// watchLink is a watch's links, one per CPU; Close closes them all.
type watchLink struct {
	link.Link // the first CPU's
	more      []link.Link
}

func (w *watchLink) Close() error {
	var first error
	for _, l := range w.more {
		if err := l.Close(); err != nil && first == nil {
			first = err
		}
	}
	if w.Link != nil {
		if err := w.Link.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// onlineCPUs lists the online CPUs (/sys/devices/system/cpu/online: "0-3,5").
func onlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, err
	}
	var cpus []int
	for _, part := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, rng := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu online list %q", b)
		}
		z := a
		if rng {
			if z, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("cpu online list %q", b)
			}
		}
		for c := a; c <= z; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
