package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/gprobes/gprobes/bpf"
)

func doctorCommand() *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "say what this host lets --target kernel do: each ability (kprobes, fentry, hardware breakpoints, kallsyms...) and why not",
		Description: `Tries each of the kernel target's mechanisms the way the kernel target does before it
promises anything (a trivial program attached and detached, a kprobe or uprobe perf event
opened and closed, a hardware breakpoint made disabled on a kernel and a user address),
and reads what /proc/kallsyms shows. Nothing is left behind. Each ability the host lacks
says why, as the kernel target says it when it refuses a probe that needs it. Run it as
the user the kernel target will run as: the answers depend on the process's capabilities.
The exit status is 0 whatever the answers.`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the matrix as JSON: the host's facts and {name, for, ok, why} for each ability"},
		},
		Action: func(c *cli.Context) error {
			r := bpf.Detect()
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			printDoctor(c.App.Writer, r)
			return nil
		},
	}
}

func printDoctor(w io.Writer, r bpf.Report) {
	host := r.OS
	if r.Kernel != "" {
		host += " " + r.Kernel
	}
	if r.Machine != "" {
		host += " " + r.Machine
	}
	caps := "no capabilities the kernel target uses"
	if len(r.Capabilities) > 0 {
		caps = strings.Join(r.Capabilities, " ")
	}
	fmt.Fprintf(w, "host: %s; uid %d, %s", host, r.UID, caps)
	if r.Lockdown != "" {
		fmt.Fprintf(w, "; lockdown %s", r.Lockdown)
	} else if r.OS == "linux" {
		fmt.Fprint(w, "; lockdown not shown (no /sys/kernel/security/lockdown)")
	}
	if r.PerfEventParanoid != nil {
		fmt.Fprintf(w, "; perf_event_paranoid %d", *r.PerfEventParanoid)
	}
	if r.KptrRestrict != nil {
		fmt.Fprintf(w, "; kptr_restrict %d", *r.KptrRestrict)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ABILITY\tHERE\tFOR")
	for _, a := range r.Abilities {
		here := "yes"
		if !a.OK {
			here = "no"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", a.Name, here, a.For)
	}
	tw.Flush()
	if miss := r.Missing(); len(miss) > 0 {
		fmt.Fprintln(w, "\nwhy not:")
		for _, a := range miss {
			fmt.Fprintf(w, "  %s: %s\n", a.Name, a.Why)
		}
	}
}
