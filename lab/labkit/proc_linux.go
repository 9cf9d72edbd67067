package labkit

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes QEMU get SIGKILL if the test process dies first, so an
// interrupted `go test` leaves no machine behind.
func dieWithParent(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
