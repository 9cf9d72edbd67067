package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gprobes/gprobes/daemon"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/engine"
	"github.com/gprobes/gprobes/internal/outfile"
	"github.com/gprobes/gprobes/pad"
	"github.com/gprobes/gprobes/ppdf"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/targets"
)

func socketFlag() cli.Flag {
	return &cli.StringFlag{Name: "socket", EnvVars: []string{"GPROBES_SOCKET"},
		Usage: "the daemon's Unix `SOCKET` (default: /run/gprobes/gprobes.sock as root, $XDG_RUNTIME_DIR/gprobes.sock otherwise)"}
}

func socketOf(c *cli.Context) string {
	if s := c.String("socket"); s != "" {
		return s
	}
	return daemon.DefaultSocket()
}

func client(c *cli.Context) *daemon.Client { return daemon.NewClient(socketOf(c)) }

// daemonErr is the error of command cmd from the daemon: "cmd: message",
// with the command named once when the daemon's message names it already
// ("getvars: no module x is inserted").
func daemonErr(cmd string, err error) error {
	msg := err.Error()
	if !strings.HasPrefix(msg, cmd+": ") {
		msg = cmd + ": " + msg
	}
	return cli.Exit(msg, 1)
}

func daemonCommand() *cli.Command {
	return &cli.Command{
		Name:  "daemon",
		Usage: "run the probe manager: it holds inserted probes, variables and the log, and serves the other commands on a Unix socket",
		Description: `The daemon serves the API of docs/api.md (HTTP with JSON) on its socket, mode 0600. Committed
records go to log.bin in the state folder (binary: gprobes log prints it) and to syslog. On SIGTERM or SIGINT it takes every
probe out, lets every target go on with its original code, and exits.

log.bin is rotated when a record would take it past --log-max-size: it becomes log.bin.1
(.1 becomes .2, and so on; --log-keep files are kept). A record the file cannot take (a full
disk) is counted as lost, per probe, and never leaves a partial record; query, log and
/v1/status show the counts, and writing resumes when the disk has room again.

--otlp also sends every record to an OpenTelemetry collector as an OTLP log, batched and retried
off the probes' path; what it could not send is counted (gprobes status). Prometheus metrics are
at GET /metrics on the socket, and on a TCP port with --metrics. Under systemd the daemon takes
its socket from gprobes.socket (socket activation): README.md, "As a service".

--require-signed --allowed-signers FILE inserts only packs signed by a key FILE allows (SSHSIG,
namespace gprobes, the PPDF's .sig), verified before the pack is decoded or the target opened;
--read-only refuses modules that write their target. docs/ppdf.md, "Packs for customers".

Each target is opened and changed under its own lock: a target that is slow or stuck (a GDB
stub that never answers, given up after --stub-timeout) holds up no other. Request bodies,
headers, connections and their durations are bounded (docs/api.md, "Limits"). --socket must be
a socket or nothing: a stale socket is replaced, anything else is an error and is left alone.`,
		Flags: append([]cli.Flag{
			socketFlag(),
			&cli.StringFlag{Name: "state", EnvVars: []string{"GPROBES_STATE"}, Usage: "state `DIR` for the log and dumps (default: /var/lib/gprobes as root, $XDG_STATE_HOME/gprobes otherwise)"},
			&cli.StringFlag{Name: "log-max-size", Value: "64MiB", Usage: "rotate log.bin before it grows past `SIZE` (bytes, or with k, M, G for KiB, MiB, GiB); 0 never rotates"},
			&cli.IntFlag{Name: "log-keep", Value: daemon.DefaultLogKeep, Usage: "keep `N` rotated log files, log.bin.1 (the newest) to log.bin.N"},
			routeFlag(), ringFlag(),
			&cli.StringFlag{Name: "max-module", Value: "64MiB", Usage: "refuse to insert a module (PPDF) larger than `SIZE` (bytes, or with k, M, G for KiB, MiB, GiB; at most 4GiB)"},
			&cli.DurationFlag{Name: "stub-timeout", Value: 30 * time.Second, Usage: "give up on a GDB stub that does not answer within `DURATION`: connecting, the handshake, each reply"},
			&cli.BoolFlag{Name: "require-signed", Usage: "insert only PPDF packs signed by a key of --allowed-signers, verified before the target is opened: unsigned, tampered and unknown-signer packs (and DPDF source) are refused with the reason"},
			&cli.StringFlag{Name: "allowed-signers", Usage: "the allowed_signers `FILE` (ssh-keygen's format) signed packs are verified against, read again at each insert; with it, a signed pack is verified even without --require-signed"},
			&cli.StringFlag{Name: "revoked-keys", Usage: "refuse signatures by the public keys listed in `FILE` (one a line), read again at each insert"},
			&cli.BoolFlag{Name: "read-only", Usage: "refuse modules that write their target's registers, memory or IO ports (pop r, pop u, pop mrf, pop io)"},
		}, exporterFlags()...),
		Action: func(c *cli.Context) error {
			state := c.String("state")
			if state == "" {
				state = daemon.DefaultState()
			}
			maxSize, err := parseSize(c.String("log-max-size"))
			if err != nil {
				return cli.Exit("daemon: --log-max-size: "+err.Error(), 2)
			}
			if c.Int("log-keep") < 0 {
				return cli.Exit("daemon: --log-keep: a count, 0 or more", 2)
			}
			maxModule, err := parseSize(c.String("max-module"))
			if err != nil || maxModule == 0 || maxModule > ppdf.MaxFileSize {
				return cli.Exit(fmt.Sprintf("daemon: --max-module %q: a size from 1 to 4GiB", c.String("max-module")), 2)
			}
			if c.Duration("stub-timeout") <= 0 {
				return cli.Exit("daemon: --stub-timeout: a duration (30s, 2m)", 2)
			}
			route, ring, err := padOptionsOf(c)
			if err != nil {
				return err
			}
			trust := daemon.Trust{RequireSigned: c.Bool("require-signed"), AllowedSigners: c.String("allowed-signers"), RevokedKeys: c.String("revoked-keys"), ReadOnly: c.Bool("read-only")}
			if trust.RequireSigned && trust.AllowedSigners == "" {
				return cli.Exit("daemon: --require-signed needs --allowed-signers FILE: who may sign", 2)
			}
			if trust.AllowedSigners != "" {
				// read now, so that a mistake shows at start; read again
				// at each insert, so that an edit (a key revoked) counts
				if _, err := policy(trust.AllowedSigners, trust.RevokedKeys); err != nil {
					return cli.Exit("daemon: "+err.Error(), 2)
				}
			}
			srv, err := daemon.New(socketOf(c), state, daemon.LogOptions{MaxSize: maxSize, Keep: c.Int("log-keep"),
				Warn: func(msg string) { fmt.Fprintln(c.App.ErrWriter, "gprobes daemon:", msg) }})
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			srv.Limits = daemon.Limits{MaxModule: maxModule, StubTimeout: c.Duration("stub-timeout"), Route: route, RingSize: ring, KernelRingSize: kernelRing(c, ring)}
			srv.Trust = trust
			if err := startExporters(c, srv); err != nil { // exporters.go
				return err
			}
			if err := srv.Listen(); err != nil {
				return cli.Exit(err.Error(), 1)
			}
			recoverAll(c)
			startGuard(c.App.ErrWriter)
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
			// said before the first request is answered: a socket-activated
			// daemon has its first client waiting already
			fmt.Fprintf(c.App.Writer, "gprobes daemon %d serving %s, state %s\n", os.Getpid(), srv.Socket(), state)
			served := make(chan error, 1)
			go func() { served <- srv.Serve() }()
			select {
			case sig := <-sigs:
				fmt.Fprintf(c.App.Writer, "%v: removing every probe\n", sig)
			case err := <-served:
				if err != nil {
					srv.Shutdown()
					return cli.Exit(err.Error(), 1)
				}
			}
			if err := srv.Shutdown(); err != nil {
				return cli.Exit(err.Error(), 1)
			}
			return nil
		},
	}
}

func recoverCommand() *cli.Command {
	return &cli.Command{
		Name:  "recover",
		Usage: "put back the processes and Xen domains a gprobes killed with SIGKILL left with probes in",
		Description: `A gprobes that dies without detaching (SIGKILL, a crash) leaves its int3 bytes in the processes
it traced (the next thread to reach one dies of SIGTRAP) and its Xen domains in debugging mode with
their breakpoints in (at the next hit the domain pauses and stays paused). Each traced process has
a journal in /run/gprobes/proc (GPROBES_PROC_JOURNAL), each probed domain one in /run/gprobes/xen
(GPROBES_XEN_JOURNAL). This command, a daemon as it starts, the next gprobes to probe the same
process or domain, and the guard that every daemon and run leaves behind it (it acts the moment
its gprobes dies) put them back from the journals: for a process, the original bytes where the
same file is still mapped; for a domain, original bytes, debug registers cleared, vCPUs taken back
to their instruction, debugging mode off, the domain unpaused. Journals of a gprobes still
running are left alone. docs/engine.md says what cannot be put back.`,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "guard", Hidden: true, Usage: "wait for standard input to close, then put back what gprobes `PID` left"},
		},
		Action: func(c *cli.Context) error {
			if owner := c.Int("guard"); owner != 0 {
				return guard(c, owner)
			}
			if err := recoverAll(c); err != nil {
				return cli.Exit("", 1)
			}
			return nil
		},
	}
}

func insertCommand() *cli.Command {
	return &cli.Command{
		Name:      "insert",
		Usage:     "insert a module's probes into a target (host, the default: every process that maps the module's file, or the kernel; pid:N, exec:PATH ARGS, gdb:HOST:PORT, xen:DOMID, kernel)",
		ArgsUsage: "FILE.dpdf|FILE.ppdf|-|-e TEXT",
		Flags: append(append(sourceFlags(), trustFlags()...), socketFlag(),
			&cli.StringFlag{Name: "target", Aliases: []string{"t"}, Value: targets.Default, Usage: "`TARGET`: host (this machine: a modtype = user module in every process that maps its file, a modtype = kernel one in the kernel, through eBPF), pid:N (attach), exec:PATH ARGS (start it), gdb:HOST:PORT (a guest kernel through its GDB stub), xen:DOMID (a Xen PV domain's kernel, from dom0) or kernel (this machine's kernel, through eBPF)"},
			&cli.StringFlag{Name: "kaslr-offset", Usage: "the guest kernel's KASLR slide, `OFFSET` (default: found from linux_banner)"},
			&cli.BoolFlag{Name: "merge", Usage: "add the probes to the module of that name already in"},
			&cli.BoolFlag{Name: "replace", Usage: "replace the module of that name already in"},
			&cli.BoolFlag{Name: "every-copy", Usage: "host target: place a build-bound pack on every file of its build that processes map (a container's copy of the library), found now and as they are mapped, not only on the file its name names"},
			&cli.BoolFlag{Name: "json", Usage: "print the probes as JSON"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "print each probe as a block, every field whole: HOW with why the probe runs that way"},
		),
		Action: func(c *cli.Context) error {
			if c.Bool("merge") && c.Bool("replace") {
				return cli.Exit("insert: --merge or --replace, not both", 2)
			}
			in, rest, err := inputArg(c, "insert")
			if err != nil {
				return err
			}
			if len(rest) > 0 {
				return cli.Exit("insert: name one DPDF or PPDF file", 2)
			}
			l, err := load(c, in)
			if err != nil {
				return err
			}
			// a PPDF goes as it is, with its signature, for the daemon
			// to verify for itself; a DPDF compiled here, unsigned
			pack, sig := l.raw, string(l.sig)
			if !l.ppdf {
				if pack, err = ppdf.Encode(l.mod); err != nil {
					return cli.Exit(err.Error(), 1)
				}
			}
			if l.signer != "" {
				fmt.Fprintf(c.App.ErrWriter, "gprobes: %s: signed by %s\n", in.name, dpdf.Escape(l.signer))
			}
			mode := ""
			if c.Bool("merge") {
				mode = "merge"
			} else if c.Bool("replace") {
				mode = "replace"
			}
			req := daemon.InsertRequest{Target: c.String("target"), Mode: mode, PPDF: pack, Signature: sig, EveryCopy: c.Bool("every-copy")}
			if wd, err := os.Getwd(); err == nil {
				req.Dir = wd // exec:./prog is this directory's, and runs here
			}
			for _, p := range c.StringSlice("symbols") {
				abs, err := filepath.Abs(p)
				if err != nil {
					return cli.Exit(err.Error(), 1)
				}
				req.Symbols = append(req.Symbols, abs)
			}
			if s := c.String("kaslr-offset"); s != "" {
				v, err := parseValue(s)
				if err != nil {
					return cli.Exit("insert: --kaslr-offset: "+err.Error(), 2)
				}
				off := int64(v)
				req.KASLROffset = &off
			}
			resp, err := client(c).Insert(req)
			if err != nil {
				return daemonErr("insert", err)
			}
			if c.Bool("json") {
				return json.NewEncoder(c.App.Writer).Encode(resp)
			}
			if resp.Kernel != "" {
				fmt.Fprintf(c.App.ErrWriter, "%s: guest kernel %s\n", resp.Target, resp.Kernel)
			}
			if c.Bool("verbose") {
				printProbeDetails(c.App.Writer, resp.Probes)
			} else {
				printProbes(c.App.Writer, resp.Probes)
			}
			bad := 0
			for _, p := range resp.Probes {
				if p.State == probe.StateRefused || p.State == probe.StateMismatch {
					bad++
				}
			}
			if bad > 0 {
				return cli.Exit(fmt.Sprintf("insert: %s of %d refused (the others are in)", plural(bad, "probe"), len(resp.Probes)), 1)
			}
			return nil
		},
	}
}

// printProcesses prints each probe's hits by process, most first, as a
// table.
func printProcesses(w io.Writer, probes []daemon.TargetProbe) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tMODULE\tMINOR\tLOCATION\tPID\tCOMMAND\tHITS")
	for _, p := range probes {
		for _, ph := range p.Processes {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%d\n", p.Target, p.Module, p.Minor, probeLocation(p.Info), ph.Pid, dash(ph.Comm), ph.Hits)
		}
	}
	tw.Flush()
}

// printProbes prints the probes as a table, one line each: HOW is its
// short form (howShort), the why in the detail view (printProbeDetails).
func printProbes(w io.Writer, probes []daemon.TargetProbe) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tMODULE\tMINOR\tLOCATION\tADDRESS\tSTATE\tHOW\tHITS\tSKIPPED\tFAULTS\tMISSED\tDROPPED\tLOST\tREASON")
	whys := 0
	for _, p := range probes {
		addr := "-"
		if p.Address != 0 {
			addr = fmt.Sprintf("%#x", p.Address)
		}
		short, why := howShort(p.How)
		if why != "" {
			whys++
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", p.Target, p.Module, p.Minor, probeLocation(p.Info), addr,
			p.State, dash(short), p.Hits, p.Skipped, p.Faults, p.Missed, p.Dropped, p.Lost, p.Reason)
	}
	tw.Flush()
	// the file a module's name stands for, where it is not the name
	// itself ("libc": libc.so.6)
	shown := map[string]bool{}
	for _, p := range probes {
		if p.File == "" || p.File == p.Module || filepath.Base(p.File) == p.Module {
			continue
		}
		if k := p.Target + "\x00" + p.Module + "\x00" + p.File; !shown[k] {
			shown[k] = true
			fmt.Fprintf(w, "file: %s %s is %s\n", p.Target, p.Module, p.File)
		}
	}
	// what the probes write in their targets, said plainly (docs/ppdf.md,
	// "Packs for customers": a customer sees what a module may change)
	for _, p := range probes {
		if p.Writes != "" {
			fmt.Fprintf(w, "writes: %s %s minor %d %s: %s\n", p.Target, p.Module, p.Minor, p.Location, p.Writes)
		}
	}
	if whys > 0 {
		fmt.Fprintf(w, "(-v says why %s as HOW says)\n", count(uint64(whys), "probe runs", "probes run"))
	}
}

// printProbeDetails prints each probe as a block of its own, every field
// whole: query -v and run -v.
func printProbeDetails(w io.Writer, probes []daemon.TargetProbe) {
	for i, p := range probes {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s %s minor %d %s\n", p.Target, p.Module, p.Minor, probeLocation(p.Info))
		if p.File != "" {
			fmt.Fprintf(w, "  file     %s\n", p.File)
		}
		if p.Address != 0 {
			fmt.Fprintf(w, "  address  %#x\n", p.Address)
		}
		state := string(p.State)
		if p.Reason != "" {
			state += ": " + p.Reason
		}
		fmt.Fprintf(w, "  state    %s\n", state)
		if p.How != "" {
			fmt.Fprintf(w, "  how      %s\n", p.How)
		}
		fmt.Fprintf(w, "  counts   hits %d, skipped %d, faults %d, missed %d, dropped %d, lost %d", p.Hits, p.Skipped, p.Faults, p.Missed, p.Dropped, p.Lost)
		if p.SyslogLost > 0 {
			fmt.Fprintf(w, ", syslog lost %d", p.SyslogLost)
		}
		fmt.Fprintln(w)
		if p.Writes != "" {
			fmt.Fprintf(w, "  writes   %s\n", p.Writes)
		}
	}
}

// probeLocation is a probe's location with its kind in front, when it is
// not an offset probe: "retprobe write".
func probeLocation(p probe.Info) string {
	if p.Kind != "" {
		return p.Kind + " " + p.Location
	}
	return p.Location
}

// howShort splits a probe's HOW into what the table shows, the route and
// the way its instruction runs ("jump", "int3 emulate", "int3 ret",
// "watch DR0", "kprobe"), and the why, which the engine writes after the
// first ": " (why not a jump pad; a return probe's stops).
func howShort(how string) (short, why string) {
	if i := strings.Index(how, ": "); i >= 0 {
		return how[:i], how[i+2:]
	}
	return how, ""
}

// stateCounts is "2 active, 1 refused": how many probes are in each
// state, in the order of engine's states.
func stateCounts(probes []probe.Info) string {
	var parts []string
	for _, st := range []probe.State{probe.StateActive, probe.StatePending, probe.StateDisabled,
		probe.StateMismatch, probe.StateRefused, probe.StateGone, probe.StateRemoved} {
		n := 0
		for _, p := range probes {
			if p.State == st {
				n++
			}
		}
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func removeCommand() *cli.Command {
	return &cli.Command{
		Name:      "remove",
		Usage:     "remove a module's probes (or some, by minor), or every probe with --all; the original code is restored",
		ArgsUsage: "NAME",
		Flags: []cli.Flag{socketFlag(),
			&cli.IntSliceFlag{Name: "minor", Usage: "remove only the probes with minor code `N` (repeatable)"},
			&cli.BoolFlag{Name: "all", Aliases: []string{"a"}, Usage: "remove every module"},
			&cli.StringFlag{Name: "target", Aliases: []string{"t"}, Usage: "only from `TARGET` (pid:N, gdb:HOST:PORT, as inserted); default: every target"},
		},
		Action: func(c *cli.Context) error {
			req := daemon.RemoveRequest{All: c.Bool("all"), Module: c.Args().First(), Target: c.String("target")}
			if !req.All && c.NArg() != 1 {
				return cli.Exit("remove: name a module, or --all", 2)
			}
			for _, m := range c.IntSlice("minor") {
				req.Minors = append(req.Minors, uint16(m))
			}
			n, err := client(c).Remove(req)
			if err != nil {
				return daemonErr("remove", err)
			}
			fmt.Fprintf(c.App.Writer, "removed %s\n", plural(n, "probe"))
			return nil
		},
	}
}

func getvarsCommand() *cli.Command {
	return &cli.Command{
		Name:      "getvars",
		Usage:     "print the local variables of a module (of every module without NAME) and the global variables",
		ArgsUsage: "[NAME]",
		Flags: []cli.Flag{socketFlag(),
			&cli.BoolFlag{Name: "all", Aliases: []string{"a"}, Usage: "every module (the default without NAME)"},
			&cli.BoolFlag{Name: "reset", Usage: "reset them to zero after reading"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return cli.Exit("getvars: name one module, or none for all", 2)
			}
			module := c.Args().First() // none, or --all: every module
			resp, err := client(c).Vars(module, c.Bool("reset"))
			if err != nil {
				return daemonErr("getvars", err)
			}
			if c.Bool("json") {
				return json.NewEncoder(c.App.Writer).Encode(resp)
			}
			printVars(c.App.Writer, resp)
			return nil
		},
	}
}

func printVars(w io.Writer, resp *daemon.VarsResponse) {
	for _, m := range resp.Modules {
		fmt.Fprintf(w, "%s %s: lv", m.Target, m.Module)
		if len(m.LV) == 0 {
			fmt.Fprint(w, " (none)")
		}
		for i, v := range m.LV {
			fmt.Fprintf(w, " %d=%s", i, v)
		}
		fmt.Fprintln(w)
	}
	for _, g := range []struct {
		label string
		v     []string
	}{{"gv:", resp.GV}, {"kernel gv:", resp.KernelGV}} {
		if len(g.v) > 0 {
			fmt.Fprint(w, g.label)
			for i, v := range g.v {
				fmt.Fprintf(w, " %d=%s", i, v)
			}
			fmt.Fprintln(w)
		}
	}
}

func queryCommand() *cli.Command {
	return &cli.Command{
		Name:      "query",
		Usage:     "list the probes of a module (of every module without NAME): location, address, state (active, pending, disabled, mismatch, refused, gone), hits, skipped, faults",
		ArgsUsage: "[NAME]",
		Flags: []cli.Flag{socketFlag(),
			&cli.BoolFlag{Name: "all", Aliases: []string{"a"}, Usage: "every module (the default without NAME)"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "print each probe as a block, every field whole: HOW with why the probe runs that way"},
			&cli.BoolFlag{Name: "processes", Aliases: []string{"p"}, Usage: "also each probe's hits by process (pid, command name, hits; the host target's user probes)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return cli.Exit("query: name one module, or none for all", 2)
			}
			module := c.Args().First() // none, or --all: every module
			cl := client(c)
			probes, err := cl.ProbesBy(module, c.Bool("processes"))
			if err != nil {
				return daemonErr("query", err)
			}
			st, err := cl.Status()
			if err != nil {
				return daemonErr("query", err)
			}
			if c.Bool("json") {
				return json.NewEncoder(c.App.Writer).Encode(map[string]any{"probes": probes, "lost": st.Lost, "syslog_lost": st.SyslogLost})
			}
			if c.Bool("verbose") {
				printProbeDetails(c.App.Writer, probes)
			} else {
				printProbes(c.App.Writer, probes)
			}
			if c.Bool("processes") {
				printProcesses(c.App.Writer, probes)
			}
			printLosses(c.App.ErrWriter, "query", st.Lost, st.SyslogLost)
			return nil
		},
	}
}

func logCommand() *cli.Command {
	return &cli.Command{
		Name:      "log",
		Usage:     "print the committed log stream (of the modules named, or of every module), and with --follow the records committed from now on",
		ArgsUsage: "[NAME...]",
		Flags: []cli.Flag{socketFlag(),
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new records; with --format or --hist, take the records committed from now on until SIGINT or SIGTERM"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON lines as stored"},
			formatFlag(),
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "with --format, write the trace to `OUT` (a new directory for ctf, a file for perfetto)"},
			&cli.StringFlag{Name: "hist", Usage: "print a log2 histogram of logged word `N` (0 = the first; 8 bytes little-endian, signed) for each probe, as bpftrace prints hist()"},
			&cli.StringFlag{Name: "file", Usage: "read the log file `PATH` (the daemon's log.bin or a rotated log.bin.N, or an earlier gprobes' log.jsonl) instead of asking the daemon, which need not run: to its last whole record, saying on standard error if it ends in a torn one"},
		},
		Action: func(c *cli.Context) error {
			if c.String("file") != "" && (c.Bool("follow") || c.String("format") != "" || c.String("hist") != "") {
				return cli.Exit("log: --file prints a log file as text or --json; --follow, --format and --hist ask the daemon", 2)
			}
			if err := logModes(c); err != nil || c.String("format") != "" || c.String("hist") != "" {
				return err
			}
			ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer cancel()
			if c.Bool("json") {
				if err := logJSON(ctx, c, logLost(c)); err != nil {
					return daemonErr("log", err)
				}
				return nil
			}
			keep := logFilter(c)
			lay := daemon.NewProbeLogs(socketOf(c))
			read := client(c).Log
			if path := c.String("file"); path != "" {
				read = logFileReader(c, path)
			}
			err := read(ctx, c.Bool("follow"), func(l *daemon.LogLine) error {
				if !keep(l) {
					return nil
				}
				_, err := fmt.Fprintln(c.App.Writer, l.TextWith(lay.Of(l)))
				return err
			}, logLost(c))
			if err != nil {
				return daemonErr("log", err)
			}
			return nil
		},
	}
}

// logLost tells the user, on standard error, what a lost line of the log
// stream says.
func logLost(c *cli.Context) func(l *daemon.LostLine) error {
	return func(l *daemon.LostLine) error {
		printLosses(c.App.ErrWriter, "log", l.Lost, l.SyslogLost)
		if l.InTargets > 0 {
			fmt.Fprintf(c.App.ErrWriter, "gprobes: log: %d records lost in the targets probed (jump pads' rings or the kernel's eBPF rings were full; query's LOST column says which probes)\n", l.InTargets)
		}
		if l.RotatedAway > 0 {
			fmt.Fprintf(c.App.ErrWriter, "gprobes: log: fell behind: %d rotated log files were deleted before they could be read (the daemon's --log-keep)\n", l.RotatedAway)
		}
		printAway(c.App.ErrWriter, l)
		return nil
	}
}

// logJSON is log --json: the log stream's lines passed on as they come
// (each record's JSON line as the daemon formats it from the binary log,
// the lost lines too), decoded only to keep the modules named.
func logJSON(ctx context.Context, c *cli.Context, lost func(*daemon.LostLine) error) error {
	bw := bufio.NewWriterSize(c.App.Writer, 256<<10)
	keep := logFilter(c)
	filter := c.NArg() > 0
	line := func(b []byte, isLost bool) error {
		if filter && !isLost {
			var l daemon.LogLine
			if err := json.Unmarshal(b, &l); err != nil {
				return err
			}
			if !keep(&l) {
				return nil
			}
		}
		_, err := bw.Write(b)
		return err
	}
	var err error
	if path := c.String("file"); path != "" {
		pr, pw := io.Pipe()
		done := make(chan string, 1)
		go func() {
			_, torn, err := daemon.ReadLogFile(path, pw)
			pw.CloseWithError(err)
			done <- torn
		}()
		err = daemon.SplitLog(ctx, pr, line, lost, bw.Flush)
		pr.Close()
		if err == nil {
			if torn := <-done; torn != "" {
				defer fmt.Fprintf(c.App.ErrWriter, "gprobes: log: %s\n", torn)
			}
		}
	} else {
		err = client(c).LogLines(ctx, c.Bool("follow"), line, lost, bw.Flush)
	}
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	return err
}

// logFileReader reads a log file as Client.Log reads the daemon's log
// stream; a torn tail is told on standard error once the records before
// it are printed.
func logFileReader(c *cli.Context, path string) func(context.Context, bool, func(*daemon.LogLine) error, func(*daemon.LostLine) error) error {
	return func(ctx context.Context, _ bool, f func(*daemon.LogLine) error, lost func(*daemon.LostLine) error) error {
		pr, pw := io.Pipe()
		done := make(chan string, 1)
		go func() {
			_, torn, err := daemon.ReadLogFile(path, pw)
			pw.CloseWithError(err)
			done <- torn
		}()
		err := daemon.DecodeLog(ctx, pr, f, lost)
		pr.Close()
		if err != nil {
			return err
		}
		if torn := <-done; torn != "" {
			fmt.Fprintf(c.App.ErrWriter, "gprobes: log: %s\n", torn)
		}
		return nil
	}
}

// logFilter says which records log prints: those of the modules it was
// given as arguments (as query and insert name them), or every record.
func logFilter(c *cli.Context) func(*daemon.LogLine) bool {
	if c.NArg() == 0 {
		return func(*daemon.LogLine) bool { return true }
	}
	names := map[string]bool{}
	for _, n := range c.Args().Slice() {
		names[n] = true
	}
	return func(l *daemon.LogLine) bool { return names[l.Module] }
}

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "one shot, no daemon: start COMMAND (or attach to --target), insert FILE, print records as they commit, then the variables and probes",
		ArgsUsage: "FILE|-|-e TEXT -- COMMAND [ARGS...]",
		Flags: append(append(sourceFlags(), trustFlags()...),
			&cli.StringFlag{Name: "target", Aliases: []string{"t"}, Usage: "attach to `TARGET` (pid:N, gdb:HOST:PORT or xen:DOMID for a guest kernel) instead of starting a command; or kernel, this machine's kernel through eBPF, or host, this machine as a whole (the default without a COMMAND: a modtype = user module in every process that maps its file): with -- COMMAND, only COMMAND and the processes it starts are probed, and run ends when it exits. Attached (no COMMAND), run says \"gprobes: ready on TARGET (probes: 2 active)\" on standard error once its probes are in: start the workload then"},
			&cli.StringFlag{Name: "kaslr-offset", Usage: "with gdb:, the guest kernel's KASLR slide, `OFFSET`"},
			&cli.BoolFlag{Name: "json", Usage: "print records as JSON lines"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "do not print records, only the summary (with -o, the records still go to the file)"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "end with each probe as a block, every field whole (HOW with why the probe runs that way), instead of the table"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write the records to `FILE` as JSON lines (on the int3 route each written before the probed thread resumes; a jump pad's as gprobes drains its ring) instead of printing them; a record the file cannot take is counted, the summary says how many, and gprobes exits with status 74"},
			&cli.StringFlag{Name: "dumps", Value: ".", Usage: "`DIR` for the core dumps of exit 3"},
			formatFlag(),
			routeFlag(), ringFlag(),
		),
		Action: func(c *cli.Context) error {
			// SIGINT and SIGTERM are caught from the start, before the
			// DPDF is read and the target attached: one that comes while
			// gprobes gets ready is neither lost (a shell starts a
			// background job with SIGINT ignored, which only Notify turns
			// off) nor ends gprobes halfway through an attach
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(sigs)
			if oneLinerOf(c) == nil && c.NArg() == 0 {
				return cli.Exit("run: name a DPDF or PPDF file (- for standard input) or give the DPDF with -e TEXT, then -- COMMAND, or --target pid:N", 2)
			}
			in, command, err := inputArg(c, "run")
			if err != nil {
				return err
			}
			l, err := load(c, in)
			if err != nil {
				return err
			}
			if l.signer != "" {
				fmt.Fprintf(c.App.ErrWriter, "gprobes: %s: signed by %s\n", in.name, dpdf.Escape(l.signer))
			}
			return runOnce(c, l.builds, command, sigs)
		},
	}
}

// runOnce runs the probes of builds on the target or command; sigs are
// the SIGINT and SIGTERM caught since run started.
func runOnce(c *cli.Context, builds []*rpn.Module, command []string, sigs chan os.Signal) error {
	mod := builds[0]
	target := c.String("target")
	spec, topts, open, err := runTarget(c, command)
	if err != nil {
		return err
	}
	if target == "" && spec.Kind == targets.Host {
		target = spec.String()
	}
	// interrupted while the DPDF was read: nothing is attached, started
	// or changed, and run ends as an interrupted shell command does
	select {
	case sig := <-sigs:
		what := "attaching to " + spec.String()
		if len(command) > 0 {
			what = "starting " + command[0]
		}
		fmt.Fprintf(c.App.ErrWriter, "gprobes: %s before %s: nothing was done\n", signalName(sig), what)
		return cli.Exit("", 128+int(sig.(syscall.Signal)))
	default:
	}
	if spec.Kind == targets.Pid || spec.Kind == targets.Xen {
		// a process started here dies with us (PTRACE_O_EXITKILL); one
		// attached to, or a domain, is put back by the guard if we die
		startGuard(c.App.ErrWriter)
	}
	r := &runState{c: c, spec: spec, exitCode: -1}
	sink, closeOut, err := r.outputs(target, mod)
	if err != nil {
		return err
	}
	defer closeOut()
	var mainPid int
	route, ring, err := padOptionsOf(c)
	if err != nil {
		return err
	}
	eopts := engine.Options{
		Route:    route,
		RingSize: ring,
		Sink:     sink,
		DumpDir:  c.String("dumps"),
		OnExit: func(space int, how string, code int) {
			if space == mainPid {
				r.exitCode = code
			}
		},
		Warn: func(msg string) { fmt.Fprintln(c.App.ErrWriter, "gprobes:", msg) },
	}
	var eng probe.Prober
	var held *heldCommand // the kernel target's command, held at its exec until the probes are in
	if spec.Local() {
		if len(command) > 0 {
			if held, err = startHeld(command); err != nil {
				return cli.Exit("run: "+err.Error(), 1)
			}
			defer held.unlock()
			topts.KernelPID = held.pid
		}
		eopts.RingSize = kernelRing(c, ring)
		eng, err = spec.Start(topts, eopts)
	} else {
		eng, err = engine.Start(open, eopts)
	}
	if err != nil {
		if held != nil {
			held.kill()
		}
		return cli.Exit("run: "+err.Error(), 1)
	}
	mainPid = eng.Pid()
	r.label = spec.String() // what the summary names the target by
	if !spec.NamedBySpec() {
		r.label = fmt.Sprintf("pid:%d", mainPid)
	}
	if r.trace != nil {
		r.trace.setTarget(r.label)
	}
	probes, err := probe.InsertPack(eng, builds, probe.InsertNew)
	if err != nil {
		eng.Close()
		r.flushRecords()
		if held != nil {
			held.kill()
		}
		return cli.Exit("run: "+err.Error(), 1)
	}
	for _, p := range probes {
		if p.State == probe.StateRefused || p.State == probe.StateMismatch {
			fmt.Fprintf(c.App.ErrWriter, "gprobes: probe %s (minor %d) %s: %s\n", p.Location, p.Minor, p.State, p.Reason)
		}
	}
	// a signal that came while the target was attached and the probes
	// went in is taken below: they come out at once
	if err := eng.Release(); err != nil {
		return cli.Exit("run: "+err.Error(), 1)
	}
	if len(command) == 0 {
		// attached to a running target: say when the probes are in, so
		// that whoever drives the target (a person, a script, a test)
		// starts the workload then and not after a guessed time
		fmt.Fprintf(c.App.ErrWriter, "gprobes: ready on %s (probes: %s); Ctrl-C (SIGINT) or SIGTERM takes them out and ends\n", r.label, stateCounts(probes))
	}
	ended := eng.Ended()
	if held != nil {
		if ended, err = held.run(func(code int) { r.mu.Lock(); r.exitCode = code; r.mu.Unlock() }); err != nil {
			eng.Close()
			r.flushRecords()
			return cli.Exit("run: "+err.Error(), 1)
		}
	}
	select {
	case <-ended:
	case r.caught = <-sigs:
		r.interrupted = true
	}
	// the summary: variables and probes, read in the same engine command
	// as the detach (through gdbsx, each command waits for a hit)
	slow := time.AfterFunc(time.Second, func() {
		if r.interrupted && spec.Kind == targets.GDB {
			fmt.Fprintln(c.App.ErrWriter, "gprobes: waiting for the guest to stop: a stub that ignores ^C (gdbsx) stops only at a hit, or when the domain is paused (xl pause DOMID: gdbsx unpauses it as gprobes detaches); killing gprobes now would leave its int3 bytes in the guest")
		}
	})
	final, err := eng.Close()
	slow.Stop()
	return r.report(final, err)
}

// runTarget reads run's target (--target, or the command to start) and
// what the backend needs to open it; open is nil for the kernel target,
// which starts differently.
func runTarget(c *cli.Context, command []string) (targets.Spec, targets.Options, func() (engine.Target, error), error) {
	spec := targets.ExecArgv(command)
	target := c.String("target")
	if target == "" && len(command) == 0 {
		// nothing to start, no target named: this machine as a whole
		target = targets.Default
	}
	if target != "" {
		var err error
		if spec, err = targets.Parse(target); err != nil {
			return spec, targets.Options{}, nil, cli.Exit("run: --target: "+err.Error(), 2)
		}
	}
	topts := targets.Options{}
	if spec.Guest() {
		topts.Symbols = c.StringSlice("symbols")
		if s := c.String("kaslr-offset"); s != "" {
			v, err := parseValue(s)
			if err != nil {
				return spec, topts, nil, cli.Exit("run: --kaslr-offset: "+err.Error(), 2)
			}
			off := int64(v)
			topts.KASLROffset = &off
		}
	}
	if spec.Local() {
		topts.Symbols = c.StringSlice("symbols")
		return spec, topts, nil, nil
	}
	open, err := spec.Open(topts)
	if err != nil {
		return spec, topts, nil, cli.Exit("run: "+err.Error(), 1)
	}
	return spec, topts, open, nil
}

// runState is what one run keeps from its start to its summary.
// flushRecords writes the records run still holds to put them in order
// (the engine is closed) and returns how many came too late for that.
func (r *runState) flushRecords() uint64 {
	if r.records == nil {
		return 0
	}
	return r.records.flush()
}

type runState struct {
	c           *cli.Context
	spec        targets.Spec
	label       string // the target as the summary names it
	recOut      *recordOutput
	trace       *traceSink // --format: the trace written instead of records
	records     *runSink   // the records written (unless --format)
	mu          sync.Mutex // the sink's, and exitCode's from a held command
	exitCode    int        // the command's exit status, -1 while unknown
	interrupted bool
	caught      os.Signal
}

// outputs opens where run's records go (standard output, -o FILE, or a
// trace with --format) and returns the sink that writes them, and what
// closes the file.
func (r *runState) outputs(target string, mod *rpn.Module) (probe.Sink, func(), error) {
	c := r.c
	closeOut := func() {}
	r.recOut = newRecordOutput(c.App.Writer, "standard output")
	if path := c.String("output"); path != "" && c.String("format") == "" {
		// a file appended to (links followed), or a device or FIFO
		// written through; a directory, block device or socket refused
		f, err := outfile.OpenAppend(path, 0o600)
		if err != nil {
			return nil, closeOut, cli.Exit("run: "+err.Error(), 1)
		}
		closeOut = func() { f.Close() }
		r.recOut = newRecordOutput(f, path)
	}
	asJSON := c.Bool("json") || c.String("output") != ""
	quiet := c.Bool("quiet") && c.String("output") == ""
	lay := daemon.NewProbeLogs("")
	lay.AddModule(target, mod)
	r.records = &runSink{target: target, quiet: quiet, asJSON: asJSON, out: r.recOut, mu: &r.mu, layouts: lay}
	var sink probe.Sink = r.records
	if format := c.String("format"); format != "" {
		if c.String("output") == "" {
			return nil, closeOut, cli.Exit("run: --format writes a trace: give -o OUT", 2)
		}
		var err error
		r.recOut = &recordOutput{name: c.String("output")}
		if r.trace, err = newTraceSink(format, c.String("output"), mod, &r.mu, r.recOut); err != nil {
			return nil, closeOut, cli.Exit("run: "+err.Error(), 1)
		}
		sink = r.trace
	}
	return sink, closeOut, nil
}

// report prints run's summary once the engine is closed (variables,
// probes, records lost) and returns how run ends: the command's exit
// status, or exitLost when records could not be written.
func (r *runState) report(final engine.Final, closeErr error) error {
	c, out := r.c, r.c.App.Writer
	vars, probes := final.Vars, final.Probes
	if late := r.flushRecords(); late > 0 {
		fmt.Fprintf(c.App.ErrWriter, "gprobes: %s more than %v late (behind newer ones already written), written out of order of time\n", plural(int(late), "record"), orderWindow)
	}
	if r.trace != nil {
		if terr := r.trace.finish(probes); terr != nil {
			fmt.Fprintf(c.App.ErrWriter, "gprobes: %s: %v\n", c.String("output"), terr)
		}
	}
	// interrupted, the table says what is true once run is done: the
	// target runs on, and what was in is out. (A run that ends with its
	// command shows the states the probes had for all of its life: gone
	// with the process, or, on the kernel target, active.)
	if r.interrupted {
		why := "taken out at " + signalName(r.caught)
		if !r.spec.Local() {
			why += "; " + r.label + " runs on without it"
		}
		takenOut(probes, why)
	}
	for _, v := range vars {
		printVars(out, &daemon.VarsResponse{Modules: []daemon.VarsModule{{Target: r.label, Module: v.Name, LV: decimalStrings(v.LV)}}, GV: decimalStrings(v.GV)})
	}
	var tps []daemon.TargetProbe
	for _, p := range probes {
		tps = append(tps, daemon.TargetProbe{Target: r.label, Info: p, Lost: r.recOut.lost.Of("", p.Module, p.Minor) + p.Lost})
		if p.Lost > 0 {
			where := "in the process (its jump pads' ring was full)"
			if r.spec.Local() {
				where = "in the kernel (the module's eBPF ring buffer was full: --ring SIZE)"
			}
			fmt.Fprintf(c.App.ErrWriter, "gprobes: probe %s (minor %d): %d records lost %s\n", p.Location, p.Minor, p.Lost, where)
		}
	}
	if c.Bool("verbose") {
		printProbeDetails(out, tps)
	} else {
		printProbes(out, tps)
	}
	if closeErr != nil && !errors.Is(closeErr, os.ErrProcessDone) {
		fmt.Fprintln(c.App.ErrWriter, "gprobes:", closeErr)
	}
	r.mu.Lock() // the sink is done: Close has returned
	lost, written, exitCode := r.recOut.lost.Summary(), r.recOut.written, r.exitCode
	r.mu.Unlock()
	if lost.Records > 0 {
		how := "was interrupted"
		switch {
		case !r.interrupted && exitCode >= 0:
			how = fmt.Sprintf("exited with status %d", exitCode)
		case !r.interrupted:
			how = "was let go"
		}
		return cli.Exit(fmt.Sprintf("run: %d of %d records could not be written to %s and are lost (first error: %s; last: %s); %s %s",
			lost.Records, lost.Records+written, r.recOut.name, lost.FirstError, lost.LastError, r.label, how), exitLost)
	}
	if r.interrupted || exitCode < 0 {
		return nil
	}
	if exitCode != 0 {
		return cli.Exit("", exitCode)
	}
	return nil
}

// takenOut gives the probes run took out as it ended (in, switched off
// or still waiting until then) the state removed, and why.
func takenOut(probes []probe.Info, why string) {
	for i := range probes {
		p := &probes[i]
		switch p.State {
		case probe.StateActive:
			p.State, p.Reason = probe.StateRemoved, why
		case probe.StateDisabled:
			p.State, p.Reason = probe.StateRemoved, why+" (it was disabled)"
		case probe.StatePending:
			was := "pending"
			if p.Reason != "" {
				was += ": " + p.Reason
			}
			p.State, p.Reason = probe.StateRemoved, why+" (it was "+was+")"
		}
	}
}

// signalName is "SIGINT" for syscall.SIGINT.
func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return fmt.Sprint(sig)
}

func decimalStrings(v []uint64) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = fmt.Sprint(x)
	}
	return out
}

// printLosses says on w (standard error) how many records the daemon could
// not write to its log file and how many syslog missed, if any.
func printLosses(w io.Writer, cmd string, file, sys daemon.LossSummary) {
	if file.Records > 0 {
		fmt.Fprintf(w, "gprobes: %s: records missing from the log file: %s\n", cmd, file)
	}
	if sys.Records > 0 {
		fmt.Fprintf(w, "gprobes: %s: records syslog did not get: %s\n", cmd, sys)
	}
}

// printAway says which records log could not read because their file was
// changed under the daemon.
func printAway(w io.Writer, l *daemon.LostLine) {
	for _, a := range awayOf(l) {
		fmt.Fprintf(w, "gprobes: log: %s\n", a)
	}
}

// awayOf says, a sentence each, which records the log stream does not
// have because their file was renamed, removed or cut under the daemon.
func awayOf(l *daemon.LostLine) []string {
	var out []string
	if l.RenamedAway > 0 {
		out = append(out, fmt.Sprintf("%s in a log file renamed under the daemon (logrotate?) to a name it does not read: read that file", count(l.RenamedAway, "record is", "records are")))
	}
	if l.RemovedAway > 0 {
		out = append(out, fmt.Sprintf("%s in a log file removed under the daemon: they were written and cannot be read", count(l.RemovedAway, "record was", "records were")))
	}
	if l.CutAway > 0 {
		out = append(out, fmt.Sprintf("%s cut out of the log file under the daemon (logrotate's copytruncate?): they are in its copy, if one was made", count(l.CutAway, "record was", "records were")))
	}
	return out
}

// count is "1 one" or "N many".
func count(n uint64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// routeFlag is --route, for run and the daemon.
func routeFlag() cli.Flag {
	return &cli.StringFlag{Name: "route", Value: "auto", Usage: "how probes in processes run: `auto` (in the process through a jump pad where that is safe, an int3 trap to gprobes elsewhere) or int3 (a trap for every hit)"}
}

// padOptionsOf reads --route and --ring (run and the daemon).
func padOptionsOf(c *cli.Context) (route string, ring int, err error) {
	switch r := c.String("route"); r {
	case "auto", "":
		route = engine.RouteAuto
	case "int3":
		route = engine.RouteInt3
	default:
		return "", 0, cli.Exit(fmt.Sprintf("--route %q: auto or int3", r), 2)
	}
	n, err := parseSize(c.String("ring"))
	if err != nil || n < pad.MinRingSize || n > pad.MaxRingSize || n&(n-1) != 0 {
		return "", 0, cli.Exit(fmt.Sprintf("--ring %q: a power of two from 64KiB to 1GiB", c.String("ring")), 2)
	}
	return route, int(n), nil
}

// kernelRing is the kernel target's ring size: --ring when given, else 0,
// the kernel target's own default (kernel.DefaultRingSize), larger than a
// process's: its programs do not wait for gprobes' reader.
func kernelRing(c *cli.Context, ring int) int {
	if c.IsSet("ring") {
		return ring
	}
	return 0
}

// ringFlag is --ring, for run and the daemon.
func ringFlag() cli.Flag {
	return &cli.StringFlag{Name: "ring", Value: "64MiB", Usage: "the ring of records each probed process's jump pads commit to, `SIZE` (a power of two from 64KiB to 1GiB; its pages are used only as records are written): a record of two logged words takes 64 bytes; gprobes moves records out as bytes and writes them behind, holding up to 4 rings' worth (256MiB at most) in its own memory; records that come faster wait in the ring, and are counted lost once it is full; on the kernel target, each module's eBPF ring buffer (16MiB there unless given)"}
}
