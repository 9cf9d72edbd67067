package main

import "github.com/urfave/cli/v2"

// live marks a command that traces processes or guests (run, daemon,
// recover, insert). Where gprobes is built without its live backends
// (liveErr set by platform_other.go) the command stops at once with the
// backends' ErrNotSupported, exit status 1, before it opens a socket,
// starts a guard or a program; check, build, disasm and sim work there.
func live(cmd *cli.Command) *cli.Command {
	if liveErr == nil {
		return cmd
	}
	cmd.Action = func(c *cli.Context) error {
		return cli.Exit(c.Command.Name+": "+liveErr.Error(), 1)
	}
	return cmd
}
