// Command xenrecord records, in dom0, what the hypervisor answers gprobes'
// native backend about a domain, for the unit tests that replay it
// (xen/testdata): the domain's getdomaininfo flags, vCPU 0's context
// (getvcpucontext, paused) and every guest frame the page-table walk of
// one virtual address reads, with the bytes found there. The Xen lab's
// TestXenPVH runs it against a PVH domU; xen's TestHVMRecorded replays it.
//
//	xenrecord DOMID VADDR >record.json
//	xenrecord step DOMID debug|vmevent
//
// step sets the trap flag of the domain's vCPU 0 and reports how the #DB
// came back to dom0 (xen.StepEvent): by debugging mode or as a vm_event
// request, which it prints in hex.
package main

import (
	"fmt"
	"os"
)

// Record is what xenrecord writes (JSON).
type Record struct {
	Domain  int               // the domid
	Flags   uint32            // getdomaininfo flags (XEN_DOMINF_*)
	Context string            // vCPU 0's struct vcpu_guest_context, hex
	VA      uint64            // the virtual address translated
	Phys    uint64            // where it is (guest-physical for HVM, machine for PV)
	Bytes   string            // 64 bytes read there, hex
	Frames  map[string]string // frame number (hex) -> the frame's 4096 bytes, hex
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "xenrecord:", err)
		os.Exit(1)
	}
}
