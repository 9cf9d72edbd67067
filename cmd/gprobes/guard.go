package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/gprobes/gprobes/ptrace"
	"github.com/gprobes/gprobes/xen"
)

// The guard: a gprobes that traces processes (the daemon, run) starts a
// second gprobes, `gprobes recover --guard PID`, in a session of its own
// (a Ctrl-C or a hang-up meant for the first does not reach it), with a
// pipe on its standard input whose other end only the first holds. When
// the first dies — SIGKILL included — the kernel closes that end, and the
// guard puts back at once what the journals say it left in processes
// (ptrace.RecoverOwner), instead of leaving them to die of SIGTRAP at
// their next hit until someone runs `gprobes recover`. After a clean exit
// there is nothing left to put back, and the guard just ends.

// startGuard starts the guard of this process; a failure is only said:
// the journals are still there for `gprobes recover`.
func startGuard(errw io.Writer) {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(errw, "gprobes: no guard for a SIGKILL (recover by hand with gprobes recover):", err)
		return
	}
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintln(errw, "gprobes: no guard for a SIGKILL (recover by hand with gprobes recover):", err)
		return
	}
	cmd := exec.Command(exe, "recover", "--guard", fmt.Sprint(os.Getpid()))
	cmd.Stdin = r
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.Env = os.Environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		fmt.Fprintln(errw, "gprobes: no guard for a SIGKILL (recover by hand with gprobes recover):", err)
		return
	}
	r.Close()
	guardPipe = w // held open (close-on-exec) until this process ends
	go cmd.Wait() // reaped if it ends first
}

var guardPipe *os.File

// guard waits for its owner to end (its standard input closes), then puts
// back what the owner left.
func guard(c *cli.Context, owner int) error {
	io.Copy(io.Discard, os.Stdin)
	msgs, err := ptrace.RecoverOwner(owner)
	for _, m := range msgs {
		fmt.Fprintln(c.App.ErrWriter, "gprobes guard: "+m)
	}
	if xm, xerr := xen.RecoverOwner(owner); len(xm) > 0 || xerr != nil {
		for _, m := range xm {
			fmt.Fprintln(c.App.ErrWriter, "gprobes guard: "+m)
		}
		if err == nil {
			err = xerr
		}
	}
	if err != nil {
		fmt.Fprintln(c.App.ErrWriter, "gprobes guard: recover:", err)
		return cli.Exit("", 1)
	}
	return nil
}

// recoverAll puts back what dead gprobes left in processes and Xen
// domains, saying what it did.
func recoverAll(c *cli.Context) error {
	msgs, err := ptrace.Recover()
	xm, xerr := xen.Recover()
	msgs = append(msgs, xm...)
	for _, m := range msgs {
		fmt.Fprintln(c.App.Writer, "gprobes: "+m)
	}
	if err == nil {
		err = xerr
	} else if xerr != nil {
		err = fmt.Errorf("%w; %w", err, xerr)
	}
	if err != nil {
		fmt.Fprintln(c.App.ErrWriter, "gprobes: recover:", err)
	}
	return err
}
