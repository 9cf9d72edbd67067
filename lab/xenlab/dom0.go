package xenlab

import (
	"fmt"
	"strings"
	"time"
)

// RunBound is the timeout for a Run that carries a wait of these
// commands: longer than the wait's own 10 minutes, so that the wait, not
// the Run, says what it saw.
const RunBound = 12 * time.Minute

// The dom0 commands below (src/xlab-gp) start gprobes or gdbsx and wait
// with waitfor (lab/labkit/waitfor) for what the next step needs, never
// for a fixed time: under TCG on a shared machine a step takes from a
// moment to minutes. Each waits up to 10 minutes (xlab-gp's XLAB_WAIT)
// and then says what it saw and fails; give the Run that carries one a
// longer timeout (RunBound). They are short:
// a long command line is garbled more often on its way into dom0.

// DaemonUp starts `ENV gprobes daemon --socket SOCK ARGS` in dom0 (env:
// variables, "NAME=VALUE ...", or ""), its output in LOG, and waits until
// it serves: its "serving SOCK" line, said once it has put back what a
// dead gprobes left and before it answers.
func DaemonUp(env, sock, args, log string) string {
	return strings.TrimSpace(fmt.Sprintf("%s xlab-gp daemon %s %s %s", env, sock, log, args))
}

// RunUp starts `ENV gprobes run ARGS` in dom0, its output in OUT and its
// pid in OUT.pid, and waits until its probes are in (its "ready on"
// line): the workload may start then.
func RunUp(env, args, out string) string {
	return strings.TrimSpace(fmt.Sprintf("%s xlab-gp run %s %s", env, out, args))
}

// StopWaiting sends a Ctrl-C (SIGINT) to the gprobes run that RunUp
// started with its output in OUT, on a gdb: target through gdbsx, which
// ignores ^C, and waits until gprobes says it waits for a stop (a hit, or
// the domain paused), which it does a second after the ^C, or has ended
// (a hit came first; or, the ^C before its probes were in, it did
// nothing): `kill -0 $(cat OUT.pid)` tells which.
func StopWaiting(out string) string { return "xlab-gp interrupted " + out }

// RunEnded waits until the gprobes run that RunUp started with its output
// in OUT has ended.
func RunEnded(out string) string { return "xlab-gp ended " + out }

// GdbsxUp starts gdbsx on domain dom, port 9999, its output in
// /tmp/gdbsx.log, and waits until it listens.
func GdbsxUp(dom int) string { return fmt.Sprintf("xlab-gp gdbsx %d", dom) }

// Gone waits until no process of those names (space-separated) is left
// (pidof: "gprobes" names a guard too).
func Gone(names string) string { return "xlab-gp gone " + names }

// WaitPaused waits until domain dom is paused.
func WaitPaused(dom int) string { return fmt.Sprintf("xlab-gp paused %d", dom) }
