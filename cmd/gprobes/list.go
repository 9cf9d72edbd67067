package main

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/gprobes/gprobes/symbols"
	"github.com/gprobes/gprobes/usdt"
)

func listCommand() *cli.Command {
	return &cli.Command{
		Name:      "list",
		Usage:     "list where probes can go: functions of a file, its source lines, kernel functions, tracepoints and their fields, static probes (USDT)",
		ArgsUsage: "PATTERN",
		Description: `PATTERN is one of:
  FILE:GLOB             functions of an ELF file (an offset or retprobe line names them);
                        FILE is a path, a file's base name in PATH, or a library's short
                        name (libc, libssl), found as the dynamic loader finds it
  FILE:SOURCE:GLOB      source lines of SOURCE (a file name or its last components, as an
                        offset = SOURCE:LINE line has it) that can take a probe (DWARF)
  kernel:GLOB           functions of the running kernel and its loaded modules (kallsyms),
                        with whether a kprobe and fentry can take each
  tracepoint:SUBSYS:EVENT   tracepoints (tracefs); both parts are globs
  usdt:FILE:GLOB        static probes (sys/sdt.h: .note.stapsdt) of an ELF file, GLOB over
                        PROVIDER:NAME; FILE as for FILE:GLOB (a path, a base name in PATH,
                        a library's short name); not with --target
GLOB is a shell pattern: *, ?, [...]. Output is sorted, one probe point a line, spelled as
the DPDF's name and offset/tracepoint lines take it.
-v adds: for a function its address, size and, with DWARF, its parameters; for a source line
its address and function; for a tracepoint its fields with their C types (as push field,NAME
reads them); for a static probe its sites, its semaphore's address (or -), and each site's
arguments as its note describes them (as push arg,N reads them).`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "more about each probe point: addresses, parameters, fields"},
			&cli.StringFlag{Name: "target", Usage: "pid:N: FILE is what process N maps (a short name, a base name, a path, or a glob of base names: '*:malloc' looks in every file it maps); gdb:HOST:PORT or xen:DOMID: kernel:GLOB lists the guest kernel's functions from --symbols"},
			&cli.StringSliceFlag{Name: "symbols", Usage: "kernel:GLOB lists the functions of these symbol `FILE`s (a guest's System.map, vmlinux, a copy of kallsyms) instead of this machine's kernel"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return errors.New("list: give one PATTERN: FILE:GLOB, FILE:SOURCE:GLOB, kernel:GLOB, tracepoint:SUBSYS:EVENT or usdt:FILE:GLOB (gprobes list --help)")
			}
			pat := c.Args().First()
			v := c.Bool("verbose")
			w := c.App.Writer
			kind, rest, ok := strings.Cut(pat, ":")
			if !ok {
				return fmt.Errorf("list %s: want FILE:GLOB, FILE:SOURCE:GLOB, kernel:GLOB, tracepoint:SUBSYS:EVENT or usdt:FILE:GLOB", pat)
			}
			t := c.String("target")
			guest := strings.HasPrefix(t, "gdb:") || strings.HasPrefix(t, "xen:")
			switch kind {
			case "kernel", "vmlinux":
				if syms := c.StringSlice("symbols"); len(syms) > 0 {
					return listKernelFiles(w, rest, syms, v)
				}
				if guest {
					return fmt.Errorf("list --target %s: a guest kernel's functions come from its symbols: give --symbols System.map (or vmlinux)", t)
				}
				return listKernel(w, rest, v)
			case "tracepoint":
				return listTracepoints(w, rest, v)
			case "usdt":
				if t != "" {
					return fmt.Errorf("list usdt:... --target %s: static probes are listed from the file (give its path or short name), not a process or a guest", t)
				}
				fname, glob, ok := strings.Cut(rest, ":")
				if !ok {
					glob = "*"
				}
				file, how, err := symbols.FindModuleFile(fname, symbols.LDCachePath)
				if err != nil {
					return fmt.Errorf("list %s: %v", pat, err)
				}
				if how != "path" && filepath.Base(file) != fname {
					fmt.Fprintf(c.App.ErrWriter, "%s is %s (%s)\n", fname, file, how)
				}
				return listUSDT(w, fname, file, glob, v)
			}
			if t != "" && !guest {
				pid, err := strconv.Atoi(strings.TrimPrefix(t, "pid:"))
				if !strings.HasPrefix(t, "pid:") || err != nil || pid <= 0 {
					return fmt.Errorf("list --target %s: list looks into a process, pid:N", t)
				}
				return listProcess(w, pid, kind, rest, v)
			}
			file, how, err := symbols.FindModuleFile(kind, symbols.LDCachePath)
			if err != nil {
				return fmt.Errorf("list %s: %v", pat, err)
			}
			if how != "path" && filepath.Base(file) != kind {
				fmt.Fprintf(c.App.ErrWriter, "%s is %s (%s)\n", kind, file, how)
			}
			if src, lines, ok := strings.Cut(rest, ":"); ok {
				return listLines(w, kind, file, src, lines, v)
			}
			return listFunctions(w, kind, file, rest, v)
		},
	}
}

// listUSDT lists the static probes of an ELF file (its .note.stapsdt)
// whose PROVIDER:NAME matches glob, each once, as usdt:NAME:PROVIDER:NAME
// (name as given); verbose adds, per probe, its sites, its semaphore and
// each site's arguments.
func listUSDT(w io.Writer, name, file, glob string, verbose bool) error {
	if err := checkGlob(glob); err != nil {
		return err
	}
	_, all, err := usdt.Sites(file, "", "")
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	var names []string
	for _, pn := range all {
		if !seen[pn] && globMatch(glob, pn) {
			seen[pn] = true
			names = append(names, pn)
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("no static probe of %s matches %s (it has %d)", file, glob, len(seen))
	}
	slices.Sort(names)
	for _, pn := range names {
		fmt.Fprintf(w, "usdt:%s:%s\n", name, pn)
		if !verbose {
			continue
		}
		prov, pname, _ := strings.Cut(pn, ":")
		sites, _, err := usdt.Sites(file, prov, pname)
		if err != nil {
			return err
		}
		sema := "-"
		if len(sites) > 0 && sites[0].Sema != 0 {
			sema = fmt.Sprintf("%#x", sites[0].Sema)
		}
		plural := "s"
		if len(sites) == 1 {
			plural = ""
		}
		fmt.Fprintf(w, "    %d site%s, semaphore %s\n", len(sites), plural, sema)
		for _, s := range sites {
			fmt.Fprintf(w, "    %#x  %s\n", s.PC, s.ArgText)
		}
	}
	return nil
}

// checkGlob reports a malformed pattern.
func checkGlob(glob string) error {
	if _, err := path.Match(glob, ""); err != nil {
		return fmt.Errorf("pattern %q: %v", glob, err)
	}
	return nil
}

func globMatch(glob, s string) bool {
	ok, _ := path.Match(glob, s)
	return ok
}

// listFunctions lists the functions of an ELF file whose names match
// glob, as name:FUNCTION (the module's name as given, so the line is a
// DPDF's name and offset).
func listFunctions(w io.Writer, name, file, glob string, verbose bool) error {
	if err := checkGlob(glob); err != nil {
		return err
	}
	t, err := symbols.Open(file)
	if err != nil {
		return err
	}
	var params map[string]string
	if verbose {
		params, err = dwarfParams(file)
		if err != nil && !errors.Is(err, symbols.ErrNoDWARF) {
			return err
		}
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	n := 0
	for _, f := range t.Functions() {
		if !globMatch(glob, f.Name) {
			continue
		}
		n++
		if !verbose {
			fmt.Fprintf(w, "%s:%s\n", name, f.Name)
			continue
		}
		p, ok := params[f.Name]
		switch {
		case params == nil:
			p = "(no DWARF)"
		case !ok:
			p = "(not in DWARF)"
		}
		dups := ""
		if f.Dups > 0 {
			dups = fmt.Sprintf("  (and %d more addresses: name one by address)", f.Dups)
		}
		fmt.Fprintf(tw, "%s:%s\t%#x\t%d\t%s%s\n", name, f.Name, f.Addr, f.Size, p, dups)
	}
	tw.Flush()
	if n == 0 {
		return fmt.Errorf("list %s:%s: no function of %s matches", name, glob, file)
	}
	return nil
}

// dwarfParams are the parameters of the file's functions from DWARF, by
// function name: "(int fd, const char *buf, size_t n)".
func dwarfParams(file string) (map[string]string, error) {
	ef, err := elf.Open(file)
	if err != nil {
		return nil, err
	}
	defer ef.Close()
	d, err := ef.DWARF()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, symbols.ErrNoDWARF)
	}
	out := map[string]string{}
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil {
			return out, fmt.Errorf("%s: DWARF: %v", file, err)
		}
		if e == nil {
			return out, nil
		}
		if e.Tag != dwarf.TagSubprogram {
			continue
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		var ps []string
		variadic := false
		if e.Children {
			for {
				c, err := r.Next()
				if err != nil || c == nil || c.Tag == 0 {
					break
				}
				switch c.Tag {
				case dwarf.TagFormalParameter:
					pn, _ := c.Val(dwarf.AttrName).(string)
					ty := "?"
					if off, ok := c.Val(dwarf.AttrType).(dwarf.Offset); ok {
						if t, err := d.Type(off); err == nil {
							ty = cTypeName(t)
						}
					}
					if strings.HasSuffix(ty, "*") {
						ps = append(ps, ty+pn)
					} else {
						ps = append(ps, strings.TrimSpace(ty+" "+pn))
					}
				case dwarf.TagUnspecifiedParameters:
					variadic = true
				}
				if c.Children {
					r.SkipChildren()
				}
			}
		}
		if name == "" {
			continue
		}
		if variadic {
			ps = append(ps, "...")
		}
		if len(ps) == 0 {
			if proto, _ := e.Val(dwarf.AttrPrototyped).(bool); !proto {
				ps = []string{"unknown"} // K&R, or assembly
			} else {
				ps = []string{"void"}
			}
		}
		if _, seen := out[name]; !seen || e.Val(dwarf.AttrDeclaration) == nil {
			out[name] = "(" + strings.Join(ps, ", ") + ")"
		}
	}
}

// cTypeName spells a DWARF type as C does: "const char *", "struct stat *".
func cTypeName(t dwarf.Type) string {
	switch t := t.(type) {
	case *dwarf.PtrType:
		if _, ok := t.Type.(*dwarf.FuncType); ok {
			return "function pointer"
		}
		s := cTypeName(t.Type)
		if strings.HasSuffix(s, "*") {
			return s + "*"
		}
		return s + " *"
	case *dwarf.QualType:
		return t.Qual + " " + cTypeName(t.Type)
	case *dwarf.TypedefType:
		return t.Name
	case *dwarf.StructType:
		if t.StructName == "" {
			return t.Kind + " {...}"
		}
		return t.Kind + " " + t.StructName
	case *dwarf.EnumType:
		return "enum " + t.EnumName
	case *dwarf.VoidType:
		return "void"
	case nil:
		return "void"
	}
	return t.String()
}

// listLines lists the lines of source files matching src that can take
// a probe: those an offset = SOURCE:LINE line resolves to exactly (is_stmt
// code in one function), whose number matches glob.
func listLines(w io.Writer, name, file, src, glob string, verbose bool) error {
	if err := checkGlob(glob); err != nil {
		return err
	}
	ef, err := elf.Open(file)
	if err != nil {
		return err
	}
	defer ef.Close()
	d, err := ef.DWARF()
	if err != nil {
		return fmt.Errorf("list %s:%s:%s: %s has no DWARF line table (%v)", name, src, glob, file, err)
	}
	type fl struct {
		file string
		line int
	}
	seen := map[fl]bool{}
	var cands []fl
	r := d.Reader()
	for {
		cu, err := r.Next()
		if err != nil {
			return fmt.Errorf("%s: DWARF: %v", file, err)
		}
		if cu == nil {
			break
		}
		if cu.Tag != dwarf.TagCompileUnit {
			r.SkipChildren()
			continue
		}
		lr, err := d.LineReader(cu)
		r.SkipChildren()
		if err != nil || lr == nil {
			continue
		}
		var le dwarf.LineEntry
		for lr.Next(&le) == nil {
			if le.EndSequence || !le.IsStmt || le.File == nil {
				continue
			}
			f := path.Clean(le.File.Name)
			if f != path.Clean(src) && !strings.HasSuffix(f, "/"+path.Clean(src)) {
				continue
			}
			k := fl{f, le.Line}
			if !seen[k] && globMatch(glob, fmt.Sprint(le.Line)) {
				seen[k] = true
				cands = append(cands, k)
			}
		}
	}
	if len(cands) == 0 {
		return fmt.Errorf("list %s:%s:%s: no line of %s in %s's line table matches", name, src, glob, src, file)
	}
	t, err := symbols.Open(file)
	if err != nil {
		return err
	}
	set := symbols.NewSet(t)
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].file != cands[j].file {
			return cands[i].file < cands[j].file
		}
		return cands[i].line < cands[j].line
	})
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	files := map[string]bool{}
	for _, c := range cands {
		files[c.file] = true
	}
	n, refused := 0, 0
	for _, c := range cands {
		// the source as the user wrote it, or whole when it stands for
		// several files
		spell := src
		if len(files) > 1 {
			spell = c.file
		}
		addr, actual, err := set.LineAddr(spell, c.line)
		if err != nil || actual != c.line {
			refused++
			continue
		}
		n++
		if !verbose {
			fmt.Fprintf(w, "%s:%s:%d\n", name, spell, c.line)
			continue
		}
		fn := "?"
		if s, off, ok := set.Nearest(addr); ok {
			fn = fmt.Sprintf("%s+%#x", s.Name, off)
		}
		fmt.Fprintf(tw, "%s:%s:%d\t%#x\t%s\n", name, spell, c.line, addr, fn)
	}
	tw.Flush()
	if n == 0 {
		return fmt.Errorf("list %s:%s:%s: none of the %d lines with code takes a probe (each is in several functions, inlined or duplicated)", name, src, glob, refused)
	}
	return nil
}

// listKernel lists the running kernel's functions (kallsyms) whose
// names match glob, and whether a kprobe and fentry can take each.
func listKernel(w io.Writer, glob string, verbose bool) error {
	if err := checkGlob(glob); err != nil {
		return err
	}
	t, err := symbols.Open("/proc/kallsyms")
	if err != nil {
		return fmt.Errorf("list kernel:%s: %v", glob, err)
	}
	ab := kernelAbilities()
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "FUNCTION\tMODULE\tKPROBE\tFENTRY")
	n := 0
	for _, f := range t.Functions() {
		if !globMatch(glob, f.Name) {
			continue
		}
		n++
		mod := f.Module
		if mod == "" {
			mod = "-"
		}
		kp, fe := ab.kprobe(f.Name), ab.fentry(f.Name, f.Module)
		if !verbose {
			kp, _, _ = strings.Cut(kp, ":")
			fe, _, _ = strings.Cut(fe, ":")
		}
		fmt.Fprintf(tw, "kernel:%s\t%s\t%s\t%s\n", f.Name, mod, kp, fe)
	}
	tw.Flush()
	if n == 0 {
		return fmt.Errorf("list kernel:%s: no kernel function matches", glob)
	}
	if !verbose {
		fmt.Fprintln(w, "(-v says why not)")
	}
	return nil
}

// listTracepoints lists tracefs's events matching SUBSYS:EVENT, and with
// verbose their fields.
func listTracepoints(w io.Writer, pat string, verbose bool) error {
	sub, ev, ok := strings.Cut(pat, ":")
	if !ok {
		ev = "*"
	}
	if err := checkGlob(sub); err != nil {
		return err
	}
	if err := checkGlob(ev); err != nil {
		return err
	}
	dir, err := tracefsEvents()
	if err != nil {
		return fmt.Errorf("list tracepoint:%s: %v", pat, err)
	}
	subs, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list tracepoint:%s: %v", pat, err)
	}
	n := 0
	for _, s := range subs {
		if !s.IsDir() || !globMatch(sub, s.Name()) {
			continue
		}
		evs, err := os.ReadDir(filepath.Join(dir, s.Name()))
		if err != nil {
			continue
		}
		for _, e := range evs {
			if !e.IsDir() || !globMatch(ev, e.Name()) {
				continue
			}
			if _, err := os.Stat(filepath.Join(dir, s.Name(), e.Name(), "format")); err != nil {
				continue
			}
			n++
			fmt.Fprintf(w, "tracepoint:%s:%s\n", s.Name(), e.Name())
			if verbose {
				fields, err := tracepointFields(s.Name(), e.Name())
				if err != nil {
					fmt.Fprintf(w, "    (%v)\n", err)
				}
				for _, f := range fields {
					fmt.Fprintf(w, "    %s;\n", f)
				}
			}
		}
	}
	if n == 0 {
		return fmt.Errorf("list tracepoint:%s: no tracepoint matches in %s", pat, dir)
	}
	return nil
}

// cDecl declares name of type typ as C does: "char comm[16]" for
// "char[16]".
func cDecl(typ, name string) string {
	if i := strings.IndexByte(typ, '['); i >= 0 {
		return strings.TrimSpace(typ[:i]) + " " + name + typ[i:]
	}
	return typ + " " + name
}

// listProcess lists the probe points of the files process pid maps that
// name (a module's name, as insert matches it, or a glob of base names)
// stands for.
func listProcess(w io.Writer, pid int, name, rest string, verbose bool) error {
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return fmt.Errorf("list --target pid:%d: %v", pid, err)
	}
	var exact, short, globbed []string
	seen := map[string]bool{}
	glob := strings.ContainsAny(name, "*?[")
	for _, l := range strings.Split(string(maps), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || !strings.HasPrefix(f[5], "/") || seen[f[5]] {
			continue
		}
		p := strings.Join(f[5:], " ")
		if strings.HasSuffix(p, " (deleted)") {
			continue // replaced since: its functions are not the file's
		}
		seen[p] = true
		base := filepath.Base(p)
		switch {
		case glob:
			if globMatch(name, base) {
				globbed = append(globbed, p)
			}
		case strings.Contains(name, "/"):
			if abs, err := filepath.Abs(name); err == nil && (abs == p || evalEq(abs, p)) {
				exact = append(exact, p)
			}
		default:
			if ok, ex := symbols.MatchShortName(base, name); ex {
				exact = append(exact, p)
			} else if ok {
				short = append(short, p)
			}
		}
	}
	files := exact
	if len(files) == 0 {
		files = short
	}
	if glob {
		files = globbed
	}
	if len(files) == 0 {
		return fmt.Errorf("list pid:%d %s: process %d maps no file %s stands for", pid, name, pid, name)
	}
	if !glob && len(files) > 1 {
		return fmt.Errorf("list pid:%d %s: %s stands for more than one mapped file (%s): name the one meant", pid, name, name, strings.Join(files, ", "))
	}
	n := 0
	for _, file := range files {
		spell := file
		if !glob {
			spell = name
		}
		var err error
		if src, lines, ok := strings.Cut(rest, ":"); ok {
			err = listLines(w, spell, file, src, lines, verbose)
		} else {
			err = listFunctions(w, spell, file, rest, verbose)
		}
		if err == nil {
			n++
		} else if !glob {
			return err
		}
	}
	if n == 0 {
		return fmt.Errorf("list pid:%d %s:%s: nothing matches in %s", pid, name, rest, strings.Join(files, ", "))
	}
	return nil
}

// evalEq reports whether two paths name one file once links are followed.
func evalEq(a, b string) bool {
	ra, err1 := filepath.EvalSymlinks(a)
	rb, err2 := filepath.EvalSymlinks(b)
	return err1 == nil && err2 == nil && ra == rb
}

// listKernelFiles lists the functions of a kernel's symbol files (a
// guest's): breakpoints take any of them, so there is nothing to say of
// kprobes or fentry.
func listKernelFiles(w io.Writer, glob string, files []string, verbose bool) error {
	if err := checkGlob(glob); err != nil {
		return err
	}
	type key struct{ name, mod string }
	seen := map[key]bool{}
	var fns []symbols.Function
	for _, f := range files {
		t, err := symbols.Open(f)
		if err != nil {
			return fmt.Errorf("list --symbols %s: %v", f, err)
		}
		for _, fn := range t.Functions() {
			k := key{fn.Name, fn.Module}
			if globMatch(glob, fn.Name) && !seen[k] {
				seen[k] = true
				fns = append(fns, fn)
			}
		}
	}
	if len(fns) == 0 {
		return fmt.Errorf("list kernel:%s: no function of %s matches", glob, strings.Join(files, ", "))
	}
	sort.Slice(fns, func(i, j int) bool {
		if fns[i].Name != fns[j].Name {
			return fns[i].Name < fns[j].Name
		}
		return fns[i].Module < fns[j].Module
	})
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for _, fn := range fns {
		mod := ""
		if fn.Module != "" {
			mod = "\t[" + fn.Module + "]"
		}
		if verbose {
			fmt.Fprintf(tw, "kernel:%s\t%#x\t%d%s\n", fn.Name, fn.Addr, fn.Size, mod)
		} else {
			fmt.Fprintf(tw, "kernel:%s%s\n", fn.Name, mod)
		}
	}
	return tw.Flush()
}
