package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gprobes/gprobes/bpf"
	"github.com/gprobes/gprobes/compiler"
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/internal/outfile"
	"github.com/gprobes/gprobes/packsign"
	"github.com/gprobes/gprobes/ppdf"
	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/symbols"
)

// Flags shared by the commands that read a DPDF.
func sourceFlags() []cli.Flag {
	return []cli.Flag{
		&cli.GenericFlag{Name: "e", Value: &oneLiner{}, Usage: "the DPDF itself, `TEXT`, instead of a file: statements separated by ; or newlines (repeatable: each -e is a line; a // comment runs to the end of its line, and a # directive takes a line of its own)"},
		&cli.StringSliceFlag{Name: "D", Usage: "define `NAME[=VALUE]` for the C preprocessor"},
		&cli.StringSliceFlag{Name: "I", Usage: "add `DIR` to the preprocessor's include path"},
		&cli.StringSliceFlag{Name: "symbols", Aliases: []string{"s"}, Usage: "resolve locations and symbols with `FILE` (ELF, System.map or a copy of /proc/kallsyms; repeatable)"},
		&cli.StringFlag{Name: "cpp", Usage: "C preprocessor `COMMAND` (default: $GPROBES_CPP, cpp, gcc -E, cc -E)"},
	}
}

// resolver answers the compiler's questions from the --symbols
// (probe.Symbols at link-time addresses), leaving to insert a kernel
// module's symbols, which are placed when it loads.
type resolver struct{ probe.Symbols }

func (r resolver) Symbol(name string) (uint64, error) {
	a, err := r.Symbols.Symbol(name)
	if errors.Is(err, symbols.ErrNotLinked) {
		return 0, fmt.Errorf("%w: %v", rpn.ErrAtInsertion, err)
	}
	return a, err
}

var _ rpn.Resolver = resolver{}

// ModuleBuildID is the build ID the module is bound to: for a kernel
// module (modtype kernel, a name other than vmlinux or kernel) the first
// .ko's, not the vmlinux's given for its types (none without a .ko); for
// the kernel image the first file's that is not a .ko; else the first
// file's that has one.
func (r resolver) ModuleBuildID(name string, modtype rpn.ModType) []byte {
	if modtype != rpn.ModKernel {
		return r.BuildID()
	}
	image := name == "vmlinux" || name == "kernel"
	for _, t := range r.Tables() {
		if t.BuildID() != nil && t.Relocatable() != image {
			return t.BuildID()
		}
	}
	return nil
}

// loaded is a module read from a DPDF or a PPDF.
type loaded struct {
	mod    *rpn.Module
	prog   *rpn.Program
	builds []*rpn.Module // a PPDF's builds (mod is the first); [mod] for a DPDF
	deps   []string      // files read, for make
	ppdf   bool
	raw    []byte // a PPDF's bytes, as read: what its signature is over
	sig    []byte // its signature (PPDF.sig, or --signature), nil if none
	signer string // who signed it, when verified (trust.go)
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

// oneLiner is -e: each value one line of the DPDF (a StringSliceFlag
// would split them at the commas of "push d,1").
type oneLiner []string

func (o *oneLiner) Set(v string) error { *o = append(*o, v); return nil }
func (o *oneLiner) String() string     { return strings.Join(*o, "\n") }

// oneLinerName is what errors call the DPDF of -e, as a file name.
const oneLinerName = "-e"

// input is a DPDF or PPDF as a command got it: a file (regular, or a
// pipe, a FIFO, /dev/stdin), standard input ("-") or -e TEXT. It is read
// once: a pipe cannot be read twice.
type input struct {
	name    string // for messages and positions: the path, "<stdin>" or "-e"
	path    string // the path given; "" for standard input and -e
	data    []byte
	regular bool // path is a regular file (the preprocessor may read it)
}

// oneLinerOf returns the DPDF of -e, or nil when -e was not given.
func oneLinerOf(c *cli.Context) *input {
	o, ok := c.Generic("e").(*oneLiner)
	if !ok || o == nil || len(*o) == 0 {
		return nil
	}
	return &input{name: oneLinerName, data: []byte(strings.Join(*o, "\n") + "\n")}
}

// readInput reads the file at path, or standard input for "-".
func readInput(c *cli.Context, path string) (*input, error) {
	if path == "-" {
		r := c.App.Reader
		if r == nil {
			r = os.Stdin
		}
		data, err := io.ReadAll(r)
		if err != nil {
			return nil, cli.Exit(fmt.Sprintf("read standard input: %v", err), 1)
		}
		return &input{name: "<stdin>", data: data}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, cli.Exit(err.Error(), 1)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, cli.Exit(err.Error(), 1)
	}
	if st.IsDir() {
		return nil, cli.Exit(fmt.Sprintf("read %s: is a directory", path), 1)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("read %s: %v", path, err), 1)
	}
	return &input{name: path, path: path, data: data, regular: st.Mode().IsRegular()}, nil
}

// inputArg is the one DPDF or PPDF of a command: -e TEXT, else its first
// argument (a file, or "-"). rest is the arguments after it.
func inputArg(c *cli.Context, cmd string) (in *input, rest []string, err error) {
	args := c.Args().Slice()
	if in = oneLinerOf(c); in != nil {
		return in, args, nil
	}
	if len(args) == 0 {
		return nil, nil, cli.Exit(cmd+": name a DPDF or PPDF file (- for standard input), or give the DPDF with -e TEXT", 2)
	}
	in, err = readInput(c, args[0])
	return in, args[1:], err
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

// load reads a DPDF (compiling it) or a PPDF (verifying it: its
// signature first when the command was given --allowed-signers, then its
// structure and bytecode).
func load(c *cli.Context, in *input) (*loaded, error) {
	path, data := in.name, in.data
	if isPPDF(data) {
		sig, signer, err := verifyPack(c, in, data) // trust.go
		if err != nil {
			return nil, err
		}
		// a PPDF is a stranger's file: its text reaches the terminal
		// escaped
		builds, err := ppdf.DecodePack(data)
		if err != nil {
			return nil, cli.Exit(dpdf.Escape(fmt.Sprintf("%s: %v", path, err)), 1)
		}
		var prog *rpn.Program
		for _, m := range builds {
			p, err := rpn.Load(m)
			if err != nil {
				return nil, cli.Exit(dpdf.Escape(fmt.Sprintf("%s: build %s: %v", path, ppdf.BuildIDString(m.BuildID), err)), 1)
			}
			if prog == nil {
				prog = p
			}
		}
		return &loaded{mod: builds[0], prog: prog, builds: builds, deps: []string{path}, ppdf: true, raw: data, sig: sig, signer: signer}, nil
	}
	if err := refuseUnsigned(c, path); err != nil { // trust.go
		return nil, err
	}
	set, err := loadSymbols(c)
	if err != nil {
		return nil, cli.Exit(err.Error(), 1)
	}
	return compileSource(c, in, set)
}

// compileSource compiles the DPDF in against the symbols of set (nil:
// none).
func compileSource(c *cli.Context, in *input, set *symbols.Set) (*loaded, error) {
	opts := dpdf.Options{Defines: c.StringSlice("D"), Includes: c.StringSlice("I"), CPP: c.String("cpp")}
	// read a statement at a time: memory holds the module being built,
	// not the file's syntax tree (docs/design.md, "Parsing")
	var r *dpdf.Reader
	var err error
	if in.regular {
		r, err = dpdf.OpenFileSource(in.path, in.data, opts)
	} else {
		r, err = dpdf.OpenSource(in.name, in.data, opts)
	}
	if err != nil {
		return nil, reportErrors(c, err)
	}
	// a file with syntax errors still compiles, to report every error at once
	var copts rpn.CompileOptions
	if set != nil {
		copts.Symbols = resolver{probe.Symbols{Set: set}}
	}
	prog, err := compiler.CompileReader(r, copts)
	if err != nil {
		return nil, reportErrors(c, err)
	}
	m := prog.Module()
	var deps []string
	for _, d := range r.Deps {
		if in.path != "" || d != in.name { // standard input and -e are no file make could check
			deps = append(deps, d)
		}
	}
	if set != nil {
		deps = append(deps, set.Files()...)
	}
	return &loaded{mod: m, prog: prog, builds: []*rpn.Module{m}, deps: deps}, nil
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
		Usage:     "parse and verify DPDF files (or PPDF packs); print every error as file:line:col: message, and what a module writes in its target",
		ArgsUsage: "FILE.dpdf|FILE.ppdf|-...",
		Flags: append(append(sourceFlags(), trustFlags()...),
			&cli.StringFlag{Name: "target", Aliases: []string{"t"}, Usage: "also check what the `TARGET` would refuse before anything goes in: kernel (this machine's kernel, through eBPF): what eBPF cannot do, and a probe past the kernel verifier's limits, each with its DPDF line"}),
		Action: func(c *cli.Context) error {
			var ins []func() (*input, error)
			if in := oneLinerOf(c); in != nil {
				ins = append(ins, func() (*input, error) { return in, nil })
			}
			for _, path := range c.Args().Slice() {
				ins = append(ins, func() (*input, error) { return readInput(c, path) })
			}
			if len(ins) == 0 {
				return cli.Exit("check: name a DPDF file (- for standard input), or give the DPDF with -e TEXT", 2)
			}
			if t := c.String("target"); t != "" && t != "kernel" {
				return cli.Exit(fmt.Sprintf("check: --target %s: only the kernel target's refusals can be told ahead (--target kernel)", t), 2)
			}
			failed := false
			for _, read := range ins {
				in, err := read()
				var l *loaded
				if err == nil {
					l, err = load(c, in)
				}
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
				fmt.Fprintf(c.App.Writer, "%s: ok: module %q%s, %s, %d bytes of bytecode", in.name, l.mod.Name, hostFile(l.mod), plural(len(l.mod.Probes), "probe"), len(l.mod.Code))
				if unresolved > 0 {
					fmt.Fprintf(c.App.Writer, ", %s left for insert-time resolution", plural(unresolved, "symbolic value"))
				}
				if len(l.builds) > 1 {
					fmt.Fprintf(c.App.Writer, ", %d builds (%s)", len(l.builds), ppdf.BuildList(l.builds))
				}
				fmt.Fprintln(c.App.Writer)
				if l.signer != "" {
					fmt.Fprintf(c.App.Writer, "%s: signed by %s\n", in.name, dpdf.Escape(l.signer))
				}
				printWrites(c.App.Writer, in.name, l.mod)
				printAutoStack(c.App.Writer, in.name, l.mod)
				if c.String("target") == "kernel" && !checkKernel(c, in.name, l) {
					failed = true
				}
			}
			if failed {
				return cli.Exit("", 1)
			}
			return nil
		},
	}
}

// checkKernel prints what the kernel target would refuse in l before
// anything is loaded (bpf.CheckKernel), and reports whether it would take
// every probe.
func checkKernel(c *cli.Context, path string, l *loaded) bool {
	esc := func(s string) string {
		if l.ppdf {
			return dpdf.Escape(s)
		}
		return s
	}
	if l.mod.ModType != rpn.ModKernel {
		fmt.Fprintf(c.App.ErrWriter, "%s: kernel target: modtype %s: the kernel target probes kernel code (modtype = kernel)\n", path, l.mod.ModType)
		return false
	}
	ok := true
	var largest *bpf.KernelCheck
	largestAt := 0
	checks := bpf.CheckKernel(l.prog, bpf.ReadFormat)
	for pi := range checks {
		k := &checks[pi]
		if k.Fields != "" {
			fmt.Fprintf(c.App.Writer, "%s: kernel target: probe %d: push field's names not checked: %s\n", path, pi, esc(k.Fields))
		}
		if k.Err != nil {
			fmt.Fprintf(c.App.ErrWriter, "%s: kernel target: %s\n", path, esc(k.Err.Error()))
			ok = false
			continue
		}
		if largest == nil || k.Compiled.Estimate() > largest.Compiled.Estimate() {
			largest, largestAt = k, pi
		}
	}
	if ok && largest != nil {
		fmt.Fprintf(c.App.Writer, "%s: kernel target: every probe within the kernel verifier's limits (the largest, probe %d: %d eBPF instructions, at most %d processed of %d)\n",
			path, largestAt, largest.Compiled.Instructions(), largest.Compiled.Estimate(), bpf.MaxProcessed)
	}
	return ok
}

func buildCommand() *cli.Command {
	return &cli.Command{
		Name:      "build",
		Usage:     "pre-build a DPDF into a binary PPDF pack (byte-identical output for identical input), for one build or several, signed or not",
		ArgsUsage: "FILE.dpdf|-",
		Description: `The pack is bound to the build of the probed module: the build ID of the --symbols files
(an ELF file's, or a copy of the kernel's /sys/kernel/notes), checked where it is inserted.
Each --for is one build of the module (a kernel, a library, a kernel module): its symbol files,
comma-separated; the pack holds the module compiled for each, and insert takes the build the
target runs. --sign KEY signs the pack with an SSH key (SSHSIG, namespace gprobes) into
OUT.sig, which ssh-keygen -Y verify -n gprobes checks and insert --allowed-signers verifies.
docs/ppdf.md, "Packs for customers".`,
		Flags: append(sourceFlags(),
			&cli.StringFlag{Name: "o", Usage: "write the PPDF to `OUT` (default: FILE.ppdf)"},
			&cli.BoolFlag{Name: "MD", Usage: "also write a make dependency file OUT.d, as gcc -MD does"},
			&cli.StringFlag{Name: "MF", Usage: "write the dependency file to `FILE` (implies -MD)"},
			&cli.GenericFlag{Name: "for", Value: &buildList{}, Usage: "one build the pack is for: its symbol `FILE[,FILE...]` (repeatable, one a build; --symbols files are added to each)"},
			&cli.StringFlag{Name: "sign", Usage: "sign the pack with the SSH private `KEY` (or a public key whose private key ssh-agent holds; an encrypted key's passphrase in $GPROBES_SIGN_PASSPHRASE) into OUT.sig"},
		),
		Action: func(c *cli.Context) error {
			in, rest, err := inputArg(c, "build")
			if err != nil {
				return err
			}
			if len(rest) > 0 {
				return cli.Exit("build: name one DPDF file", 2)
			}
			out := c.String("o")
			if out == "" {
				if in.path == "" {
					return cli.Exit(fmt.Sprintf("build: the DPDF of %s has no file name to name the PPDF after: give -o OUT", in.name), 2)
				}
				out = strings.TrimSuffix(in.path, filepath.Ext(in.path)) + ".ppdf"
			}
			builds, deps, err := buildModules(c, in)
			if err != nil {
				return err
			}
			data, err := ppdf.EncodePack(builds)
			if err != nil {
				return cli.Exit(fmt.Sprintf("build %s: %v", out, err), 1)
			}
			var sig []byte
			if key := c.String("sign"); key != "" {
				if sig, err = packsign.Sign(data, key); err != nil {
					return cli.Exit("build: "+err.Error(), 1)
				}
				deps = append(deps, key)
			}
			// errors name the file
			if err := ppdf.WriteAtomic(out, data); err != nil {
				return cli.Exit("build: "+err.Error(), 1)
			}
			if sig != nil {
				if err := ppdf.WriteAtomic(out+packsign.SigSuffix, sig); err != nil {
					return cli.Exit("build: "+err.Error(), 1)
				}
			}
			if c.Bool("MD") || c.String("MF") != "" {
				depfile := c.String("MF")
				if depfile == "" {
					depfile = strings.TrimSuffix(out, filepath.Ext(out)) + ".d"
				}
				if err := writeDepfile(depfile, out, deps); err != nil {
					return cli.Exit(err.Error(), 1)
				}
			}
			m := builds[0]
			fmt.Fprintf(c.App.Writer, "%s: module %q, %s, %d bytes of bytecode", out, m.Name, plural(len(m.Probes), "probe"), len(m.Code))
			if len(builds) > 1 {
				fmt.Fprintf(c.App.Writer, ", %d builds (%s)", len(builds), ppdf.BuildList(builds))
			} else if len(m.BuildID) > 0 {
				fmt.Fprintf(c.App.Writer, ", build %s", ppdf.BuildIDString(m.BuildID))
			}
			if sig != nil {
				fmt.Fprintf(c.App.Writer, ", signed into %s", out+packsign.SigSuffix)
			}
			fmt.Fprintln(c.App.Writer)
			printWrites(c.App.Writer, out, m)
			return nil
		},
	}
}

// buildModules compiles the DPDF for each --for build, or once against
// --symbols, and returns the builds and every file read.
func buildModules(c *cli.Context, in *input) ([]*rpn.Module, []string, error) {
	if isPPDF(in.data) {
		return nil, nil, cli.Exit(fmt.Sprintf("build: %s is already a PPDF", in.name), 1)
	}
	var fors []string
	if b, ok := c.Generic("for").(*buildList); ok {
		fors = *b
	}
	if len(fors) == 0 {
		l, err := load(c, in)
		if err != nil {
			return nil, nil, err
		}
		return []*rpn.Module{l.mod}, l.deps, nil
	}
	var builds []*rpn.Module
	var deps []string
	seen := map[string]string{}
	for _, f := range fors {
		set := symbols.NewSet()
		for _, p := range append(strings.Split(f, ","), c.StringSlice("symbols")...) {
			if p == "" {
				continue
			}
			t, err := symbols.Open(p)
			if err != nil {
				return nil, nil, cli.Exit(fmt.Sprintf("build: --for %s: %v", f, err), 1)
			}
			set.Add(t)
		}
		id := set.BuildID()
		if len(fors) > 1 && len(id) == 0 {
			return nil, nil, cli.Exit(fmt.Sprintf("build: --for %s: no build ID in these files: the builds of a pack are told apart by build ID (give the ELF file, or a copy of the kernel's /sys/kernel/notes)", f), 1)
		}
		if other, ok := seen[string(id)]; ok {
			return nil, nil, cli.Exit(fmt.Sprintf("build: --for %s and --for %s are the same build (%s): give each build once", other, f, ppdf.BuildIDString(id)), 1)
		}
		seen[string(id)] = f
		l, err := compileSource(c, in, set)
		if err != nil {
			return nil, nil, err
		}
		builds = append(builds, l.mod)
		deps = append(deps, l.deps...)
	}
	return builds, deps, nil
}

// buildList is --for: each value one build, its files comma-separated
// (a StringSliceFlag would split them into builds of their own).
type buildList []string

func (b *buildList) Set(v string) error { *b = append(*b, v); return nil }
func (b *buildList) String() string     { return strings.Join(*b, " ") }

// printWrites says what a module writes in its target, when it writes:
// one line naming each kind of write and where it is first. A module that
// only reads gets no line.
func printWrites(w io.Writer, name string, m *rpn.Module) {
	if s := rpn.WritesSummary(rpn.Writes(m)); s != "" {
		fmt.Fprintf(w, "%s: module %q writes its target: %s\n", name, dpdf.Escape(m.Name), dpdf.Escape(s))
	}
}

// printAutoStack names the probes with autostacktrace = yes, whose
// exception records carry the stack at the hit: one line, none when no
// probe has it.
func printAutoStack(w io.Writer, name string, m *rpn.Module) {
	var probes []string
	for _, p := range m.Probes {
		if p.AutoStack {
			probes = append(probes, fmt.Sprintf("%s (minor %d)", p.Loc.Text, p.Minor))
		}
	}
	if len(probes) == 0 {
		return
	}
	stack := "user"
	if m.ModType == rpn.ModKernel {
		stack = "kernel"
	}
	fmt.Fprintf(w, "%s: autostacktrace: the exception records of %s carry the %s stack at the hit (%d frames at most)\n",
		name, dpdf.Escape(strings.Join(probes, ", ")), stack, rpn.DefaultStackFrames)
}

// hostFile is what a user module's name stands for on this host, as
// check shows it: " (/usr/lib/x86_64-linux-gnu/libc.so.6 on this host,
// from ld.so.cache)" for "libc", " (not on this host: ...)" when nothing
// is found; "" for a path and a kernel module (a process maps what it
// maps; the kernel names its own).
func hostFile(m *rpn.Module) string {
	if m.ModType != rpn.ModUser || strings.Contains(m.Name, "/") {
		return ""
	}
	path, how, err := symbols.FindModuleFile(m.Name, symbols.LDCachePath)
	if err != nil {
		return " (not on this host: " + err.Error() + ")"
	}
	return fmt.Sprintf(" (%s on this host, from %s)", path, how)
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
	if err := outfile.WriteFile(path, b.Bytes(), 0o644); err != nil {
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
		Usage:     "list the bytecode of a DPDF or PPDF with the DPDF line of each instruction, and what it writes in its target",
		ArgsUsage: "FILE.dpdf|FILE.ppdf|-",
		Flags:     append(sourceFlags(), trustFlags()...),
		Action: func(c *cli.Context) error {
			in, rest, err := inputArg(c, "disasm")
			if err != nil {
				return err
			}
			if len(rest) > 0 {
				return cli.Exit("disasm: name one DPDF or PPDF file", 2)
			}
			l, err := load(c, in)
			if err != nil {
				return err
			}
			if s := rpn.WritesSummary(rpn.Writes(l.mod)); s != "" {
				fmt.Fprintf(c.App.Writer, "; writes its target: %s\n", dpdf.Escape(s))
			}
			if len(l.builds) > 1 {
				fmt.Fprintf(c.App.Writer, "; a pack of %d builds: %s\n", len(l.builds), ppdf.BuildList(l.builds))
			}
			for i, b := range l.builds {
				if i > 0 {
					fmt.Fprintln(c.App.Writer)
				}
				rpn.Disasm(c.App.Writer, b)
			}
			return nil
		},
	}
}
