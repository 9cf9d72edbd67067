// Package xen is the native Xen backend: the engine's Target for a PV,
// PVH or HVM guest's kernel seen from a Linux dom0 (target xen:DOMID), without
// libxenctrl. It reaches the hypervisor through /dev/xen/privcmd (domctl
// hypercalls: pause, debugging mode, vCPU contexts, gdbsx's vCPU pause and
// status), maps guest frames with mmapbatch and finds them through the
// guest's own page tables (Translate), and is woken by VIRQ_DEBUGGER
// through /dev/xen/evtchn. Like every backend it provides primitives and
// holds no probe logic; the guest kernel's knowledge (symbols, KASLR, the
// current task) is linuxkernel's. docs/xen.md has the whole story and the
// figures.
//
// Design note: how a stop is learnt of. A debug-register breakpoint and
// the single-step are debug traps (#DB): Xen 4.17 pauses the domain and
// raises VIRQ_DEBUGGER, which wakes gprobes at once. An int3 pauses the
// domain silently (Xen keeps VIRQ_DEBUGGER for #DB), so while int3 probes
// are in, gprobes checks the domain's state every Options.Poll. int1 is a
// #DB too, but under QEMU TCG (the lab) ICEBP in the PV kernel's ring 3
// raises #GP and kills the guest; on hardware it is a #DB without
// privilege check, not verified yet. Hence Options.Breakpoints' default,
// auto: debug registers for the first four probe addresses, int3 bytes for
// the rest. When every probe is reported by VIRQ_DEBUGGER, a slower check
// (idleCheck) still catches what Xen does not announce: a guest kernel's
// own int3, which pauses a debugged domain silently, and a death when the
// xenstore watch is not there.
//
// The trap: a gprobes that dies with probes in leaves the domain in
// debugging mode, to pause for good at the next hit; every probed domain
// therefore has a journal (journal_linux.go) from which Recover, the next
// Open of that domain or a daemon starting puts it back. The backend is
// Linux-only: built for another OS, Open and Recover return
// ErrNotSupported (xen_other.go), while Context and the page-table walker
// still build.
package xen
