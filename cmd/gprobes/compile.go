package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/ppdf"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/symbols"
)

// Flags shared by the commands that read a DPDF.
func sourceFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "D", Usage: "define `NAME[=VALUE]` for the C preprocessor"},
		&cli.StringSliceFlag{Name: "I", Usage: "add `DIR` to the preprocessor's include path"},
		&cli.StringSliceFlag{Name: "symbols", Aliases: []string{"s"}, Usage: "resolve locations and symbols with `FILE` (ELF, System.map or a copy of /proc/kallsyms; repeatable)"},
		&cli.StringFlag{Name: "cpp", Usage: "C preprocessor `COMMAND` (default: $GPROBES_CPP, cpp, gcc -E, cc -E)"},
	}
}

// resolver adapts a symbols.Set to the compiler's questions.
type resolver struct{ *symbols.Set }

func (r resolver) Symbol(name string) (uint64, error) {
	s, err := r.Lookup(name)
	if err != nil {
		return 0, err
	}
	return s.Addr, nil
}

var _ rpn.Resolver = resolver{}

// loaded is a module read from a DPDF or a PPDF.
type loaded struct {
	mod  *rpn.Module
	prog *rpn.Program
	deps []string // files read, for make
	ppdf bool
}

// loadSymbols opens every --symbols file.
func loadSymbols(c *cli.Context) (*symbols.Set, error) {
	paths := c.StringSlice("symbols")
	if len(paths) == 0 {
		return nil, nil
	}
	set := symbols.NewSet()
	for _, p := range paths {
		t, err := symbols.Open(p)
		if err != nil {
			return nil, err
		}
		set.Add(t)
	}
	return set, nil
}

// isPPDF reports whether data is meant to be a PPDF: it starts with the
// PPDF magic, or with something close enough (a magic mangled by a
// text-mode transfer) that the decoder's diagnosis helps more than DPDF
// syntax errors would.
func isPPDF(data []byte) bool {
	head := data[:min(len(data), 16)]
	return bytes.Contains(head, []byte("PPDF")) && bytes.IndexByte(head, 0) >= 0 ||
		bytes.HasPrefix(data, []byte("\x89PPDF"))
}

// load reads a DPDF (compiling it) or a PPDF (verifying it).
func load(c *cli.Context, path string) (*loaded, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, cli.Exit(err.Error(), 1)
	}
	if isPPDF(data) {
		// a PPDF is a stranger's file: its text reaches the terminal
		// escaped
		m, err := ppdf.Decode(data)
		if err != nil {
			return nil, cli.Exit(dpdf.Escape(fmt.Sprintf("%s: %v", path, err)), 1)
		}
		prog, err := rpn.Load(m)
		if err != nil {
			return nil, cli.Exit(dpdf.Escape(fmt.Sprintf("%s: %v", path, err)), 1)
		}
		return &loaded{mod: m, prog: prog, deps: []string{path}, ppdf: true}, nil
	}
	set, err := loadSymbols(c)
	if err != nil {
		return nil, cli.Exit(err.Error(), 1)
	}
	opts := dpdf.Options{Defines: c.StringSlice("D"), Includes: c.StringSlice("I"), CPP: c.String("cpp")}
	f, err := dpdf.Parse(path, opts)
	if f == nil {
		return nil, reportErrors(c, err)
	}
	// a file with syntax errors still compiles, to report every error at once
	var copts rpn.CompileOptions
	if set != nil {
		copts.Symbols = resolver{set}
	}
	prog, err := rpn.CompileProgram(f, copts)
	if err != nil {
		return nil, reportErrors(c, err)
	}
	m := prog.Module()
	deps := append([]string{}, f.Deps...)
	if set != nil {
		deps = append(deps, set.Files()...)
	}
	return &loaded{mod: m, prog: prog, deps: deps}, nil
}

// reportErrors prints every positioned error with its source line and
// returns exit status 1.
func reportErrors(c *cli.Context, err error) error {
	dpdf.PrintError(c.App.ErrWriter, err, true)
	var l dpdf.ErrorList
	if errors.As(err, &l) && len(l) > 1 {
		fmt.Fprintf(c.App.ErrWriter, "%d errors\n", len(l))
	}
	return cli.Exit("", 1)
}

func checkCommand() *cli.Command {
	return &cli.Command{
		Name:      "check",
		Usage:     "parse and verify DPDF files; print every error as file:line:col: message",
		ArgsUsage: "FILE.dpdf...",
		Flags:     sourceFlags(),
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return cli.Exit("check: name a DPDF file", 2)
			}
			failed := false
			for _, path := range c.Args().Slice() {
				l, err := load(c, path)
				if err != nil {
					var ec cli.ExitCoder
					if errors.As(err, &ec) && ec.Error() != "" {
						fmt.Fprintln(c.App.ErrWriter, ec.Error())
					}
					failed = true
					continue
				}
				unresolved := 0
				for _, r := range l.mod.Relocs {
					if !r.Resolved {
						unresolved++
					}
				}
				for _, p := range l.mod.Probes {
					if !p.Loc.Resolved && p.Loc.Kind != rpn.LocTracepoint { // a tracepoint has no address
						unresolved++
					}
				}
				fmt.Fprintf(c.App.Writer, "%s: ok: module %q, %s, %d bytes of bytecode", path, l.mod.Name, plural(len(l.mod.Probes), "probe"), len(l.mod.Code))
				if unresolved > 0 {
					fmt.Fprintf(c.App.Writer, ", %s left for insert-time resolution", plural(unresolved, "symbolic value"))
				}
				fmt.Fprintln(c.App.Writer)
			}
			if failed {
				return cli.Exit("", 1)
			}
			return nil
		},
	}
}

func buildCommand() *cli.Command {
	return &cli.Command{
		Name:      "build",
		Usage:     "pre-build a DPDF into a binary PPDF pack (byte-identical output for identical input)",
		ArgsUsage: "FILE.dpdf",
		Flags: append(sourceFlags(),
			&cli.StringFlag{Name: "o", Usage: "write the PPDF to `OUT` (default: FILE.ppdf)"},
			&cli.BoolFlag{Name: "MD", Usage: "also write a make dependency file OUT.d, as gcc -MD does"},
			&cli.StringFlag{Name: "MF", Usage: "write the dependency file to `FILE` (implies -MD)"},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("build: name one DPDF file", 2)
			}
			in := c.Args().First()
			out := c.String("o")
			if out == "" {
				out = strings.TrimSuffix(in, filepath.Ext(in)) + ".ppdf"
			}
			l, err := load(c, in)
			if err != nil {
				return err
			}
			if l.ppdf {
				return cli.Exit(fmt.Sprintf("build: %s is already a PPDF", in), 1)
			}
			if err := ppdf.WriteFile(out, l.mod); err != nil {
				return cli.Exit(err.Error(), 1)
			}
			if c.Bool("MD") || c.String("MF") != "" {
				depfile := c.String("MF")
				if depfile == "" {
					depfile = strings.TrimSuffix(out, filepath.Ext(out)) + ".d"
				}
				if err := writeDepfile(depfile, out, l.deps); err != nil {
					return cli.Exit(err.Error(), 1)
				}
			}
			fmt.Fprintf(c.App.Writer, "%s: module %q, %s, %d bytes of bytecode\n", out, l.mod.Name, plural(len(l.mod.Probes), "probe"), len(l.mod.Code))
			return nil
		},
	}
}

// plural spells "1 probe", "2 probes".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// writeDepfile writes a make rule "target: deps..." plus an empty rule for
// each prerequisite but the first, so make does not fail when an included
// file or a symbol file is removed (gcc's -MP).
func writeDepfile(path, target string, deps []string) error {
	var b bytes.Buffer
	b.WriteString(makeEscape(target) + ":")
	seen := map[string]bool{}
	var uniq []string
	for _, d := range deps {
		if !seen[d] {
			seen[d] = true
			uniq = append(uniq, d)
		}
	}
	for _, d := range uniq {
		b.WriteString(" \\\n  " + makeEscape(d))
	}
	b.WriteString("\n")
	rest := append([]string{}, uniq[min(1, len(uniq)):]...)
	sort.Strings(rest)
	for _, d := range rest {
		b.WriteString("\n" + makeEscape(d) + ":\n")
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write dependency file: %w", err)
	}
	return nil
}

// makeEscape quotes a file name for a make rule.
func makeEscape(s string) string {
	s = strings.ReplaceAll(s, "$", "$$")
	s = strings.ReplaceAll(s, "#", "\\#")
	return strings.ReplaceAll(s, " ", "\\ ")
}

func disasmCommand() *cli.Command {
	return &cli.Command{
		Name:      "disasm",
		Usage:     "list the bytecode of a DPDF or PPDF with the DPDF line of each instruction",
		ArgsUsage: "FILE.dpdf|FILE.ppdf",
		Flags:     sourceFlags(),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cli.Exit("disasm: name one DPDF or PPDF file", 2)
			}
			l, err := load(c, c.Args().First())
			if err != nil {
				return err
			}
			rpn.Disasm(c.App.Writer, l.mod)
			return nil
		},
	}
}
