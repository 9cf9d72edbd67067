// Command gprobes puts fully automated breakpoints ("probes") into running
// code and runs a small RPN program on every hit. See docs/cli.md.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gprobes/gprobes/internal/outfile"
)

// version is set by the build (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	if path := os.Getenv("GPROBES_CPUPROFILE"); path != "" {
		// for measuring gprobes itself (scripts/bench-process); written
		// as every output is (internal/outfile)
		if f, err := outfile.Create(path, 0o644); err == nil {
			pprof.StartCPUProfile(f.OS())
			code := run(os.Args, os.Stdout, os.Stderr)
			pprof.StopCPUProfile()
			f.Commit()
			os.Exit(code)
		}
	}
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run executes the command line and returns the exit status: 0 on
// success, 1 when the input has errors (they are printed), 2 for usage
// errors.
func run(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	err := app.Run(intersperse(app, args))
	if err == nil {
		return 0
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		if msg := ec.Error(); msg != "" {
			fmt.Fprintln(stderr, "gprobes:", msg)
		}
		return ec.ExitCode()
	}
	fmt.Fprintln(stderr, "gprobes:", err)
	return 1
}

func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:    "gprobes",
		Usage:   "dynamic probes for processes, QEMU/KVM guests and Xen guests",
		Version: version,
		Description: `gprobes inserts fully automated breakpoints (probes) into running code and runs a small
RPN program on every hit: it reads registers and memory, keeps counters, decides what is
worth recording and commits a log record once the probed instruction has executed.

Probes are written in a probe definition file (DPDF, see docs/language.md). "gprobes check"
verifies one, "gprobes build" pre-builds it into a binary PPDF pack, "gprobes disasm" lists
its bytecode and "gprobes sim" runs a probe's program off-line against registers and memory
you give it.`,
		EnableBashCompletion: true,
		Writer:               stdout,
		ErrWriter:            stderr,
		ExitErrHandler:       func(*cli.Context, error) {},
		Commands: []*cli.Command{
			checkCommand(),
			buildCommand(),
			disasmCommand(),
			listCommand(),
			simCommand(),
			live(runCommand()),
			live(daemonCommand()),
			live(recoverCommand()),
			live(insertCommand()),
			removeCommand(),
			enableCommand(),
			disableCommand(),
			getvarsCommand(),
			queryCommand(),
			logCommand(),
			statusCommand(),
			doctorCommand(),
			otlpForwardCommand(),
			completionCommand(),
			manCommand(),
		},
	}
}

// intersperse moves a command's flags before its arguments, so that
// "gprobes sim FILE --probe 1" works: urfave/cli v2, like Go's flag
// package, stops at the first argument. Everything after "--" stays an
// argument.
func intersperse(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	var cmd *cli.Command
	i := 1
	for ; i < len(args); i++ {
		if !strings.HasPrefix(args[i], "-") {
			cmd = app.Command(args[i])
			break
		}
	}
	if cmd == nil {
		return args
	}
	takesValue := map[string]bool{}
	for _, f := range cmd.Flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			takesValue[n] = !isBool
		}
	}
	out := append([]string{}, args[:i+1]...)
	var flags, positional []string
	rest := args[i+1:]
	for j := 0; j < len(rest); j++ {
		a := rest[j]
		switch {
		case a == "--":
			positional = append(positional, rest[j+1:]...)
			j = len(rest)
		case len(a) > 1 && a[0] == '-':
			flags = append(flags, a)
			name := strings.TrimLeft(a, "-")
			if !strings.Contains(name, "=") && takesValue[name] && j+1 < len(rest) {
				j++
				flags = append(flags, rest[j])
			}
		default:
			positional = append(positional, a)
		}
	}
	out = append(out, flags...)
	if len(positional) > 0 {
		out = append(out, "--")
		out = append(out, positional...)
	}
	return out
}
