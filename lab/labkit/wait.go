package labkit

import (
	"fmt"
	"strings"
)

// Wait is a guest command of the labs' waitfor (lab/labkit/waitfor, at
// /bin/waitfor in the QEMU lab's guest and in the Xen lab's dom0 and
// domUs): it runs Cond until it succeeds, or fails after Secs (0: the
// script's 300 s) and prints What, the last output of Cond and Show's.
// A lab test waits so for what it needs, never with a fixed sleep.
type Wait struct {
	What string // what is waited for, for the message
	Cond string // a shell command: its success ends the wait
	Show string // a shell command whose output shows the state at the deadline
	Pid  string // a process (a number or "$!") whose end also ends the wait, as a failure
	Secs int
}

// Cmd is the waitfor command line.
func (w Wait) Cmd() string {
	var b strings.Builder
	b.WriteString("waitfor")
	if w.Secs > 0 {
		fmt.Fprintf(&b, " -t %d", w.Secs)
	}
	if w.Pid != "" {
		b.WriteString(" -p " + w.Pid)
	}
	if w.Show != "" {
		b.WriteString(" -s " + Quote(w.Show))
	}
	b.WriteString(" " + Quote(w.What) + " " + Quote(w.Cond))
	return b.String()
}

// Quote quotes s for a POSIX shell.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
