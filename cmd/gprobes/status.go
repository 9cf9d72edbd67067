package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gprobes/gprobes/daemon"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "say how the daemon is: its targets, the records written and lost (log file, syslog), what its exporters sent and dropped",
		Flags: []cli.Flag{socketFlag(),
			&cli.BoolFlag{Name: "json", Usage: "print /v1/status as it came (docs/api.md)"},
		},
		Action: func(c *cli.Context) error {
			st, err := client(c).Status()
			if err != nil {
				return daemonErr("status", err)
			}
			if c.Bool("json") {
				return json.NewEncoder(c.App.Writer).Encode(st)
			}
			printStatus(c.App.Writer, st)
			return nil
		},
	}
}

func printStatus(w io.Writer, st *daemon.StatusResponse) {
	fmt.Fprintf(w, "daemon %d on %s since %s, state %s\n", st.Pid, st.Socket, st.Since.Format(time.RFC3339), st.State)
	rot := "never rotated"
	if st.LogMaxSize > 0 {
		rot = fmt.Sprintf("rotated at %d bytes, %d kept, %s so far", st.LogMaxSize, st.LogKeep, plural(int(st.Rotations), "rotation"))
	}
	fmt.Fprintf(w, "log %s: %d bytes (%s); %s written, %s\n", st.Log, st.LogSize, rot, plural(int(st.Written), "record"), st.Lost)
	if st.RotateError != "" {
		fmt.Fprintf(w, "  the last rotation failed: %s\n", st.RotateError)
	}
	if st.Replaced > 0 {
		fmt.Fprintf(w, "  renamed, removed or cut under the daemon %s (logrotate?): a new file was started each time\n", plural(int(st.Replaced), "time"))
	}
	fmt.Fprintf(w, "syslog: %s taken, %s\n", plural(int(st.SyslogWritten), "record"), st.SyslogLost)
	if st.LostInTargets > 0 {
		fmt.Fprintf(w, "targets: %s dropped in the targets (jump pads' full rings)\n", plural(int(st.LostInTargets), "record"))
	}
	names := make([]string, 0, len(st.Exporters))
	for n := range st.Exporters {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		e := st.Exporters[n]
		fmt.Fprintf(w, "%s %s: %s sent, %d queued", n, e.Endpoint, plural(int(e.Sent), "record"), e.Queued)
		if e.Dropped.Records == 0 {
			fmt.Fprintln(w, ", none dropped")
		} else {
			fmt.Fprintf(w, ", %d dropped (%d with the queue full, %d not accepted; the last at %s: %s)\n", e.Dropped.Records, e.QueueFull, e.Failed,
				e.Dropped.LastAt.Format(time.RFC3339), e.Dropped.LastError)
		}
	}
	if st.Metrics != "" {
		fmt.Fprintf(w, "metrics: http://%s/metrics\n", st.Metrics)
	}
	targets := make([]string, 0, len(st.Targets))
	for t := range st.Targets {
		targets = append(targets, t)
	}
	slices.Sort(targets)
	for _, t := range targets {
		fmt.Fprintf(w, "target %s: %s\n", t, st.Targets[t])
	}
	if len(st.KernelAbilities) > 0 {
		var miss []string
		for _, a := range st.KernelAbilities {
			if !a.OK {
				miss = append(miss, a.Name)
			}
		}
		if len(miss) == 0 {
			fmt.Fprintf(w, "kernel target: every ability (%d)\n", len(st.KernelAbilities))
		} else {
			fmt.Fprintf(w, "kernel target lacks %s (status --json says why)\n", strings.Join(miss, ", "))
		}
	}
}
