package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// heldCommand is run --target kernel's COMMAND: started under ptrace so
// that it stops at its exec, before its first instruction, its pid known
// (the probes' filter) while the probes go in; then let go, no longer
// traced. The goroutine that starts it stays on its OS thread until
// run lets it go (a ptrace tracer is a thread).
type heldCommand struct {
	cmd      *exec.Cmd
	pid      int
	released bool
	locked   bool
}

func startHeld(argv []string) (*heldCommand, error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	h := &heldCommand{locked: true}
	h.cmd = exec.Command(path, argv[1:]...)
	h.cmd.Args[0] = argv[0]
	h.cmd.Stdin, h.cmd.Stdout, h.cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	if err := h.cmd.Start(); err != nil {
		h.unlock()
		return nil, err
	}
	h.pid = h.cmd.Process.Pid
	var ws unix.WaitStatus
	if _, err := unix.Wait4(h.pid, &ws, 0, nil); err != nil || !ws.Stopped() {
		h.cmd.Process.Kill()
		h.unlock()
		return nil, fmt.Errorf("%s did not stop at its exec (%v, status %#x)", argv[0], err, uint32(ws))
	}
	return h, nil
}

// unlock lets the goroutine's OS thread go (deferred by run).
func (h *heldCommand) unlock() {
	if h.locked {
		h.locked = false
		runtime.UnlockOSThread()
	}
}

// kill ends a command that never ran.
func (h *heldCommand) kill() {
	h.cmd.Process.Kill()
	if !h.released {
		unix.PtraceDetach(h.pid)
	}
	h.cmd.Wait()
}

// run lets the command go and returns a channel closed when it has
// exited, after exited got its shell-style status.
func (h *heldCommand) run(exited func(code int)) (<-chan struct{}, error) {
	if err := unix.PtraceDetach(h.pid); err != nil {
		h.cmd.Process.Kill()
		return nil, fmt.Errorf("letting the command go: %w", err)
	}
	h.released = true
	h.unlock()
	done := make(chan struct{})
	go func() {
		h.cmd.Wait()
		ws, _ := h.cmd.ProcessState.Sys().(syscall.WaitStatus)
		code := ws.ExitStatus()
		if ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		exited(code)
		close(done)
	}()
	return done, nil
}
