// Command gpprogs asks the kernel how many eBPF programs are loaded whose
// name starts with a prefix (every program gprobes loads is named gp_...)
// and prints "gpprogs PREFIX N". It is a test's check that a daemon
// killed with SIGKILL left nothing behind, for the QEMU lab's guest, which
// has no bpftool: cmd/gprobes's TestKernelLab builds it statically and
// runs it there. Root.
//
//	gpprogs [PREFIX]    default gp_
package main

import (
	"fmt"
	"os"

	"github.com/gprobes/gprobes/kernel"
)

func main() {
	prefix := "gp_"
	if len(os.Args) > 1 {
		prefix = os.Args[1]
	}
	n, err := kernel.CountPrograms(prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpprogs:", err)
		os.Exit(1)
	}
	fmt.Printf("gpprogs %s %d\n", prefix, n)
}
