package probe

import (
	"errors"
	"fmt"

	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/symbols"
)

// Where a probe goes and what a program's push d, holds are data in the
// module (rpn.Location, rpn.Reloc): a sum of symbols, sizeof and
// offsetof terms plus a constant, a source file and line, or an address,
// with the value computed at build time when symbols were given then.
// Resolver turns them into values where the module runs, once for every
// Prober:
//
//   - from what the target knows now (Env, Lines): a PIE's or a guest
//     kernel's symbols at their link-time addresses moved by the load
//     bias or KASLR slide, or the running kernel's /proc/kallsyms, which
//     shows the addresses it runs at;
//   - failing that, from the value computed at build time, when there
//     is one: the build it was computed against is the one running (the
//     build IDs were checked, SelectBuild), so it is right once moved to
//     where the module runs — symbol terms by the bias or slide, type
//     layouts not at all. A value that needs moving when the slide is
//     not known is refused, saying both why the target could not answer
//     and why the slide is unknown.
//
// The fallback is the format's promise (docs/ppdf.md, "Sum"): a PPDF built
// against the file with symbols keeps working where the file runs
// stripped, on every target.

// Resolver resolves a module's locations and relocations where it runs.
type Resolver struct {
	// Env answers a sum's terms: symbol addresses, sizeof, offsetof.
	// nil when there are no symbols there.
	Env rpn.SumEnv
	// Bias moves Env's symbol addresses and absolute locations to where
	// the module runs: a file's load bias or a guest kernel's KASLR slide
	// when Env answers at link-time addresses; 0 when Env answers at
	// run-time addresses already (the running kernel's kallsyms).
	Bias uint64
	// Lines is a source line's link-time address; nil when there is no
	// line table.
	Lines func(file string, line int) (uint64, error)
	// Slide moves a link-time address (a source line's, a value
	// computed at build time) to where the module runs; nil: Bias does.
	Slide func() (uint64, error)
}

// errNoSymbols is what a term gets where there are no symbols.
var errNoSymbols = errors.New("no symbols")

func (r Resolver) slide() (uint64, error) {
	if r.Slide == nil {
		return r.Bias, nil
	}
	return r.Slide()
}

// eval is a sum's value where the module runs: Env's answer, its symbol
// terms moved by Bias.
func (r Resolver) eval(s rpn.Sum) (uint64, error) {
	if r.Env == nil {
		return 0, errNoSymbols
	}
	v, err := s.Eval(r.Env)
	return v + s.BiasFactor()*r.Bias, err
}

// moved is a value computed at build time (link-time addresses) moved to
// where the module runs: by factor times the slide. why is why the target
// could not answer, for the error.
func (r Resolver) moved(v, factor uint64, why error) (uint64, error) {
	if factor == 0 {
		return v, nil
	}
	s, err := r.slide()
	if err != nil {
		return 0, fmt.Errorf("%v; the value from build time cannot be moved to where the module runs: %v", why, err)
	}
	return v + factor*s, nil
}

// Location is the address where the module runs of a probe's location.
// Errors name the location as written.
func (r Resolver) Location(d *rpn.Probe) (uint64, error) {
	loc := &d.Loc
	switch loc.Kind {
	case rpn.LocAbsolute:
		return loc.Addr + r.Bias, nil
	case rpn.LocLine:
		var err error = errNoSymbols
		if r.Lines != nil {
			var a uint64
			if a, err = r.Lines(loc.File, int(loc.Line)); err == nil {
				s, serr := r.slide()
				if serr != nil {
					return 0, fmt.Errorf("%s: %v", loc.Text, serr)
				}
				return a + s, nil
			}
		}
		if !loc.Resolved {
			if r.Lines == nil {
				return 0, fmt.Errorf("%s = %s: no symbols for the module", d.Kind, loc.Text)
			}
			return 0, fmt.Errorf("%s: %v", loc.Text, err)
		}
		a, merr := r.moved(loc.Addr, 1, err)
		if merr != nil {
			return 0, fmt.Errorf("%s: %v", loc.Text, merr)
		}
		return a, nil
	case rpn.LocTracepoint:
		return 0, fmt.Errorf("%s = %s: a tracepoint has no address", d.Kind, loc.Text)
	case rpn.LocUSDT:
		return 0, fmt.Errorf("%s = %s: a usdt probe's address is in its file's note (.note.stapsdt), not a location to resolve", d.Kind, loc.Text)
	}
	// a location is an address in the module: moved once, whatever its
	// sum's symbol factors
	var err error = errNoSymbols
	if r.Env != nil {
		var a uint64
		if a, err = loc.Sum.Eval(r.Env); err == nil {
			return a + r.Bias, nil
		}
	}
	if !loc.Resolved {
		if r.Env == nil {
			return 0, fmt.Errorf("%s = %s: no symbols for the module", d.Kind, loc.Text)
		}
		return 0, fmt.Errorf("%s = %s: %v", d.Kind, loc.Text, err)
	}
	a, err := r.moved(loc.Addr, 1, err)
	if err != nil {
		return 0, fmt.Errorf("%s = %s: %v", d.Kind, loc.Text, err)
	}
	return a, nil
}

// Relocate patches a module's relocations (push d, of symbols and types)
// for where it runs and loads it. A relocation nothing can answer refuses
// the probe whose program holds it, alone: refused gives the reason by
// the probe's index, its code left with 0 there (it never runs); one in
// no probe's program fails the whole module.
func (r Resolver) Relocate(m *rpn.Module) (prog *rpn.Program, refused map[int]string, err error) {
	if len(m.Relocs) > 0 {
		cp := *m
		cp.Code = append([]byte{}, m.Code...)
		for _, rl := range m.Relocs {
			v, err := r.eval(rl.Sum)
			if err != nil && rl.Resolved {
				v, err = r.moved(rl.Value, rl.Sum.BiasFactor(), err)
			}
			if err != nil {
				reason := fmt.Sprintf("push d,%s: %v", rl.Expr, err)
				i := m.ProbeAt(rl.Off)
				if i < 0 {
					return nil, nil, errors.New(reason)
				}
				if refused == nil {
					refused = map[int]string{}
				}
				if _, ok := refused[i]; !ok {
					refused[i] = reason
				}
				continue
			}
			putU64(cp.Code[rl.Off:], v)
		}
		m = &cp
	}
	prog, err = rpn.Load(m)
	return prog, refused, err
}

func putU64(b []byte, v uint64) {
	for i := 0; i < 8; i++ {
		b[i] = byte(v >> (8 * i))
	}
}

// Symbols answers rpn's questions about a module from a symbols.Set: a
// symbol's and a source line's address is the link-time one plus Bias
// (where the module is loaded), type layouts come from its debugging
// information. It is an rpn.SumEnv where a module runs, and with Bias 0
// an rpn.Resolver for the compiler.
type Symbols struct {
	*symbols.Set
	Bias uint64
}

// Symbol is a symbol's address plus Bias.
func (s Symbols) Symbol(name string) (uint64, error) {
	sym, err := s.Lookup(name)
	if err != nil {
		return 0, err
	}
	return sym.Addr + s.Bias, nil
}

// LineAddr is a source line's address plus Bias, and the line that has
// the code.
func (s Symbols) LineAddr(file string, line int) (uint64, int, error) {
	a, actual, err := s.Set.LineAddr(file, line)
	if err != nil {
		return 0, 0, err
	}
	return a + s.Bias, actual, nil
}

var (
	_ rpn.SumEnv   = Symbols{}
	_ rpn.Resolver = Symbols{}
)
