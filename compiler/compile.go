package compiler

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/alecthomas/participle/v2/lexer"

	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/rpn"
)

// Compile turns a parsed DPDF into a verified module. Every error found is
// reported, as a dpdf.ErrorList positioned in the user's files.
func Compile(f *dpdf.File, opts rpn.CompileOptions) (*rpn.Module, error) {
	p, err := CompileProgram(f, opts)
	if err != nil {
		return nil, err
	}
	return p.Module(), nil
}

// CompileProgram is Compile returning the loaded program, which saves
// verifying the module a second time when it is run at once.
func CompileProgram(f *dpdf.File, opts rpn.CompileOptions) (*rpn.Program, error) {
	return CompileReader(f.Reader(), opts)
}

// CompileReader compiles the DPDF that r reads, a statement at a time:
// the syntax tree of a statement is dropped once its code is emitted, so
// the memory compiling takes is that of the module it builds (dpdf.Open
// and CompileReader read a DPDF of any size in memory proportional to its
// bytecode; dpdf.Parse and Compile hold the whole file's tree). Errors are
// reported as Compile's.
func CompileReader(r *dpdf.Reader, opts rpn.CompileOptions) (*rpn.Program, error) {
	c := &compiler{path: r.Path, opts: opts, fileIdx: map[string]uint16{}, fields: map[string]uint16{}}
	c.fileIndex(lexer.Position{Filename: r.Path})
	var header []*dpdf.KeyValue
	headerDone := false
	// per probe: whether it compiled without an error of its own, and
	// where it starts (what is clean is decided at the end, with the
	// syntax errors of its lines)
	type probeMark struct {
		ok   bool
		file string
		line int
	}
	var marks []probeMark
	var before int // len(c.errs) when the current probe started
	open := false  // a probe is being compiled
	inBody := false
	var keys []*dpdf.KeyValue
	var pd *dpdf.ProbeDef
	endProbe := func() {
		if !inBody {
			c.probeKeys(len(marks)-1, pd, keys)
		}
		c.probeEnd(pd)
		marks[len(marks)-1].ok = len(c.errs) == before
	}
	for {
		it, more := r.Next()
		if !more {
			break
		}
		switch {
		case it.Header != nil:
			header = append(header, it.Header)
		case it.Probe != nil:
			if !headerDone {
				c.header(header)
				headerDone = true
			}
			if open {
				endProbe()
			}
			open, inBody, keys, pd = true, false, keys[:0], it.Probe
			before = len(c.errs)
			marks = append(marks, probeMark{file: pd.Pos.Filename, line: pd.Pos.Line})
		case it.Key != nil:
			keys = append(keys, it.Key)
		case it.Stmt != nil:
			if !inBody {
				c.probeKeys(len(marks)-1, pd, keys)
				inBody = true
			}
			c.stmt(it.Stmt)
		}
	}
	if !headerDone {
		c.header(header)
	}
	if open {
		endProbe()
	}
	c.checkSwitches()
	if opts.Symbols != nil {
		c.m.BuildID = opts.Symbols.BuildID()
		if mb, ok := opts.Symbols.(rpn.ModuleBuildIDer); ok {
			c.m.BuildID = mb.ModuleBuildID(c.m.Name, c.m.ModType)
		}
		if len(c.m.BuildID) > rpn.MaxBuildID {
			c.errorf(lexer.Position{Filename: r.Path}, "the build ID of the symbols is %d bytes, at most %d: give symbols of another module", len(c.m.BuildID), rpn.MaxBuildID)
		}
	}
	syntax := r.Errors()
	c.errs = append(c.errs, syntax...)
	// clean: the probes compiled without an error, none of syntax in
	// their lines (from their start to the next probe's)
	clean := func() []int {
		index := newLineIndex(syntax)
		var out []int
		for i, mk := range marks {
			next := 0
			if i+1 < len(marks) {
				next = marks[i+1].line
			}
			if mk.ok && !index.any(mk.file, mk.line, next) {
				out = append(out, i)
			}
		}
		return out
	}
	if len(c.errs) > 0 {
		// what only the verifier sees is reported with the rest
		c.verifyProbes(clean())
		r.Finish(&c.errs)
		return nil, c.errs
	}
	prog, err := rpn.Load(c.m)
	if err != nil {
		var ve *rpn.VerifyError
		if !errors.As(err, &ve) || ve.Probe < 0 {
			return nil, fmt.Errorf("internal error: compiled code fails verification: %w", err)
		}
		c.verifyProbes(clean())
		r.Finish(&c.errs)
		return nil, c.errs
	}
	return prog, nil
}

// lineIndex answers whether an error lies in a range of lines of a file,
// in O(log n) a question.
type lineIndex map[string][]int

func newLineIndex(errs dpdf.ErrorList) lineIndex {
	ix := lineIndex{}
	for _, e := range errs {
		ix[e.Pos.Filename] = append(ix[e.Pos.Filename], e.Pos.Line)
	}
	for _, lines := range ix {
		slices.Sort(lines)
	}
	return ix
}

// any reports whether an error lies in lines [from, to) of file; to = 0
// means to the end of the file (dpdf.File.HasErrorsIn).
func (ix lineIndex) any(file string, from, to int) bool {
	lines := ix[file]
	i, _ := slices.BinarySearch(lines, from)
	return i < len(lines) && (to == 0 || lines[i] < to)
}

// verifyProbes runs the verifier on each of the given probes on its own
// and reports what it finds at the line of the instruction it names. The
// compiler checks operands itself, with columns; what only the verifier
// can see (a static call chain deeper than 32) is reported this way, for
// every probe, with the other errors of the file. A probe that did not
// compile cleanly is left out: its code is incomplete.
func (c *compiler) verifyProbes(probes []int) {
	h := c.m.Header
	if h.Name == "" {
		h.Name = "?" // reported already; the verifier needs one
	}
	r := 0
	for _, i := range probes {
		p := c.m.Probes[i]
		for r < len(c.m.Relocs) && c.m.Relocs[r].Off < p.Entry {
			r++
		}
		end := r
		for end < len(c.m.Relocs) && c.m.Relocs[end].Off < p.End {
			end++
		}
		one := &rpn.Module{Header: h, Probes: []rpn.Probe{p}, Code: c.m.Code, Lines: c.m.Lines, Files: c.m.Files, Relocs: c.m.Relocs[r:end], Fields: c.m.Fields}
		r = end
		_, err := rpn.Load(one)
		if err == nil {
			continue
		}
		pos := c.position(p.Pos)
		var ve *rpn.VerifyError
		if !errors.As(err, &ve) || ve.Probe < 0 {
			c.errorf(pos, "internal error: compiled code fails verification: %v", err)
			continue
		}
		if lp, ok := c.m.LineFor(ve.PC); ok && int(lp.File) < len(c.m.Files) {
			pos = lexer.Position{Filename: c.m.Files[lp.File], Line: int(lp.Line), Column: int(lp.Col)}
		}
		c.errorf(pos, "%s", ve.Msg)
	}
}

type compiler struct {
	path    string // the DPDF's
	opts    rpn.CompileOptions
	m       *rpn.Module
	errs    dpdf.ErrorList
	fileIdx map[string]uint16
	fields  map[string]uint16 // index of each name in Module.Fields
	// switches are the enable and disable instructions, checked against
	// the module's minors once every probe is compiled; minorUnknown: a
	// probe's minor failed to compile, so the check would mislead
	switches     []switchUse
	minorUnknown bool
	// taskAtInsert: the location being read is a kernel module's watch
	// address, in which the name "task" is the task_struct of the
	// process the kernel target's probes follow, known at insertion
	taskAtInsert bool
	// enabledAt: where each probe's enabled keyword is, by probe index
	enabledAt map[int]lexer.Position
	// autoStack is the header's autostacktrace = yes: every probe's
	// default (a probe's own keyword overrides it)
	autoStack bool

	// per probe
	cur      rpn.Probe // the probe being compiled
	lastEnds bool      // its last instruction ends the flow
	last     lexer.Position
	kind     rpn.ProbeKind
	labels   map[string]uint32
	labelAt  map[string]lexer.Position
	fixups   []fixup
	lastPos  rpn.Pos
}

// switchUse is one enable or disable instruction: its operand, where.
type switchUse struct {
	pos   lexer.Position
	op    string // "enable" or "disable"
	minor uint16
}

type fixup struct {
	at    uint32 // offset of the 4-byte target
	label *dpdf.Name
}

func (c *compiler) errorf(pos lexer.Position, format string, args ...any) {
	c.errs.Add(pos, format, args...)
}

// fileIndex returns the index in the module's file table of the file of
// p, adding it at its first use. A file the table cannot hold (its name
// too long, or one file too many) is reported at p, once.
func (c *compiler) fileIndex(p lexer.Position) uint16 {
	name := p.Filename
	if i, ok := c.fileIdx[name]; ok {
		return i
	}
	if c.m == nil {
		c.m = &rpn.Module{}
	}
	if len(name) > rpn.MaxText || len(c.m.Files) >= rpn.MaxFiles {
		if len(name) > rpn.MaxText {
			c.errorf(p, "source file name is %d bytes, at most %d", len(name), rpn.MaxText)
		} else {
			c.errorf(p, "more than %d source files: include fewer files", rpn.MaxFiles)
		}
		c.fileIdx[name] = 0
		return 0
	}
	i := uint16(len(c.m.Files))
	c.m.Files = append(c.m.Files, name)
	c.fileIdx[name] = i
	return i
}

func (c *compiler) pos(p lexer.Position) rpn.Pos {
	return rpn.Pos{File: c.fileIndex(p), Line: uint32(p.Line), Col: uint32(max(p.Column, 0))}
}

// position is the source position p stands for.
func (c *compiler) position(p rpn.Pos) lexer.Position {
	file := c.path
	if int(p.File) < len(c.m.Files) {
		file = c.m.Files[p.File]
	}
	return lexer.Position{Filename: file, Line: int(p.Line), Column: int(p.Col)}
}

// text checks that a string the module keeps fits in it.
func (c *compiler) text(pos lexer.Position, what, s string) bool {
	if len(s) > rpn.MaxText {
		c.errorf(pos, "%s is %d bytes, at most %d", what, len(s), rpn.MaxText)
		return false
	}
	return true
}

// constant evaluates a keyword value or operand that must be a plain
// number, within lo..hi.
func (c *compiler) constant(e *dpdf.Expr, what string, lo, hi uint64) (uint64, bool) {
	var errs dpdf.ErrorList
	n := e.Tree(&errs)
	if len(errs) > 0 {
		c.errs = append(c.errs, errs...)
		return 0, false
	}
	if dpdf.External(n) {
		c.errorf(e.Pos, "%s must be a constant: %s depends on symbols or types", what, e.Text())
		return 0, false
	}
	v, err := dpdf.Eval(n, nil)
	if err != nil {
		c.evalError(e.Pos, err)
		return 0, false
	}
	if v < lo || v > hi {
		c.errorf(e.Pos, "%s must be %d..%d, not %s", what, lo, hi, signedText(v, e))
		return 0, false
	}
	return v, true
}

// signedText shows a value as the user most likely meant it.
func signedText(v uint64, e *dpdf.Expr) string {
	if int64(v) < 0 {
		return strconv.FormatInt(int64(v), 10)
	}
	if t := e.Text(); t != strconv.FormatUint(v, 10) {
		return fmt.Sprintf("%s (%d)", t, v)
	}
	return strconv.FormatUint(v, 10)
}

func (c *compiler) evalError(pos lexer.Position, err error) {
	var ee *dpdf.EvalError
	if errors.As(err, &ee) {
		c.errorf(ee.Pos, "%s", ee.Msg)
		return
	}
	c.errorf(pos, "%v", err)
}

// word reads a keyword value that is a single word, such as "user".
func (c *compiler) word(kv *dpdf.KeyValue, allowed ...string) (string, bool) {
	v := kv.Value
	var w string
	switch {
	case v.Expr != nil:
		var errs dpdf.ErrorList
		n := v.Expr.Tree(&errs)
		s, ok := dpdf.Word(n)
		if !ok {
			break
		}
		w = strings.ToLower(s)
	case v.Str != nil:
		w = strings.ToLower(unquote(*v.Str))
	}
	for _, a := range allowed {
		if w == a {
			return w, true
		}
	}
	c.errorf(v.Pos, "%s must be %s, not %s", dpdf.KeyName(kv.Norm()), orList(allowed), v.Text)
	return "", false
}

func orList(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = strconv.Quote(w)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

func unquote(s string) string {
	if len(s) >= 2 && s[0] == '"' {
		if u, err := strconv.Unquote(s); err == nil {
			return u
		}
		return s[1 : len(s)-1]
	}
	return s
}

// number reads a keyword value that must be a constant.
func (c *compiler) number(kv *dpdf.KeyValue, lo, hi uint64) (uint64, bool) {
	if kv.Value.Expr == nil {
		c.errorf(kv.Value.Pos, "%s must be a number, not %s", dpdf.KeyName(kv.Norm()), kv.Value.Text)
		return 0, false
	}
	return c.constant(kv.Value.Expr, dpdf.KeyName(kv.Norm()), lo, hi)
}

func (c *compiler) header(kvs []*dpdf.KeyValue) {
	h := rpn.Header{JmpMax: rpn.DefaultJmpMax, LogMax: rpn.DefaultLogMax, DfltExit: rpn.DefaultDfltExit, Arch: rpn.ArchX86_64}
	var haveName, haveType bool
	// arch first: it decides what the rest means
	for _, kv := range kvs {
		if kv.Value == nil {
			continue // a line that failed to parse, already reported
		}
		if kv.Norm() == "arch" {
			if w, ok := c.word(kv, "x86_64", "i386"); ok && w == "i386" {
				h.Arch = rpn.ArchI386
			}
		}
	}
	for _, kv := range kvs {
		if kv.Value == nil {
			// the value failed to parse: the keyword is given, but
			// check the probes against the widest setting so that
			// one mistake is one error
			switch kv.Norm() {
			case "name":
				haveName = true
			case "modtype":
				haveType = true
				h.ModType = rpn.ModKernel
			case "vars":
				h.Vars = rpn.MaxVars
			case "gvars":
				h.GVars = rpn.MaxGVars
			}
			continue
		}
		switch kv.Norm() {
		case "name":
			haveName = true
			switch {
			case kv.Value.Str != nil:
				h.Name = unquote(*kv.Value.Str)
			default:
				h.Name = kv.Value.Text
			}
			if h.Name == "" {
				c.errorf(kv.Value.Pos, "name is empty")
			}
			c.text(kv.Value.Pos, "the module name", h.Name)
		case "modtype":
			haveType = true
			w, ok := c.word(kv, "user", "kernel")
			if w == "kernel" || !ok {
				// after a bad modtype, check the probes as kernel ones,
				// which allow the most, so that one mistake is one error
				h.ModType = rpn.ModKernel
			}
		case "major":
			if v, ok := c.number(kv, 0, math.MaxUint16); ok {
				h.Major = uint16(v)
			}
		case "jmpmax":
			if v, ok := c.number(kv, 1, rpn.MaxJmpMax); ok {
				h.JmpMax = uint32(v)
			}
		case "logmax":
			if v, ok := c.number(kv, 1, rpn.MaxLogMax); ok {
				h.LogMax = uint32(v)
			}
		case "dfltexit":
			if v, ok := c.number(kv, 0, rpn.MaxFacility); ok {
				h.DfltExit = uint8(v)
			}
		case "vars":
			v, ok := c.number(kv, 0, rpn.MaxVars)
			if !ok {
				v = rpn.MaxVars // so the probes do not report every lv as out of range
			}
			h.Vars = uint16(v)
		case "gvars":
			v, ok := c.number(kv, 0, rpn.MaxGVars)
			if !ok {
				v = rpn.MaxGVars
			}
			h.GVars = uint16(v)
		case "autostacktrace":
			if w, ok := c.word(kv, "yes", "no"); ok {
				c.autoStack = w == "yes"
				if c.autoStack && h.Arch != rpn.ArchX86_64 {
					c.errorf(kv.Pos, "autostacktrace = yes: stacks are unwound on x86_64 only")
					c.autoStack = false
				}
			}
		}
	}
	start := lexer.Position{Filename: c.path, Line: 1, Column: 1}
	if !haveName {
		c.errorf(start, "missing \"name = MODULE\": the probed module (a path, vmlinux or a kernel module name)")
	}
	if !haveType {
		c.errorf(start, "missing \"modtype = user\" or \"modtype = kernel\"")
	}
	c.m.Header = h
}

// probeKinds maps the keyword that starts a probe to its kind.
var probeKinds = map[string]rpn.ProbeKind{"offset": rpn.ProbeOffset, "retprobe": rpn.ProbeRetprobe, "tracepoint": rpn.ProbeTracepoint, "watch": rpn.ProbeWatch, "usdt": rpn.ProbeUSDT}

// probeKeys starts compiling the probe pd, number index, with its
// keywords: the probe is complete (probeEnd) once its program's statements
// are compiled (stmt).
func (c *compiler) probeKeys(index int, pd *dpdf.ProbeDef, keys []*dpdf.KeyValue) {
	p := rpn.Probe{Pos: c.pos(pd.Pos), Kind: probeKinds[pd.Offset.Norm()], AutoStack: c.autoStack}
	c.kind = p.Kind
	switch p.Kind {
	case rpn.ProbeTracepoint:
		p.Loc = c.tracepoint(pd.Offset)
	case rpn.ProbeUSDT:
		p.Loc = c.usdt(pd.Offset)
	case rpn.ProbeRetprobe:
		p.Loc = c.retprobe(pd.Offset)
	case rpn.ProbeWatch:
		p.Loc, p.WatchLen, p.WatchMode = c.watch(pd.Offset)
	default:
		p.Loc = c.location(pd.Offset.Value, "")
	}
	for _, kv := range keys {
		if kv.Value == nil {
			if kv.Norm() == "minor" {
				c.minorUnknown = true
			}
			continue // a line that failed to parse, already reported
		}
		switch kv.Norm() {
		case "opcode":
			if p.Kind != rpn.ProbeOffset {
				c.errorf(kv.Pos, "opcode does not apply to %s: only an offset probe is placed on an instruction whose first byte can be checked", p.Kind.Phrase())
				continue
			}
			if v, ok := c.number(kv, 0, 0xff); ok {
				p.HasOpcode, p.Opcode = true, uint8(v)
			}
		case "format":
			if kv.Value.Str == nil || !strings.HasPrefix(*kv.Value.Str, "\"") {
				c.errorf(kv.Pos, "format wants a quoted string: format = \"wrote %%d bytes: %%s\"")
				continue
			}
			f := unquote(*kv.Value.Str)
			if len(f) > rpn.MaxText {
				c.errorf(kv.Pos, "format is %d bytes, at most %d", len(f), rpn.MaxText)
				continue
			}
			if err := rpn.CheckFormat(f); err != nil {
				c.errorf(kv.Pos, "format: %v", err)
				continue
			}
			p.Format = f
		case "maxactive":
			if p.Kind != rpn.ProbeRetprobe {
				c.errorf(kv.Pos, "maxactive applies only to a retprobe (it bounds the calls of the function tracked at once per thread), not to %s", p.Kind.Phrase())
				continue
			}
			if v, ok := c.number(kv, 1, rpn.MaxMaxActive); ok {
				p.MaxActive = uint32(v)
			}
		case "minor":
			if v, ok := c.number(kv, 0, math.MaxUint16); ok {
				p.Minor = uint16(v)
			} else {
				c.minorUnknown = true
			}
		case "passcount":
			if v, ok := c.number(kv, 0, math.MaxInt64); ok {
				p.PassCount = v
			}
		case "maxhits":
			if v, ok := c.number(kv, 0, math.MaxInt64); ok {
				p.MaxHits = v
			}
		case "logonfault":
			if w, ok := c.word(kv, "yes", "no"); ok {
				p.LogOnFault = w == "yes"
				switch {
				case p.LogOnFault && p.Kind == rpn.ProbeTracepoint:
					c.errorf(kv.Pos, "logonfault = yes does not apply to a tracepoint probe: no probed instruction runs after its program, so none can fault")
					p.LogOnFault = false
				case p.LogOnFault && p.Kind == rpn.ProbeWatch:
					c.errorf(kv.Pos, "logonfault = yes does not apply to a watch probe: its program runs once the accessing instruction has completed, so none can fault after it")
					p.LogOnFault = false
				}
			}
		case "autostacktrace":
			if w, ok := c.word(kv, "yes", "no"); ok {
				p.AutoStack = w == "yes"
				if p.AutoStack && c.m.Arch != rpn.ArchX86_64 {
					c.errorf(kv.Pos, "autostacktrace = yes: stacks are unwound on x86_64 only")
					p.AutoStack = false
				}
			}
		case "enabled":
			if w, ok := c.word(kv, "yes", "no"); ok {
				p.Disabled = w == "no"
				if c.enabledAt == nil {
					c.enabledAt = map[int]lexer.Position{}
				}
				c.enabledAt[index] = kv.Pos
			}
		}
	}
	p.Entry = uint32(len(c.m.Code))
	c.cur = p
	c.labels = map[string]uint32{}
	c.labelAt = map[string]lexer.Position{}
	c.fixups = c.fixups[:0]
	c.lastPos = rpn.Pos{}
	c.lastEnds = false
	c.last = pd.Pos
}

// stmt compiles a statement of the current probe's program.
func (c *compiler) stmt(st *dpdf.Stmt) {
	c.last = st.Pos
	if st.Label != nil {
		name := st.Label.Name
		if prev, dup := c.labelAt[name]; dup {
			c.errorf(st.Label.Pos, "label %s defined twice in this probe (first at line %d)", name, prev.Line)
		} else {
			c.labels[name] = uint32(len(c.m.Code))
			c.labelAt[name] = st.Label.Pos
		}
		c.lastEnds = false
	}
	if st.Instr != nil {
		c.lastEnds = c.instr(st.Instr)
	}
}

// probeEnd completes the current probe: its final exit, its jumps.
func (c *compiler) probeEnd(pd *dpdf.ProbeDef) {
	p := c.cur
	if !c.lastEnds {
		// falling off the end of a program is a bare exit
		c.line(c.last)
		c.emit8(rpn.OpExit, c.m.DfltExit)
	}
	// A label on a line that failed to parse is still defined (the
	// parser keeps it), so every undefined label here is a real one.
	for _, fx := range c.fixups {
		target, ok := c.labels[fx.label.Value]
		if !ok {
			msg := fmt.Sprintf("undefined label %s", fx.label.Value)
			var names []string
			for n := range c.labels {
				names = append(names, n)
			}
			if s := dpdf.Suggest(fx.label.Value, names); s != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", s)
			}
			c.errorf(fx.label.Pos, "%s", msg)
			continue
		}
		binary.LittleEndian.PutUint32(c.m.Code[fx.at:], target)
	}
	p.End = uint32(len(c.m.Code))
	c.m.Probes = append(c.m.Probes, p)
}

// tracepoint reads a tracepoint value, "SUBSYS:EVENT", in a kernel module.
func (c *compiler) tracepoint(kv *dpdf.KeyValue) rpn.Location {
	if c.m.ModType != rpn.ModKernel {
		c.errorf(kv.Pos, "a tracepoint probe needs \"modtype = kernel\": tracepoints are in the kernel (this module is modtype = user)")
	}
	v := kv.Value
	if v == nil {
		return rpn.Location{Kind: rpn.LocTracepoint} // a line that failed to parse, already reported
	}
	loc := rpn.Location{Text: v.Text, Kind: rpn.LocTracepoint}
	if v.Event == nil {
		c.errorf(v.Pos, "tracepoint must be SUBSYS:EVENT, such as sched:sched_switch, not %s", v.Text)
		return loc
	}
	if !c.text(v.Pos, "the tracepoint", v.Text) {
		return loc
	}
	if at, msg := rpn.CheckTracepoint(*v.Event); msg != "" {
		pos := v.Pos
		pos.Column += at
		pos.Offset += at
		c.errorf(pos, "tracepoint %q: %s: write SUBSYS:EVENT, such as sched:sched_switch", *v.Event, msg)
	}
	return loc
}

// usdt reads a usdt value, "PROVIDER:NAME", in a user module: a static
// probe of the module's file (its .note.stapsdt), found where it runs.
func (c *compiler) usdt(kv *dpdf.KeyValue) rpn.Location {
	if c.m.ModType != rpn.ModUser {
		c.errorf(kv.Pos, "a usdt probe needs \"modtype = user\": user static probes are in programs and libraries (this module is modtype = kernel)")
	}
	v := kv.Value
	if v == nil {
		return rpn.Location{Kind: rpn.LocUSDT} // a line that failed to parse, already reported
	}
	loc := rpn.Location{Text: v.Text, Kind: rpn.LocUSDT}
	if v.Event == nil {
		c.errorf(v.Pos, "usdt must be PROVIDER:NAME, such as python:function__entry, not %s", v.Text)
		return loc
	}
	if !c.text(v.Pos, "the usdt probe", v.Text) {
		return loc
	}
	if at, msg := rpn.CheckTracepoint(*v.Event); msg != "" {
		pos := v.Pos
		pos.Column += at
		pos.Offset += at
		c.errorf(pos, "usdt %q: %s: write PROVIDER:NAME, such as python:function__entry", *v.Event, rpn.USDTWords(msg))
	}
	return loc
}

// retprobe reads a retprobe value: the function, as an offset's symbolic
// expression (or an address); a source line or a place inside a function
// is refused.
func (c *compiler) retprobe(kv *dpdf.KeyValue) rpn.Location {
	v := kv.Value
	if v != nil && v.Line != nil {
		c.errorf(v.Pos, "retprobe goes on a function, not a source line: name its symbol (retprobe = do_sys_open)")
		return rpn.Location{Text: v.Text}
	}
	if v != nil && v.Expr == nil {
		c.errorf(v.Pos, "retprobe must name a function, a symbol such as do_sys_open, not %s", v.Text)
		return rpn.Location{Text: v.Text}
	}
	before := len(c.errs)
	loc := c.location(v, "")
	if len(c.errs) == before && loc.Kind == rpn.LocExpr && !loc.Sum.IsSymbol() {
		c.errorf(v.Pos, "retprobe goes on a function's entry: name the function's symbol alone (retprobe = do_sys_open), not %s", v.Text)
	}
	return loc
}

// watch reads a watch value, ADDRESS,LEN,MODE: the address as an
// offset's expression (not a source line), the length 1, 2, 4 or 8 (4 at
// most on i386), the mode w or rw. A constant address must be a multiple
// of the length; a symbolic one is checked when it is resolved, at insert.
func (c *compiler) watch(kv *dpdf.KeyValue) (loc rpn.Location, n uint8, mode rpn.WatchMode) {
	v := kv.Value
	if v == nil {
		return rpn.Location{}, 0, 0 // a line that failed to parse, already reported
	}
	switch {
	case v.Line != nil:
		c.errorf(v.Pos, "watch takes an address, not a source line: name a variable (watch = jiffies,8,w)")
		return rpn.Location{Text: v.Head}, 0, 0
	case v.Expr == nil:
		c.errorf(v.Pos, "watch must be ADDRESS,LEN,MODE, such as jiffies,8,w, not %s", v.Text)
		return rpn.Location{Text: v.Head}, 0, 0
	}
	c.taskAtInsert = c.m.ModType == rpn.ModKernel
	loc = c.location(v, v.Head)
	c.taskAtInsert = false
	if len(v.Args) != 2 {
		what := fmt.Sprintf("%s has %d parts", v.Text, 1+len(v.Args))
		if len(v.Args) < 2 {
			what = fmt.Sprintf("%s lacks %s", v.Text, strings.Join([]string{"LEN", "MODE"}[len(v.Args):], " and "))
		}
		c.errorf(v.Pos, "watch must be ADDRESS,LEN,MODE, such as jiffies,8,w: %s", what)
		return loc, 0, 0
	}
	lenArg, modeArg := v.Args[0], v.Args[1]
	if x, ok := c.constant(lenArg, "watch length", 1, 8); ok {
		switch {
		case x != 1 && x != 2 && x != 4 && x != 8:
			c.errorf(lenArg.Pos, "watch length must be 1, 2, 4 or 8, not %d", x)
		case x == 8 && c.m.Arch == rpn.ArchI386:
			c.errorf(lenArg.Pos, "watch length 8 needs arch x86_64: an i386 debug register watches 1, 2 or 4 bytes")
		default:
			n = uint8(x)
		}
	}
	var errs dpdf.ErrorList
	w, _ := dpdf.Word(modeArg.Tree(&errs))
	switch strings.ToLower(w) {
	case "w":
		mode = rpn.WatchWrite
	case "rw":
		mode = rpn.WatchReadWrite
	case "r":
		c.errorf(modeArg.Pos, "watch mode r: x86 debug registers cannot watch reads alone; use rw (reads and writes)")
	default:
		c.errorf(modeArg.Pos, "watch mode must be \"w\" (writes) or \"rw\" (reads and writes), not %s", modeArg.Text())
	}
	if n != 0 && loc.Kind == rpn.LocAbsolute && loc.Addr%uint64(n) != 0 {
		c.errorf(v.Pos, "watch address %#x is not a multiple of its length %d: a debug register watches an aligned range (the aligned %d bytes around it start at %#x)", loc.Addr, n, n, loc.Addr&^uint64(n-1))
	}
	return loc, n, mode
}

// location evaluates a location value: an offset's, a retprobe's, or
// the address of a watch (text, its part as written; "" for v.Text).
func (c *compiler) location(v *dpdf.Value, text string) rpn.Location {
	if v == nil {
		return rpn.Location{} // a line that failed to parse, already reported
	}
	if text == "" {
		text = v.Text
	}
	loc := rpn.Location{Text: text}
	if !c.text(v.Pos, "the location", text) {
		return loc
	}
	switch {
	case v.Line != nil:
		loc.Kind = rpn.LocLine
		i := strings.LastIndexByte(*v.Line, ':')
		file := (*v.Line)[:i]
		line, err := strconv.Atoi((*v.Line)[i+1:])
		if err != nil || line <= 0 || line > math.MaxUint32 {
			c.errorf(v.Pos, "bad line number in %s", *v.Line)
			return loc
		}
		loc.File, loc.Line = file, uint32(line)
		if c.opts.Symbols != nil {
			addr, _, err := c.opts.Symbols.LineAddr(file, line)
			if err != nil {
				c.errorf(v.Pos, "%s: %v", *v.Line, err)
				return loc
			}
			loc.Addr, loc.Resolved = addr, true
		}
	case v.Expr != nil:
		var errs dpdf.ErrorList
		n := v.Expr.Tree(&errs)
		if len(errs) > 0 {
			c.errs = append(c.errs, errs...)
			return loc
		}
		if !dpdf.External(n) {
			loc.Kind = rpn.LocAbsolute
			a, err := dpdf.Eval(n, nil)
			if err != nil {
				c.evalError(v.Pos, err)
				return loc
			}
			loc.Addr, loc.Resolved = a, true
			return loc
		}
		loc.Kind = rpn.LocExpr
		var ok bool
		if loc.Sum, ok = c.sum(v.Pos, n, "offset"); !ok {
			return loc
		}
		if c.opts.Symbols != nil {
			var env dpdf.Env = c.opts.Symbols
			te := &taskEnv{Env: env}
			if c.taskAtInsert {
				env = te
			}
			a, err := dpdf.Eval(n, env)
			if err == nil && te.used {
				return loc // the rest checked, task at insertion
			}
			if errors.Is(err, rpn.ErrAtInsertion) {
				return loc
			}
			if err != nil {
				c.evalError(v.Pos, err)
				return loc
			}
			loc.Addr, loc.Resolved = a, true
		}
	default:
		c.errorf(v.Pos, "offset must be a location (symbol, symbol+N, an address or file.c:LINE), not %s", v.Text)
	}
	return loc
}

// taskEnv leaves the name "task" to insertion: in a kernel module's
// watch address it is the task_struct of the process the kernel
// target's probes follow (docs/kernel.md), which no symbol file has.
// It answers 0 for it, so that the rest of the address is checked, and
// says it was used.
type taskEnv struct {
	dpdf.Env
	used bool
}

func (e *taskEnv) Symbol(name string) (uint64, error) {
	if name == "task" {
		e.used = true
		return 0, nil
	}
	return e.Env.Symbol(name)
}

// line records the source position of the next instruction.
func (c *compiler) line(p lexer.Position) {
	pos := c.pos(p)
	if pos == c.lastPos {
		return
	}
	c.lastPos = pos
	c.m.Lines = append(c.m.Lines, rpn.LineEntry{PC: uint32(len(c.m.Code)), Pos: pos})
}

// emit appends an instruction without operands; emit8, emit16, emit16x2
// and emit64 append one with operands of the opcode's format.
func (c *compiler) emit(op rpn.Opcode) { c.m.Code = append(c.m.Code, byte(op)) }

func (c *compiler) emit8(op rpn.Opcode, a uint8) { c.m.Code = append(c.m.Code, byte(op), a) }

func (c *compiler) emit16(op rpn.Opcode, a uint16) {
	c.m.Code = binary.LittleEndian.AppendUint16(append(c.m.Code, byte(op)), a)
}

func (c *compiler) emit16x2(op rpn.Opcode, a, b uint16) {
	c.m.Code = binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint16(append(c.m.Code, byte(op)), a), b)
}

func (c *compiler) emit64(op rpn.Opcode, a uint64) {
	c.m.Code = binary.LittleEndian.AppendUint64(append(c.m.Code, byte(op)), a)
}

// instr compiles one instruction and reports whether it ends the flow.
func (c *compiler) instr(in *dpdf.Instr) bool {
	c.line(in.Pos)
	switch {
	case in.Push != nil:
		c.push(in.Push)
	case in.PopKw:
		c.pop(in.Pos, in.Pop)
	case in.Log != nil:
		c.log(in.Log)
	case in.VarOp != "":
		c.varOp(strings.ToLower(in.VarOp), in.VarRef)
	case in.Jump != nil:
		op := map[string]rpn.Opcode{"jmp": rpn.OpJmp, "jz": rpn.OpJz, "jnz": rpn.OpJnz, "jlt": rpn.OpJlt, "jle": rpn.OpJle,
			"jgt": rpn.OpJgt, "jge": rpn.OpJge, "loop": rpn.OpLoop, "call": rpn.OpCall}[strings.ToLower(in.Jump.Op)]
		c.emit(op)
		// the target is patched once the probe's labels are known
		c.fixups = append(c.fixups, fixup{at: uint32(len(c.m.Code)), label: in.Jump.Label})
		c.m.Code = append(c.m.Code, 0, 0, 0, 0)
		return op == rpn.OpJmp
	case in.ExitKw:
		fac := c.m.DfltExit
		if in.Exit != nil {
			if v, ok := c.constant(in.Exit, "exit facility", 0, rpn.MaxFacility); ok {
				fac = uint8(v)
			}
		}
		c.emit8(rpn.OpExit, fac)
		return true
	case in.SetOp != "":
		imm, stack := rpn.OpSetMajI, rpn.OpSetMaj
		if strings.EqualFold(in.SetOp, "setmin") {
			imm, stack = rpn.OpSetMinI, rpn.OpSetMin
		}
		if in.SetArg == nil {
			c.emit(stack)
			break
		}
		if v, ok := c.constant(in.SetArg, strings.ToLower(in.SetOp), 0, math.MaxUint16); ok {
			c.emit16(imm, uint16(v))
		}
	case in.Shift != "":
		s := strings.ToLower(in.Shift)
		imm := map[string]rpn.Opcode{"shl": rpn.OpShlI, "shr": rpn.OpShrI, "sar": rpn.OpSarI, "rol": rpn.OpRolI, "ror": rpn.OpRorI}[s]
		if in.Count == nil {
			c.emit(imm + (rpn.OpShl - rpn.OpShlI))
			break
		}
		bits := uint64(c.m.Arch.WordSize() * 8)
		if v, ok := c.constant(in.Count, s+" count", 0, bits-1); ok {
			c.emit8(imm, uint8(v))
		}
	case in.Ros != nil:
		if v, ok := c.constant(in.Ros, "ros count", 1, rpn.StackSize); ok {
			c.emit8(rpn.OpRos, uint8(v))
		}
	case in.Switch != "":
		word := strings.ToLower(in.Switch)
		if v, ok := c.constant(in.Minor, word+" minor", 0, math.MaxUint16); ok {
			op := rpn.OpEnable
			if word == "disable" {
				op = rpn.OpDisable
			}
			c.emit16(op, uint16(v))
			c.switches = append(c.switches, switchUse{pos: in.Minor.Pos, op: word, minor: uint16(v)})
		}
	case strings.EqualFold(in.Simple, "log_st"):
		// Dynamic Probes' log_st: the stack of the module's kind,
		// DefaultStackFrames frames (docs/language.md, "Stacks")
		stack := "ustack"
		if c.m.ModType == rpn.ModKernel {
			stack = "kstack"
		}
		if c.m.Arch != rpn.ArchX86_64 {
			c.errorf(in.Pos, "log_st (log %s): stacks are unwound on x86_64 only", stack)
			return false
		}
		c.log(&dpdf.LogOperand{Pos: in.Pos, Stack: stack})
	case in.Simple != "":
		s := strings.ToLower(in.Simple)
		op := simpleOps[s]
		c.emit(op)
		return op.Ends()
	}
	return false
}

var simpleOps = map[string]rpn.Opcode{
	"nop": rpn.OpNop, "ret": rpn.OpRet, "abort": rpn.OpAbort, "rem": rpn.OpRem, "add": rpn.OpAdd, "sub": rpn.OpSub, "mul": rpn.OpMul,
	"div": rpn.OpDiv, "idiv": rpn.OpIDiv, "and": rpn.OpAnd, "or": rpn.OpOr, "xor": rpn.OpXor, "not": rpn.OpNot, "neg": rpn.OpNeg,
	"vfy_r": rpn.OpVfyR, "vfy_rw": rpn.OpVfyRW, "dup": rpn.OpDup, "xchg": rpn.OpXchg,
}

// reg resolves a register operand and checks it may be used here.
func (c *compiler) reg(r *dpdf.RegRef, write bool) (rpn.Reg, bool) {
	reg, ok := rpn.LookupReg(c.m.Arch, r.Name.Value)
	if !ok {
		msg := fmt.Sprintf("unknown register %q for arch %s", r.Name.Value, c.m.Arch)
		if s := dpdf.Suggest(strings.ToLower(r.Name.Value), rpn.RegNames(c.m.Arch)); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		c.errorf(r.Name.Pos, "%s", msg)
		return 0, false
	}
	if msg := rpn.CheckReg(reg, c.m.Header, write, strings.EqualFold(r.Set, "u")); msg != "" {
		c.errorf(r.Name.Pos, "%s", msg)
		return 0, false
	}
	return reg, true
}

// varIndex evaluates an immediate variable index.
func (c *compiler) varIndex(space string, e *dpdf.Expr) (uint16, bool) {
	n := c.m.Vars
	if space == "gv" {
		n = c.m.GVars
	}
	if n == 0 {
		key := "vars"
		if space == "gv" {
			key = "gvars"
		}
		c.errorf(e.Pos, "%s used but the module declares none: add \"%s = N\" to the header", space, key)
		return 0, false
	}
	v, ok := c.constant(e, space+" index", 0, uint64(n)-1)
	return uint16(v), ok
}

func (c *compiler) size(e *dpdf.Expr, io bool) (uint8, bool) {
	if e == nil {
		return uint8(c.m.Arch.WordSize()), true
	}
	v, ok := c.constant(e, "size", 1, 8)
	if !ok {
		return 0, false
	}
	if msg := rpn.CheckSize(uint8(v), c.m.Arch, io); msg != "" {
		c.errorf(e.Pos, "%s", msg)
		return 0, false
	}
	return uint8(v), true
}

func (c *compiler) push(p *dpdf.PushOperand) {
	switch {
	case p.Reg != nil:
		if r, ok := c.reg(p.Reg, false); ok {
			op := rpn.OpPushR
			if strings.EqualFold(p.Reg.Set, "u") && c.m.ModType == rpn.ModKernel {
				op = rpn.OpPushU
			}
			c.emit16(op, uint16(r))
		}
	case p.Const != nil:
		c.pushConst(p.Const)
	case p.Var != nil:
		c.varInstr("push", p.Var, rpn.OpPushLVI, rpn.OpPushLV)
	case p.MrfKw:
		if s, ok := c.size(p.Size, false); ok {
			c.emit8(rpn.OpPushMrf, s)
		}
	case p.IO != nil:
		if s, ok := c.size(p.IO, true); ok {
			c.emit8(rpn.OpPushIO, s)
		}
	case p.Field != nil:
		c.pushField(p)
	case p.IV != nil:
		c.iv(p.Pos, "push", p.IV, rpn.OpPushIV)
	case p.Arg != nil:
		if c.kind != rpn.ProbeUSDT {
			c.errorf(p.Pos, "push arg reads an argument of a usdt probe (\"usdt = PROVIDER:NAME\"): this is %s; read registers with push r", c.kind.Phrase())
			break
		}
		if v, ok := c.constant(p.Arg, "argument number", 1, rpn.MaxUSDTArgs); ok {
			c.emit8(rpn.OpPushArg, uint8(v))
		}
	case p.Sys != "":
		switch strings.ToLower(p.Sys) {
		case "pid":
			c.emit(rpn.OpPushPID)
		case "tid":
			c.emit(rpn.OpPushTID)
		case "procid":
			c.emit(rpn.OpPushProcID)
		case "task":
			if c.m.ModType != rpn.ModKernel {
				c.errorf(p.Pos, "push task reads the current task of a kernel: this module is modtype = user")
				return
			}
			c.emit(rpn.OpPushTask)
		case "ts":
			c.emit(rpn.OpPushTS)
		case "lp":
			c.emit(rpn.OpPushLP)
		}
	}
}

// pushField compiles push field,NAME: the name goes into Module.Fields
// once, and the instruction refers to it by index.
func (c *compiler) pushField(p *dpdf.PushOperand) {
	name := p.Field.Value
	if c.kind != rpn.ProbeTracepoint {
		c.errorf(p.Pos, "push field reads the event of a tracepoint probe (\"tracepoint = SUBSYS:EVENT\"): this is %s", c.kind.Phrase())
		return
	}
	if !rpn.ValidFieldName(name) {
		c.errorf(p.Field.Pos, "field name %s is not an identifier: tracepoint fields are named like C variables (prev_pid)", name)
		return
	}
	i, ok := c.fields[name]
	if !ok {
		if !c.text(p.Field.Pos, "the field name", name) {
			return
		}
		if len(c.m.Fields) >= rpn.MaxFields {
			c.errorf(p.Field.Pos, "more than %d distinct field names in one module", rpn.MaxFields)
			return
		}
		i = uint16(len(c.m.Fields))
		c.m.Fields = append(c.m.Fields, name)
		c.fields[name] = i
	}
	c.emit16(rpn.OpPushField, i)
}

// iv compiles push iv,I and pop iv,I: the instance variables of the call
// the hit belongs to, which tracepoint and watch probes have none of.
func (c *compiler) iv(pos lexer.Position, what string, e *dpdf.Expr, op rpn.Opcode) {
	if c.kind == rpn.ProbeTracepoint || c.kind == rpn.ProbeWatch {
		c.errorf(pos, "%s iv: instance variables belong to a call of a function, and %s runs in none: use them in an offset probe at the function's entry and its retprobe", what, c.kind.Phrase())
		return
	}
	if v, ok := c.constant(e, "iv index", 0, rpn.MaxIV-1); ok {
		c.emit8(op, uint8(v))
	}
}

// checkSwitches refuses an enable or disable of a minor no probe of the
// file has. The file's probes are all known here; a module merged with
// another build later (insert --merge) is not, and a probe of the same
// minor in it replaces this file's, so a program can only switch minors
// its own file defines (docs/language.md, "Switching").
func (c *compiler) checkSwitches() {
	if c.minorUnknown {
		return
	}
	if i, j, ok := rpn.SwitchConflict(c.m.Probes); ok {
		// said at the enabled = no, naming the other probe's line
		off, on := i, j
		if !c.m.Probes[off].Disabled {
			off, on = j, i
		}
		line := int(c.m.Probes[on].Pos.Line)
		if at, ok := c.enabledAt[on]; ok {
			line = at.Line
		}
		minor := c.m.Probes[off].Minor
		c.errorf(c.enabledAt[off], "probes of minor %d differ in enabled (line %d): a switch belongs to a minor, as enable %d, disable %d and gprobes enable --minor %d switch them all; give the probes that start switched off a minor of their own", minor, line, minor, minor, minor)
	}
	if len(c.switches) == 0 {
		return
	}
	have := map[uint16]bool{}
	for _, p := range c.m.Probes {
		have[p.Minor] = true
	}
	for _, s := range c.switches {
		if have[s.minor] {
			continue
		}
		minors := make([]int, 0, len(have))
		for m := range have {
			minors = append(minors, int(m))
		}
		slices.Sort(minors)
		list := make([]string, 0, 8)
		for i, m := range minors {
			if i == 8 {
				list = append(list, "...")
				break
			}
			list = append(list, strconv.Itoa(m))
		}
		c.errorf(s.pos, "%s %d: no probe in this file has minor %d (the minors here: %s); a program switches the probes of its own file", s.op, s.minor, s.minor, strings.Join(list, ", "))
	}
}

// pushConst compiles push d,EXPR. A value that depends on symbols or types
// gets a relocation so the engine can recompute it for the live target.
func (c *compiler) pushConst(e *dpdf.Expr) {
	var errs dpdf.ErrorList
	n := e.Tree(&errs)
	if len(errs) > 0 {
		c.errs = append(c.errs, errs...)
		return
	}
	ext := dpdf.External(n)
	var sum rpn.Sum
	if ext {
		var ok bool
		if sum, ok = c.sum(e.Pos, n, "push d"); !ok {
			return
		}
	}
	var v uint64
	resolved := true
	if ext && c.opts.Symbols == nil {
		resolved = false
	} else {
		var env dpdf.Env
		if ext {
			env = c.opts.Symbols
		}
		var err error
		v, err = dpdf.Eval(n, env)
		if errors.Is(err, rpn.ErrAtInsertion) {
			v, resolved = 0, false
		} else if err != nil {
			c.evalError(e.Pos, err)
			return
		}
	}
	if c.m.Arch == rpn.ArchI386 && resolved && v > math.MaxUint32 && int64(v) < math.MinInt32 ||
		c.m.Arch == rpn.ArchI386 && resolved && v > math.MaxUint32 && int64(v) > math.MaxInt32 {
		c.errorf(e.Pos, "constant %s does not fit in a 32-bit word", signedText(v, e))
		return
	}
	if c.m.Arch == rpn.ArchI386 {
		v &= math.MaxUint32
	}
	if ext {
		text := e.Text()
		if !c.text(e.Pos, "an expression with symbols", text) {
			return
		}
		c.m.Relocs = append(c.m.Relocs, rpn.Reloc{Off: uint32(len(c.m.Code) + 1), Expr: text, Sum: sum, Value: v, Resolved: resolved})
	}
	c.emit64(rpn.OpPushD, v)
}

func (c *compiler) pop(pos lexer.Position, p *dpdf.PopOperand) {
	switch {
	case p == nil:
		c.emit(rpn.OpPop)
	case p.Reg != nil:
		if r, ok := c.reg(p.Reg, true); ok {
			op := rpn.OpPopR
			if strings.EqualFold(p.Reg.Set, "u") && c.m.ModType == rpn.ModKernel {
				op = rpn.OpPopU
			}
			c.emit16(op, uint16(r))
		}
	case p.Var != nil:
		c.varInstr("pop", p.Var, rpn.OpPopLVI, rpn.OpPopLV)
	case p.MrfKw:
		if s, ok := c.size(p.Size, false); ok {
			c.emit8(rpn.OpPopMrf, s)
		}
	case p.IO != nil:
		if s, ok := c.size(p.IO, true); ok {
			c.emit8(rpn.OpPopIO, s)
		}
	case p.IV != nil:
		c.iv(p.Pos, "pop", p.IV, rpn.OpPopIV)
	case p.LP:
		c.emit(rpn.OpPopLP)
	default:
		c.errorf(pos, "malformed pop")
	}
}

// varInstr compiles an lv/gv instruction; the gv opcodes follow the lv
// ones in the same order, 10 apart.
func (c *compiler) varInstr(what string, v *dpdf.VarRef, imm, stack rpn.Opcode) {
	space := strings.ToLower(v.Space)
	delta := rpn.Opcode(0)
	if space == "gv" {
		delta = rpn.OpPushGVI - rpn.OpPushLVI
	}
	if v.Index == nil {
		if (space == "lv" && c.m.Vars == 0) || (space == "gv" && c.m.GVars == 0) {
			c.errorf(v.Pos, "%s %s used but the module declares no %s", what, space, map[string]string{"lv": "vars", "gv": "gvars"}[space])
			return
		}
		c.emit(stack + delta)
		return
	}
	if i, ok := c.varIndex(space, v.Index); ok {
		c.emit16(imm+delta, i)
	}
}

func (c *compiler) varOp(op string, v *dpdf.VarRef) {
	switch op {
	case "move":
		c.varInstr(op, v, rpn.OpMoveLVI, rpn.OpMoveLV)
	case "inc":
		c.varInstr(op, v, rpn.OpIncLVI, rpn.OpIncLV)
	case "dec":
		c.varInstr(op, v, rpn.OpDecLVI, rpn.OpDecLV)
	}
}

func (c *compiler) log(l *dpdf.LogOperand) {
	switch {
	case l.Str:
		c.emit(rpn.OpLogStr)
	case l.Mrf:
		c.emit(rpn.OpLogMrf)
	case l.Stack != "":
		op := rpn.OpLogUStack
		if strings.EqualFold(l.Stack, "kstack") {
			op = rpn.OpLogKStack
		}
		if c.m.Arch != rpn.ArchX86_64 {
			c.errorf(l.Pos, "log %s: stacks are unwound on x86_64 only", strings.ToLower(l.Stack))
			return
		}
		n := uint64(rpn.DefaultStackFrames)
		if l.Frames != nil {
			var ok bool
			if n, ok = c.constant(l.Frames, "log "+strings.ToLower(l.Stack)+" frames", 1, rpn.MaxStackFrames); !ok {
				return
			}
		}
		c.emit8(op, uint8(n))
	case l.Space != "":
		space := strings.ToLower(l.Space)
		i, ok := c.varIndex(space, l.Index)
		if !ok {
			return
		}
		total := c.m.Vars
		if space == "gv" {
			total = c.m.GVars
		}
		n, ok := c.constant(l.Count, "log "+space+" count", 1, rpn.StackSize*8)
		if !ok {
			return
		}
		if uint64(i)+n > uint64(total) {
			key := map[string]string{"lv": "vars", "gv": "gvars"}[space]
			c.errorf(l.Count.Pos, "log %s,%d,%d reaches past the last variable (%s = %d)", space, i, n, key, total)
			return
		}
		op := rpn.OpLogLV
		if space == "gv" {
			op = rpn.OpLogGV
		}
		c.emit16x2(op, i, uint16(n))
	case l.Words != nil:
		if n, ok := c.constant(l.Words, "log word count", 1, rpn.StackSize); ok {
			c.emit8(rpn.OpLogN, uint8(n))
		}
	}
}

// sum reduces n, an expression that depends on symbols or types, to the
// Sum the engine evaluates at insert time. An operation a Sum cannot hold
// is reported at its operator; what tells the user what was being
// compiled ("push d", "offset") and pos where it is written.
func (c *compiler) sum(pos lexer.Position, n dpdf.Node, what string) (rpn.Sum, bool) {
	s, bad, err := reduce(n)
	switch {
	case err != nil:
		c.evalError(n.Position(), err)
		return rpn.Sum{}, false
	case bad != nil && what == "offset":
		c.errorf(bad.Pos, "%s %s: a location adds and subtracts symbols and constants (do_fork+0x1c), possibly times constants", shown(bad), operation[bad.Op])
		return rpn.Sum{}, false
	case bad != nil:
		c.errorf(bad.Pos, "%s %s: only sums of symbols, sizeof and offsetof times constants can be resolved at insert time; push the operands separately and combine them with %s", shown(bad), operation[bad.Op], instruction[bad.Op])
		return rpn.Sum{}, false
	case len(s.Terms) > rpn.MaxTerms:
		c.errorf(pos, "%s uses %d distinct symbols and types, at most %d", what, len(s.Terms), rpn.MaxTerms)
		return rpn.Sum{}, false
	}
	return s, true
}

// operation and instruction say, for the messages of sum, what a binary
// operator a Sum cannot hold does and which instruction does it at run
// time.
var (
	operation = map[string]string{
		"*": "multiplies two values that depend on symbols or types",
		"/": "divides with a value that depends on symbols or types", "%": "takes a remainder with a value that depends on symbols or types",
		"&": "masks a value that depends on symbols or types", "|": "ors a value that depends on symbols or types",
		"^":  "xors a value that depends on symbols or types",
		"<<": "shifts by a value that depends on symbols or types", ">>": "shifts with a value that depends on symbols or types",
	}
	instruction = map[string]string{
		"*": "mul", "/": "div", "%": "div", "&": "and", "|": "or", "^": "xor", "<<": "shl", ">>": "shr",
	}
)

// shown writes a binary operation without its outer parentheses.
func shown(n *dpdf.BinaryNode) string {
	return strings.TrimSuffix(strings.TrimPrefix(n.String(), "("), ")")
}

// reduce computes n as a Sum: +, - and unary -, ~, + of sums; * of a sum
// by a constant; << of a sum by a constant; any operator on two constants.
// Every step is an identity of 64-bit wrapping arithmetic, so the Sum
// evaluates to what dpdf.Eval computes from the same symbols. It returns
// the first operation a Sum cannot express in bad, or the error of a
// constant operation (division by zero).
func reduce(n dpdf.Node) (s rpn.Sum, bad *dpdf.BinaryNode, err error) {
	switch n := n.(type) {
	case *dpdf.Num:
		return rpn.Sum{Addend: n.Value}, nil, nil
	case *dpdf.Sym:
		return rpn.Sum{Terms: []rpn.Term{{Kind: rpn.TermSymbol, Factor: 1, Name: n.Name}}}, nil, nil
	case *dpdf.SizeofNode:
		return rpn.Sum{Terms: []rpn.Term{{Kind: rpn.TermSizeof, Factor: 1, Name: n.Type}}}, nil, nil
	case *dpdf.OffsetofNode:
		return rpn.Sum{Terms: []rpn.Term{{Kind: rpn.TermOffsetof, Factor: 1, Name: n.Type, Field: n.Field}}}, nil, nil
	case *dpdf.UnaryNode:
		x, bad, err := reduce(n.X)
		if bad != nil || err != nil {
			return rpn.Sum{}, bad, err
		}
		switch n.Op {
		case "-":
			return x.Scaled(^uint64(0)), nil, nil
		case "~": // ~x == -x - 1
			x = x.Scaled(^uint64(0))
			x.Addend--
			return x, nil, nil
		}
		return x, nil, nil
	case *dpdf.BinaryNode:
		x, bad, err := reduce(n.X)
		if bad != nil || err != nil {
			return rpn.Sum{}, bad, err
		}
		y, bad, err := reduce(n.Y)
		if bad != nil || err != nil {
			return rpn.Sum{}, bad, err
		}
		xc, yc := len(x.Terms) == 0, len(y.Terms) == 0
		switch {
		case n.Op == "+":
			return x.Plus(y, 1), nil, nil
		case n.Op == "-":
			return x.Plus(y, ^uint64(0)), nil, nil
		case xc && yc:
			v, err := dpdf.Eval(&dpdf.BinaryNode{Pos: n.Pos, Op: n.Op, X: &dpdf.Num{Value: x.Addend}, Y: &dpdf.Num{Value: y.Addend}}, nil)
			return rpn.Sum{Addend: v}, nil, err
		case n.Op == "*" && yc:
			return x.Scaled(y.Addend), nil, nil
		case n.Op == "*" && xc:
			return y.Scaled(x.Addend), nil, nil
		case n.Op == "<<" && yc:
			if y.Addend >= 64 {
				return rpn.Sum{}, nil, nil
			}
			return x.Scaled(1 << y.Addend), nil, nil
		}
		return rpn.Sum{}, n, nil
	}
	return rpn.Sum{}, nil, &dpdf.EvalError{Pos: n.Position(), Msg: "unknown expression"}
}
