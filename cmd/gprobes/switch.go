package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gprobes/gprobes/daemon"
)

// enableCommand and disableCommand switch inserted probes on and off
// through the daemon (docs/language.md, "Switching"; docs/api.md).
func enableCommand() *cli.Command  { return switchCommand(true) }
func disableCommand() *cli.Command { return switchCommand(false) }

func switchCommand(on bool) *cli.Command {
	name, usage, doing := "disable", "switch off a module's probes (or some, by minor): they count nothing until switched on", "switched off"
	if on {
		name, usage, doing = "enable", "switch on a module's probes (or some, by minor) that enabled = no or a disable switched off", "switched on"
	}
	return &cli.Command{
		Name:      name,
		Usage:     usage,
		ArgsUsage: "NAME",
		Description: `A switch belongs to a minor of a module: every probe of the module with that minor, in every
target (or --target's), for every later hit on every thread and vCPU, as the instructions enable
MINOR and disable MINOR do in a program. Without --minor, every probe of the module. A probe that
max hits or rem ended stays off. gprobes run has no daemon to ask: its switching is its programs'
and enabled = no.`,
		Flags: []cli.Flag{socketFlag(),
			&cli.IntSliceFlag{Name: "minor", Usage: "only the probes with minor code `N` (repeatable)"},
			&cli.StringFlag{Name: "target", Aliases: []string{"t"}, Usage: "only in `TARGET` (pid:N, gdb:HOST:PORT, kernel, as inserted); default: every target with the module"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit(name+": name a module", 2)
			}
			req := daemon.SwitchRequest{Module: c.Args().First(), Target: c.String("target")}
			for _, m := range c.IntSlice("minor") {
				if m < 0 || m > 0xffff {
					return cli.Exit(fmt.Sprintf("%s: --minor %d: a minor is 0..65535", name, m), 2)
				}
				req.Minors = append(req.Minors, uint16(m))
			}
			cl := client(c)
			do := cl.Disable
			if on {
				do = cl.Enable
			}
			n, err := do(req)
			if err != nil {
				return daemonErr(name, err)
			}
			fmt.Fprintf(c.App.Writer, "%s %s\n", doing, plural(n, "probe"))
			return nil
		},
	}
}
