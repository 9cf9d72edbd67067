//go:build linux

package kernel

import (
	"errors"
	"os"
)

// mechanisms says which of the kernel's probing mechanisms this kernel
// has: nil, or why not.
type mechanisms struct {
	Kprobe, Kretprobe, Fentry error
}

func probeMechanisms() mechanisms {
	var m mechanisms
	_, e1 := os.Stat("/sys/bus/event_source/devices/kprobe")
	_, e2 := os.Stat("/sys/kernel/tracing/kprobe_events")
	_, e3 := os.Stat("/sys/kernel/debug/tracing/kprobe_events")
	if e1 != nil && e2 != nil && e3 != nil {
		m.Kprobe = errors.New("this kernel has no kprobes (no kprobe PMU in /sys/bus/event_source/devices, no kprobe_events in tracefs: CONFIG_KPROBES is off)")
		m.Kretprobe = m.Kprobe
		m.Fentry = errors.New("this kernel has no fentry here (without kprobes it has no ftrace-based function entry either)")
	}
	return m
}
