//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

var mechs struct {
	once sync.Once
	m    Mechanisms
}

// Probe finds out which mechanisms this kernel has (Mechanisms), once
// per process (later calls return the first answer): cilium/ebpf's
// feature tests, and for the attachments a trivial program attached and
// detached at once (a tracepoint, a raw tracepoint, a fentry on a common
// function) or a kprobe and a kretprobe perf event opened and closed.
// Nothing is left behind. It takes a few milliseconds.
func Probe() Mechanisms {
	mechs.once.Do(func() { mechs.m = probeMechanisms() })
	return mechs.m
}

func probeMechanisms() Mechanisms {
	var m Mechanisms
	m.Ringbuf = have("BPF_MAP_TYPE_RINGBUF (Linux 5.8)", features.HaveMapType(ebpf.RingBuf))
	m.Loop = have("the bpf_loop helper (Linux 5.17)", features.HaveProgramHelper(ebpf.TracePoint, asm.FnLoop))
	m.Tracepoint = probeTracepoint()
	m.RawTracepoint = probeRawTracepoint()
	m.Kprobe = probeKprobe(false)
	m.Kretprobe = probeKprobe(true)
	m.KprobeMulti = have("kprobe.multi links (Linux 5.18 with CONFIG_FPROBE)", features.HaveBPFLinkKprobeMulti())
	m.Fentry = probeFentry()
	return m
}

// have is missing's answer, nil for no error.
func have(what string, err error) error {
	if err == nil {
		return nil
	}
	return missing(what, err)
}

func trivial(spec ebpf.ProgramSpec) (*ebpf.Program, error) {
	spec.Instructions = asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}
	spec.License = "GPL"
	return ebpf.NewProgram(&spec)
}

func probeTracepoint() error {
	if err := features.HaveProgramType(ebpf.TracePoint); err != nil {
		return missing("BPF_PROG_TYPE_TRACEPOINT", err)
	}
	dir, err := eventsDir()
	if err != nil {
		return fmt.Errorf("tracepoints: %v", err)
	}
	prog, err := trivial(ebpf.ProgramSpec{Type: ebpf.TracePoint})
	if err != nil {
		return missing("a tracepoint program", err)
	}
	defer prog.Close()
	for _, ev := range [][2]string{{"syscalls", "sys_enter_getppid"}, {"sched", "sched_process_exec"}, {"sched", "sched_switch"}} {
		if _, err := os.Stat(filepath.Join(dir, ev[0], ev[1])); err != nil {
			continue
		}
		l, err := link.Tracepoint(ev[0], ev[1], prog, nil)
		if err != nil {
			return fmt.Errorf("attaching a tracepoint program to %s:%s fails: %v", ev[0], ev[1], err)
		}
		l.Close()
		return nil
	}
	return nil // no event to try: the parts are there
}

func probeRawTracepoint() error {
	if err := features.HaveProgramType(ebpf.RawTracepoint); err != nil {
		return missing("BPF_PROG_TYPE_RAW_TRACEPOINT (Linux 4.17)", err)
	}
	prog, err := trivial(ebpf.ProgramSpec{Type: ebpf.RawTracepoint})
	if err != nil {
		return missing("a raw tracepoint program", err)
	}
	defer prog.Close()
	var last error
	for _, name := range []string{"sys_enter", "sched_switch"} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: name, Program: prog})
		if err == nil {
			l.Close()
			return nil
		}
		last = err
	}
	return fmt.Errorf("attaching a raw tracepoint program fails: %v", last)
}

// commonFuncs are functions every kernel has, for the attach probes.
var commonFuncs = []string{"vfs_read", "do_sys_openat2", "vfs_write"}

func probeKprobe(ret bool) error {
	what := "kprobes"
	if ret {
		what = "kretprobes"
	}
	if err := features.HaveProgramType(ebpf.Kprobe); err != nil {
		return missing("BPF_PROG_TYPE_KPROBE", err)
	}
	if _, _, err := kprobePMU(ret); err != nil {
		return err
	}
	var last error
	for _, fn := range commonFuncs {
		fd, err := openKprobe(fn, 0, ret)
		if err == nil {
			unix.Close(fd)
			return nil
		}
		if errors.Is(err, ErrUnknownSymbol) {
			last = err
			continue
		}
		return fmt.Errorf("%s: %v", what, err)
	}
	return fmt.Errorf("%s: none of %v could be probed: %v", what, commonFuncs, last)
}

func probeFentry() error {
	fn := ""
	for _, f := range commonFuncs {
		if _, err := FuncArgs(f); err == nil {
			fn = f
			break
		}
	}
	if fn == "" {
		if _, err := btf.LoadKernelSpec(); err != nil {
			return fmt.Errorf("fentry needs the kernel's BTF (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF): %v", err)
		}
		return fmt.Errorf("fentry: none of %v in the kernel's BTF", commonFuncs)
	}
	prog, err := trivial(ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: ebpf.AttachTraceFEntry, AttachTo: fn})
	switch {
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("this kernel refuses to load fentry programs (EPERM from BPF_PROG_LOAD, before its verifier, as root: a lockdown or policy of this kernel)")
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("this kernel has no fentry programs (BPF_PROG_TYPE_TRACING, Linux 5.5 on x86-64): %v", err)
	case err != nil:
		return fmt.Errorf("loading a fentry program on %s fails: %v", fn, err)
	}
	defer prog.Close()
	l, err := AttachFentry(prog)
	if err != nil {
		return fmt.Errorf("attaching a fentry program on %s fails: %v", fn, err)
	}
	l.Close()
	return nil
}
