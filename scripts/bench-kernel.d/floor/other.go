//go:build !linux

// Command floor is scripts/bench-kernel's floor, hand-written eBPF: Linux
// only.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "floor: eBPF needs Linux")
	os.Exit(1)
}
