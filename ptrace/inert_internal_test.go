//go:build linux

package ptrace

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gprobes/gprobes/internal/testkit"
)

// Inert reads a process's dispositions: a signal it ignores, or one whose
// default is to ignore it and that it does not catch, is inert; a caught
// one, or one whose default ends or stops the process, is not. The
// process is a shell that sets its traps and then says so.
func TestInert(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command("sh", "-c", `trap '' USR1; trap 'echo cont' CONT; trap 'echo winch' WINCH; touch "$1"; while :; do sleep 1; done`, "sh", ready)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	testkit.WaitTrue(t, time.Minute, "the shell's traps set", func() bool { _, err := os.Stat(ready); return err == nil })
	tg := &Target{}
	pid := cmd.Process.Pid
	for _, c := range []struct {
		sig  unix.Signal
		want bool
	}{
		{unix.SIGUSR1, true},     // ignored
		{unix.SIGCHLD, false},    // the shell catches it (it waits for sleep)
		{unix.SIGURG, true},      // default: ignore, not caught
		{unix.SIGCONT, false},    // caught
		{unix.SIGWINCH, false},   // caught
		{unix.SIGTERM, false},    // default: the end of the process
		{unix.SIGTSTP, false},    // default: a stop
		{unix.Signal(34), false}, // SIGRTMIN: default, the end
	} {
		if got := tg.Inert(pid, int(c.sig)); got != c.want {
			t.Errorf("Inert(%s) = %v, want %v", unix.SignalName(c.sig), got, c.want)
		}
	}
	// a thread that is gone: not inert (nothing is known of it)
	if tg.Inert(1<<22+7, int(unix.SIGCONT)) {
		t.Error("Inert of a process that does not exist: true")
	}
}
