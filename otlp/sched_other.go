//go:build !linux

package otlp

import "golang.org/x/sys/unix"

// idle lowers the priority of process pid (0: this one): nice only, off
// Linux (where the daemon probes nothing).
func idle(pid int) { unix.Setpriority(unix.PRIO_PROCESS, pid, forwarderNice) }
