// Package guestcore writes an ELF core file of a guest kernel's memory,
// seen from outside the guest (the Xen backend's exit 3): one PT_LOAD per
// run of mapped pages at the guest's virtual addresses, so that gdb opens
// it with the guest's vmlinux (`gdb vmlinux CORE`, then `print jiffies`),
// a PT_NOTE with an NT_PRSTATUS per vCPU (gdb's threads) and the guest's
// own VMCOREINFO note when the caller read it from the guest.
//
// The caller says which virtual ranges to dump (the kernel image, the
// direct map of RAM) and gives a Memory that names the frame behind each
// page: a frame mapped at several addresses (the kernel image is in the
// direct map too) is written once and every PT_LOAD that maps it points at
// the same bytes of the file; pages of zeros become holes of a sparse
// file. The whole layout is planned before a byte is written.
//
// The trap: every vCPU must stay stopped from before the caller reads the
// registers until WriteFile returns, or the core mixes moments.
package guestcore
