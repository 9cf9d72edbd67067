package qemulab

import (
	"fmt"
	"regexp"
	"strconv"
)

// LatencyCall is a system call gpwork times (`gpwork lat KIND N`), and the
// kernel function a probe on it goes to: the shape of Xenprobes' Table 1.
// The Xen lab's domUs run the same workload.
type LatencyCall struct{ Kind, Fn string }

// LatencyCalls are null (getppid), read, write and open.
var LatencyCalls = []LatencyCall{
	{"null", "__x64_sys_getppid"},
	{"read", "ksys_read"},
	{"write", "ksys_write"},
	{"open", "do_sys_openat2"},
}

var latencyRe = regexp.MustCompile(`GPWORK lat \w+ ([0-9.]+)`)

// ParseLatency reads the nanoseconds per call from gpwork lat's output.
func ParseLatency(out string) (float64, error) {
	m := latencyRe.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no latency in %q", out)
	}
	return strconv.ParseFloat(m[1], 64)
}
