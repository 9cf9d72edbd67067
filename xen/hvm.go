package xen

import (
	"errors"
	"fmt"
)

// HVM and PVH domains (docs/xen.md, "HVM and PVH domains").
//
// Xen runs an HVM or PVH vCPU in VMX non-root or SVM guest mode, and what
// reaches dom0 differs from a PV guest's:
//
//   - #DB (a debug-register breakpoint, a single-step) is always
//     intercepted (HVM_TRAP_MASK); with debugging mode on, Xen pauses the
//     domain and raises VIRQ_DEBUGGER (svm.c/vmx.c, domain_pause_for_debugger),
//     as for a PV guest. The debug registers and the trap flag are written
//     through setvcpucontext, which for an HVM vCPU sets %dr0-%dr7 and the
//     registers and leaves the rest of its state alone (arch_set_info_guest);
//     Xen loads them at the vCPU's next VM entry. Under the lab's QEMU 7.2
//     TCG a single-step's #DB comes back, by debugging mode and by the
//     vm_event ring (vmevent.go), but a debug register's never does: QEMU's
//     VMRUN loads the guest's %dr7 without arming its breakpoints.
//   - int3 is intercepted as an exception (#BP) only while debugging mode or
//     a vm_event monitor asks for it; Xen then pauses the domain with gdbsx's
//     event 3 (debugging mode) or sends a software-breakpoint vm_event. QEMU's
//     TCG does not deliver that intercept: it executes int3 as a software
//     interrupt and checks only the INTn intercept, so the guest's own #BP
//     handler receives the int3 (an oops in a Linux guest, seen in the lab).
//     Int3 probes are therefore taken only when asked for by name
//     (breakpoints = int3), the route of real hardware; on auto an HVM
//     domain gets its four debug registers and no more.
//   - ICEBP (int1) is an intercept of its own on VMX and SVM, reported at the
//     instruction and not past it: refused.
//   - Memory: the page tables hold guest-physical frame numbers, which is
//     what privcmd maps for an HVM domain, and the context's CR3 is the
//     guest's own (a guest-physical address); the walk is the PV one. The
//     context's gs_base_kernel is the GS base in use when the vCPU is in ring
//     0 (arch_get_info_guest), the kernel's per-CPU base at a probe in kernel
//     code, as for a PV guest.
//
// An HVM domain is probed only with a route named (GPROBES_XEN_ROUTE=debug
// or vmevent, hvm_linux.go): each takes something another tool may hold.
// Both are proven end to end under QEMU 10.0 TCG with the lab's
// xen-cr2sync hypervisor (TestXenPVHProbes), not on hardware.

// hvmBreakpoints is the breakpoint mode used on an HVM or PVH domain for the
// mode asked.
func hvmBreakpoints(mode string) (string, error) {
	switch mode {
	case BreakAuto, BreakDR:
		return BreakDR, nil
	case BreakInt3:
		// the hardware route: Xen intercepts #BP while the domain is
		// debugged (QEMU TCG does not deliver it)
		return BreakInt3, nil
	case BreakInt1:
		return "", errors.New("breakpoints int1 on an HVM or PVH domain: Xen intercepts ICEBP at the instruction, not as a trap past it (use dr, or int3 on hardware)")
	}
	return "", fmt.Errorf("breakpoints %q: want auto, dr, int3 or int1", mode)
}

// hvmFull is what a fifth probe address on an HVM domain in auto mode is
// told.
const hvmFull = "; on an HVM or PVH domain auto mode uses the debug registers only: GPROBES_XEN_BREAKPOINTS=int3 takes int3 bytes, which need a hypervisor that intercepts #BP (hardware; not QEMU TCG)"
