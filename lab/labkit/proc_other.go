//go:build !linux

package labkit

import "os/exec"

func dieWithParent(c *exec.Cmd) {}
