package bpf

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// Mechanisms says what this host allows the kernel target (Probe): each
// field is nil when the kernel has it and lets this process use it, else
// an error whose message says what is missing or refused, and why, in
// one line, for the kernel target to refuse a probe naming it and for
// `gprobes doctor` to print. This file and mech_linux.go are the one
// place where the host's abilities are detected.
type Mechanisms struct {
	Tracepoint    error // BPF_PROG_TYPE_TRACEPOINT on a tracefs event (KindTracepoint)
	RawTracepoint error // BPF_PROG_TYPE_RAW_TRACEPOINT (KindRawTracepoint)
	Kprobe        error // kprobes through the kprobe PMU (KindKprobe, AttachKprobe)
	Kretprobe     error // kretprobes through the kprobe PMU (KindKretprobe, AttachKretprobe)
	KprobeMulti   error // kprobe.multi links (many functions, one program)
	Fentry        error // fentry programs loaded and attached (KindFentry, AttachFentry)
	Uprobe        error // uprobes through the uprobe PMU (KindUprobe)
	Uretprobe     error // uretprobes through the uprobe PMU
	Ringbuf       error // BPF_MAP_TYPE_RINGBUF: every probe's records
	Loop          error // the bpf_loop helper: programs with a cycle or a call (Compiled.Loop)
	TaskPtRegs    error // the bpf_task_pt_regs helper: push u
	BTF           error // the kernel's BTF (/sys/kernel/btf/vmlinux): fentry, sizeof and offsetof without --symbols
	KernelWatch   error // hardware breakpoints on kernel addresses (AttachWatch: watch probes)
	UserWatch     error // hardware breakpoints on user addresses (a process's watch probes use the same debug registers)
}

// ErrNoDebugRegister: a CPU has no debug register free for a watch (four
// per CPU, shared with gdb, perf and other watch probes).
var ErrNoDebugRegister = errors.New("no debug register free")

// Ability is one line of the host's ability matrix: a name, what needs
// it, and whether this host has it, and if not why.
type Ability struct {
	Name string `json:"name"`
	For  string `json:"for"`
	OK   bool   `json:"ok"`
	Why  string `json:"why,omitempty"`
}

func ability(name, usedFor string, err error) Ability {
	a := Ability{Name: name, For: usedFor, OK: err == nil}
	if err != nil {
		a.Why = err.Error()
	}
	return a
}

// List is the mechanisms as abilities, in a fixed order.
func (m Mechanisms) List() []Ability {
	return []Ability{
		ability("tracepoint", "tracepoint = SUBSYS:EVENT", m.Tracepoint),
		ability("raw_tracepoint", "nothing yet (the kernel target uses tracefs events)", m.RawTracepoint),
		ability("kprobe", "offset = FUNC+OFF; offset = FUNC where fentry cannot", m.Kprobe),
		ability("kretprobe", "retprobe = FUNC", m.Kretprobe),
		ability("kprobe_multi", "nothing yet (one program on many functions)", m.KprobeMulti),
		ability("fentry", "offset = FUNC (a function's entry, cheaper than a kprobe)", m.Fentry),
		ability("uprobe", "the host target's user probes (docs/global.md)", m.Uprobe),
		ability("uretprobe", "the host target's retprobes in user code (docs/global.md)", m.Uretprobe),
		ability("ringbuf", "every kernel probe's records", m.Ringbuf),
		ability("bpf_loop", "programs with a loop or a call", m.Loop),
		ability("task_pt_regs", "push u", m.TaskPtRegs),
		ability("btf", "fentry; sizeof and offsetof without --symbols", m.BTF),
		ability("kernel_watch", "watch = ADDRESS,LEN,MODE on --target kernel", m.KernelWatch),
		ability("user_watch", "watch = ADDRESS,LEN,MODE on a process (ptrace's debug registers)", m.UserWatch),
	}
}

// ForKind is the reason a probe of kind k cannot run here, or nil: the
// mechanism it attaches with, and the ring buffer every probe needs.
// (A program in loop mode, Compiled.Loop, needs Loop too.)
func (m Mechanisms) ForKind(k Kind) error {
	if m.Ringbuf != nil {
		return m.Ringbuf
	}
	switch k {
	case KindTracepoint:
		return m.Tracepoint
	case KindRawTracepoint:
		return m.RawTracepoint
	case KindKprobe:
		return m.Kprobe
	case KindUprobe:
		return m.Uprobe
	case KindKretprobe:
		return m.Kretprobe
	case KindFentry:
		return m.Fentry
	case KindWatch:
		if errors.Is(m.KernelWatch, ErrNoDebugRegister) {
			return nil // could not tell: AttachWatch will
		}
		return m.KernelWatch
	}
	return fmt.Errorf("unknown probe kind %v", k)
}

// String lists the mechanisms, present or not and why.
func (m Mechanisms) String() string {
	var b strings.Builder
	for _, a := range m.List() {
		if a.OK {
			fmt.Fprintf(&b, "%-15s yes\n", a.Name)
		} else {
			fmt.Fprintf(&b, "%-15s no: %s\n", a.Name, a.Why)
		}
	}
	return b.String()
}

// Kallsyms is what /proc/kallsyms shows this process (ScanKallsyms).
type Kallsyms struct {
	Symbols int // lines
	Data    int // data symbols (types d, D, b, B)
	// Addrs is nil when the addresses are shown, else why not
	Addrs error
	// DataSyms is nil when the kernel's variables are listed
	// (CONFIG_KALLSYMS_ALL), else why they are not
	DataSyms error
}

// minDataSymbols is how many data symbols make kallsyms "list the
// kernel's variables": a kernel built with CONFIG_KALLSYMS_ALL lists
// tens of thousands (the QEMU lab's Debian 6.1: 32,879 of its 94,266),
// one without it only the bounds of some sections (__start_rodata,
// __start_once...): 35 of 121,436 on the 6.18.44 machines.
const minDataSymbols = 1000

// ScanKallsyms reads /proc/kallsyms' text: how many symbols of the
// kernel image (modules' and eBPF programs' lines, which come and go, are
// not counted), how many of them data, and whether the addresses are
// shown.
func ScanKallsyms(b []byte) Kallsyms {
	var k Kallsyms
	zero, nonzero := 0, 0
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		// ADDR TYPE NAME[\t[MODULE]]
		sp := bytes.IndexByte(line, ' ')
		if sp <= 0 || sp+2 >= len(line) || bytes.IndexByte(line, '\t') >= 0 {
			continue // a module's line ("\t[MODULE]"), or no symbol
		}
		k.Symbols++
		if len(bytes.Trim(line[:sp], "0")) == 0 {
			zero++
		} else {
			nonzero++
		}
		switch line[sp+1] {
		case 'd', 'D', 'b', 'B':
			k.Data++
		}
	}
	switch {
	case k.Symbols == 0:
		k.Addrs = errors.New("/proc/kallsyms is empty (a kernel built without CONFIG_KALLSYMS)")
	case nonzero == 0:
		k.Addrs = errors.New("/proc/kallsyms shows every address as 0: it shows them to root (CAP_SYSLOG) unless kernel.kptr_restrict is 2")
	}
	switch {
	case k.Symbols == 0:
		k.DataSyms = k.Addrs
	case k.Data < minDataSymbols:
		k.DataSyms = fmt.Errorf("/proc/kallsyms lists %d data symbols of %d, section bounds (__start_rodata...), not the kernel's variables: a kernel built without CONFIG_KALLSYMS_ALL", k.Data, k.Symbols)
	}
	return k
}

// List is the kallsyms facts as abilities.
func (k Kallsyms) List() []Ability {
	return []Ability{
		ability("kallsyms_addresses", "every location by name", k.Addrs),
		ability("kallsyms_data", "a kernel variable by name (watch = jiffies_64,8,w) without --symbols", k.DataSyms),
	}
}

// Report is the host's ability matrix (Detect): the facts that decide
// it, and each ability.
type Report struct {
	OS      string `json:"os"`
	Kernel  string `json:"kernel"`  // uname -r
	Machine string `json:"machine"` // uname -m
	UID     int    `json:"uid"`
	// Capabilities are those of this process, among the ones the kernel
	// target needs (CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, CAP_SYSLOG)
	Capabilities []string `json:"capabilities"`
	// Lockdown is the kernel's lockdown mode (none, integrity,
	// confidentiality) when securityfs shows it, else ""
	Lockdown          string    `json:"lockdown,omitempty"`
	PerfEventParanoid *int      `json:"perf_event_paranoid,omitempty"`
	KptrRestrict      *int      `json:"kptr_restrict,omitempty"`
	Abilities         []Ability `json:"abilities"`
}

// Missing lists the abilities this host lacks.
func (r Report) Missing() []Ability {
	var out []Ability
	for _, a := range r.Abilities {
		if !a.OK {
			out = append(out, a)
		}
	}
	return out
}
