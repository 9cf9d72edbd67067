package ppdf

import (
	"fmt"

	"github.com/gprobes/gprobes/rpn"
)

// validate checks everything about m that the format promises a reader
// apart from the bytecode itself: header values within the limits of
// rpn/module.go, enums in range, strings within MaxString, offsets inside
// the code, file indices inside the file table, tables sorted, field names
// identifiers. Whether a probe's kind goes with its location, keywords and
// instructions is the verifier's to say (rpn.Load), as for the bytecode. It returns
// the name of the section at fault with the error. Encode and Decode share
// it, so a file Encode writes is one Decode reads.
func validate(m *rpn.Module) (section string, err error) {
	if err := validateHeader(&m.Header); err != nil {
		return "header", err
	}
	if len(m.BuildID) > MaxBuildID {
		return "build ID", limitf("build ID is %d bytes, at most %d", len(m.BuildID), MaxBuildID)
	}
	if len(m.Files) > MaxFiles {
		return "files", limitf("%d files, at most %d", len(m.Files), MaxFiles)
	}
	for i, f := range m.Files {
		if len(f) > MaxString {
			return "files", limitf("file %d: name is %d bytes, at most %d", i, len(f), MaxString)
		}
	}
	code := uint64(len(m.Code))
	for i := range m.Probes {
		p := &m.Probes[i]
		switch {
		case p.Kind > rpn.ProbeUSDT:
			err = invalidf("probe %d: kind %d is not offset (0), retprobe (1), tracepoint (2), watch (3) or usdt (4)", i, p.Kind)
		case p.WatchLen != 0 && p.WatchLen != 1 && p.WatchLen != 2 && p.WatchLen != 4 && p.WatchLen != 8:
			err = invalidf("probe %d: watch length %d is not 1, 2, 4 or 8 (or 0, off a watch probe)", i, p.WatchLen)
		case p.WatchMode != 0 && p.WatchMode != rpn.WatchWrite && p.WatchMode != rpn.WatchReadWrite:
			err = invalidf("probe %d: watch mode %d is not w (1) or rw (3) (or 0, off a watch probe)", i, p.WatchMode)
		case len(p.Loc.Text) > MaxString:
			err = limitf("probe %d: location text is %d bytes, at most %d", i, len(p.Loc.Text), MaxString)
		case p.Loc.Kind > rpn.LocUSDT:
			err = invalidf("probe %d: %s", i, locKindMsg(p.Loc.Kind))
		case p.Loc.Kind == rpn.LocTracepoint && !validTracepoint(p.Loc.Text):
			err = invalidf("probe %d: tracepoint location %q is not SUBSYS:EVENT (letters, digits and _)", i, p.Loc.Text)
		case p.Loc.Kind == rpn.LocUSDT && !validTracepoint(p.Loc.Text):
			err = invalidf("probe %d: usdt location %q is not PROVIDER:NAME (letters, digits and _)", i, p.Loc.Text)
		case p.MaxActive > rpn.MaxMaxActive:
			err = invalidf("probe %d: maxactive %d is outside 0..%d", i, p.MaxActive, rpn.MaxMaxActive)
		case p.Loc.Kind != rpn.LocExpr && (len(p.Loc.Sum.Terms) > 0 || p.Loc.Sum.Addend != 0):
			err = invalidf("probe %d: location kind %s with a sum: only a symbolic location has one", i, p.Loc.Kind)
		case p.Loc.Kind != rpn.LocLine && (p.Loc.File != "" || p.Loc.Line != 0):
			err = invalidf("probe %d: location kind %s with a file or line: only a line location has them", i, p.Loc.Kind)
		case p.Loc.Kind == rpn.LocLine && p.Loc.Line == 0:
			err = invalidf("probe %d: line location %s:0: lines count from 1", i, p.Loc.File)
		case len(p.Loc.File) > MaxString:
			err = limitf("probe %d: location file is %d bytes, at most %d", i, len(p.Loc.File), MaxString)
		case p.Entry > p.End:
			err = invalidf("probe %d: entry %d is past its end %d", i, p.Entry, p.End)
		case uint64(p.End) > code:
			err = invalidf("probe %d: end %d is past the end of the code (%d bytes)", i, p.End, code)
		default:
			err = checkSum(&p.Loc.Sum)
			if err == nil {
				err = checkFile(m, p.Pos)
			}
			if err != nil {
				err = fmt.Errorf("probe %d: %w", i, err)
			}
		}
		if err != nil {
			return "probes", err
		}
	}
	for i, l := range m.Lines {
		switch {
		case uint64(l.PC) >= code:
			err = invalidf("line entry %d: pc %d is not inside the code (%d bytes)", i, l.PC, code)
		case i > 0 && l.PC < m.Lines[i-1].PC:
			err = invalidf("line entry %d: pc %d is before the pc %d of entry %d: entries must be sorted by pc", i, l.PC, m.Lines[i-1].PC, i-1)
		default:
			err = checkFile(m, l.Pos)
			if err != nil {
				err = fmt.Errorf("line entry %d: %w", i, err)
			}
		}
		if err != nil {
			return "lines", err
		}
	}
	for i := range m.Relocs {
		r := &m.Relocs[i]
		switch {
		case len(r.Expr) > MaxString:
			err = limitf("reloc %d: expression is %d bytes, at most %d", i, len(r.Expr), MaxString)
		case uint64(r.Off)+8 > code:
			err = invalidf("reloc %d: the 8 bytes at offset %d are not inside the code (%d bytes)", i, r.Off, code)
		case i > 0 && uint64(r.Off) < uint64(m.Relocs[i-1].Off)+8:
			err = invalidf("reloc %d: offset %d overlaps or precedes reloc %d at %d: relocs must be sorted and not overlap", i, r.Off, i-1, m.Relocs[i-1].Off)
		default:
			if err = checkSum(&r.Sum); err != nil {
				err = fmt.Errorf("reloc %d: %w", i, err)
			}
		}
		if err != nil {
			return "relocs", err
		}
	}
	if len(m.Fields) > MaxFields {
		return "fields", limitf("%d field names, at most %d", len(m.Fields), MaxFields)
	}
	for i, f := range m.Fields {
		switch {
		case len(f) > MaxString:
			return "fields", limitf("field %d: name is %d bytes, at most %d", i, len(f), MaxString)
		case !rpn.ValidFieldName(f):
			return "fields", invalidf("field %d: name %q is not an identifier", i, f)
		}
	}
	return "", nil
}

// locKindMsg says that k is no location kind.
func locKindMsg(k rpn.LocKind) string {
	return fmt.Sprintf("location kind %d is not symbolic (0), line (1), absolute (2), tracepoint (3) or usdt (4)", k)
}

func validTracepoint(text string) bool {
	_, _, ok := rpn.SplitTracepoint(text)
	return ok
}

func validateHeader(h *rpn.Header) error {
	switch {
	case len(h.Name) > MaxString:
		return limitf("name is %d bytes, at most %d", len(h.Name), MaxString)
	case h.ModType > rpn.ModKernel:
		return invalidf("module type %d is neither user (0) nor kernel (1)", h.ModType)
	case h.JmpMax < 1 || h.JmpMax > rpn.MaxJmpMax:
		return invalidf("jmpmax %d is outside 1..%d", h.JmpMax, rpn.MaxJmpMax)
	case h.LogMax < 1 || h.LogMax > rpn.MaxLogMax:
		return invalidf("logmax %d is outside 1..%d", h.LogMax, rpn.MaxLogMax)
	case h.DfltExit > rpn.MaxFacility:
		return invalidf("dfltexit %d is outside 0..%d", h.DfltExit, rpn.MaxFacility)
	case h.Vars > rpn.MaxVars:
		return invalidf("vars %d is outside 0..%d", h.Vars, rpn.MaxVars)
	case h.GVars > rpn.MaxGVars:
		return invalidf("gvars %d is outside 0..%d", h.GVars, rpn.MaxGVars)
	case h.Arch > rpn.ArchI386:
		return invalidf("arch %d is neither x86_64 (0) nor i386 (1)", h.Arch)
	}
	return nil
}

// checkSum checks the terms of a sum: how many, their kinds, and that
// each has the names its kind needs and no other.
func checkSum(s *rpn.Sum) error {
	if len(s.Terms) > rpn.MaxTerms {
		return limitf("%d terms, at most %d", len(s.Terms), rpn.MaxTerms)
	}
	for j, t := range s.Terms {
		switch {
		case t.Kind > rpn.TermOffsetof:
			return invalidf("term %d: kind %d is not symbol (0), sizeof (1) or offsetof (2)", j, t.Kind)
		case len(t.Name) > MaxString || len(t.Field) > MaxString:
			return limitf("term %d: a name is %d bytes, at most %d", j, max(len(t.Name), len(t.Field)), MaxString)
		case t.Name == "":
			return invalidf("term %d: %s without a name", j, t.Kind)
		case t.Kind == rpn.TermOffsetof && t.Field == "":
			return invalidf("term %d: offsetof(%s) without a field", j, t.Name)
		case t.Kind != rpn.TermOffsetof && t.Field != "":
			return invalidf("term %d: a %s term has a field: only offsetof has", j, t.Kind)
		}
	}
	return nil
}

func checkFile(m *rpn.Module, p rpn.Pos) error {
	if int(p.File) >= len(m.Files) {
		return invalidf("source file index %d is out of range (%d files)", p.File, len(m.Files))
	}
	return nil
}

// wrap adds "verb section: " to err, the one place messages get their
// context: "decode probes: probe 2: entry 40 is past its end 20".
func wrap(verb, section string, err error) error {
	return fmt.Errorf("%s %s: %w", verb, section, err)
}
