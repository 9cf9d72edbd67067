package rpn

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"

	"github.com/gprobes/gprobes/internal/escape"
)

// insn is a decoded, verified instruction: the form the machine runs.
// 16 bytes, so the loop indexes a flat array without decoding operands.
type insn struct {
	op  Opcode
	a   uint8  // u8 operand: facility, count, size
	b   uint16 // u16 operand: register, variable index, major/minor
	c   uint32 // jump target (instruction index), second u16 operand
	imm uint64 // push d immediate
}

// Program is a module whose bytecode passed verification, decoded for the
// machine. Only Load makes one, so the machine never runs unverified code.
// A Program is immutable and may be shared by any number of Machines.
type Program struct {
	m     *Module
	code  []insn
	pcs   []uint32   // byte offset in Module.Code of each instruction
	entry []uint32   // instruction index of each probe's first instruction
	end   []uint32   // instruction index just past each probe
	mask  uint64     // word mask: all ones on x86_64, 0xffffffff on i386
	sh    uint       // 64 - word bits, for sign extension
	w     int        // word size in bytes
	lower []Lowering // by probe: the code generators' analysis (lower.go)
}

// Module returns the module p was loaded from. The caller must not modify it.
func (p *Program) Module() *Module { return p.m }

// NumProbes is the number of probes in the program.
func (p *Program) NumProbes() int { return len(p.entry) }

// VerifyError says why a module's bytecode was refused. %v prints one
// line; %+v adds the probe's listing with the failing instruction marked.
type VerifyError struct {
	Probe int    // index of the probe, -1 for the module as a whole
	PC    uint32 // byte offset of the offending instruction, when Probe >= 0
	Msg   string
	m     *Module
}

func (e *VerifyError) Error() string {
	if e.Probe < 0 {
		return "verify module: " + e.Msg
	}
	where := fmt.Sprintf("probe %d", e.Probe)
	if e.Probe < len(e.m.Probes) {
		where += " (" + escape.String(e.m.Probes[e.Probe].Loc.Text) + ")"
	}
	if pos, ok := e.m.LineFor(e.PC); ok {
		where += " at " + e.m.PosString(pos)
	}
	return fmt.Sprintf("verify %s pc %#04x: %s", where, e.PC, e.Msg)
}

// Format implements fmt.Formatter: %+v appends the listing.
func (e *VerifyError) Format(s fmt.State, verb rune) {
	io.WriteString(s, e.Error())
	if verb == 'v' && s.Flag('+') && e.Probe >= 0 && e.Probe < len(e.m.Probes) {
		io.WriteString(s, "\n")
		p := e.m.Probes[e.Probe]
		disasmRange(s, e.m, p.Entry, p.End, e.PC)
	}
}

// Load verifies m and decodes it for the machine. It refuses anything the
// machine could not run safely: unknown opcodes, truncated operands, jumps
// outside their probe or into the middle of an instruction, a program
// that can run off its end, variable indices beyond vars/gvars, registers
// the architecture lacks, sizes other than 1/2/4/8, relocations that do
// not point at a push d immediate, static call chains deeper than 32, and
// probe kinds that do not go with their location, keywords or
// instructions (a tracepoint that is not SUBSYS:EVENT, maxactive off a
// retprobe, a watch's length and mode off a watch probe or out of range,
// push field outside a tracepoint probe or past Fields, push iv and pop
// iv past MaxIV or in a tracepoint or watch probe, probes of one minor
// that differ in enabled). enable and disable may name any minor: a
// module merged later may have it.
func Load(m *Module) (*Program, error) {
	v := &verifier{m: m}
	if msg := checkHeader(&m.Header); msg != "" {
		return nil, &VerifyError{Probe: -1, Msg: msg, m: m}
	}
	if msg := checkFields(m.Fields); msg != "" {
		return nil, &VerifyError{Probe: -1, Msg: msg, m: m}
	}
	p := &Program{m: m, mask: ^uint64(0), w: 8}
	if m.Arch == ArchI386 {
		p.mask, p.sh, p.w = 0xffffffff, 32, 4
	}
	v.p = p
	for i := range m.Probes {
		if err := v.probe(i); err != nil {
			return nil, err
		}
	}
	if i, j, ok := SwitchConflict(m.Probes); ok {
		return nil, &VerifyError{Probe: j, PC: m.Probes[j].Entry, Msg: fmt.Sprintf("probes %d and %d of minor %d differ in enabled: the probes of a minor share one switch", i, j, m.Probes[i].Minor), m: m}
	}
	if err := v.relocs(); err != nil {
		return nil, err
	}
	if err := v.lines(); err != nil {
		return nil, err
	}
	p.lowerAll()
	return p, nil
}

func checkHeader(h *Header) string {
	switch {
	case h.Name == "":
		return "module name is empty"
	case h.Arch > ArchI386:
		return fmt.Sprintf("unknown arch %d", h.Arch)
	case h.ModType > ModKernel:
		return fmt.Sprintf("unknown modtype %d", h.ModType)
	case h.JmpMax < 1 || h.JmpMax > MaxJmpMax:
		return fmt.Sprintf("jmpmax %d outside 1..%d", h.JmpMax, MaxJmpMax)
	case h.LogMax < 1 || h.LogMax > MaxLogMax:
		return fmt.Sprintf("logmax %d outside 1..%d", h.LogMax, MaxLogMax)
	case h.DfltExit > MaxFacility:
		return fmt.Sprintf("dfltexit %d outside 0..%d", h.DfltExit, MaxFacility)
	case h.Vars > MaxVars:
		return fmt.Sprintf("vars %d above %d", h.Vars, MaxVars)
	case h.GVars > MaxGVars:
		return fmt.Sprintf("gvars %d above %d", h.GVars, MaxGVars)
	}
	return ""
}

// checkFields says what is wrong with a module's field names, or "".
func checkFields(fields []string) string {
	if len(fields) > MaxFields {
		return fmt.Sprintf("%d field names, at most %d", len(fields), MaxFields)
	}
	seen := make(map[string]int, len(fields))
	for i, f := range fields {
		if !ValidFieldName(f) {
			return fmt.Sprintf("field name %d %q is not an identifier", i, f)
		}
		if j, dup := seen[f]; dup {
			return fmt.Sprintf("field name %q given twice (entries %d and %d)", f, j, i)
		}
		seen[f] = i
	}
	return ""
}

// checkKind says why a probe's kind does not go with its location and
// keywords (docs/language.md, "Probe kinds"), or "".
func checkKind(pr *Probe, h *Header) string {
	switch {
	case pr.Kind > ProbeUSDT:
		return fmt.Sprintf("unknown probe kind %d", pr.Kind)
	case pr.Loc.Kind > LocUSDT:
		return fmt.Sprintf("unknown location kind %d", pr.Loc.Kind)
	case (pr.Kind == ProbeUSDT) != (pr.Loc.Kind == LocUSDT):
		return fmt.Sprintf("%s with %s location: a usdt location goes with a usdt probe, and only there", pr.Kind.Phrase(), article(pr.Loc.Kind.String()))
	case (pr.Kind == ProbeTracepoint) != (pr.Loc.Kind == LocTracepoint):
		return fmt.Sprintf("%s with %s location: a tracepoint location goes with a tracepoint probe, and only there", pr.Kind.Phrase(), article(pr.Loc.Kind.String()))
	case pr.Kind == ProbeRetprobe && pr.Loc.Kind == LocLine:
		return "retprobe on a source line: it goes on a function"
	case pr.Kind == ProbeWatch && pr.Loc.Kind == LocLine:
		return "watch probe on a source line: it watches an address"
	case pr.Kind != ProbeWatch && (pr.WatchLen != 0 || pr.WatchMode != 0):
		return fmt.Sprintf("watch length %d and mode %d on %s: only a watch probe has them", pr.WatchLen, pr.WatchMode, pr.Kind.Phrase())
	case pr.Kind == ProbeWatch && pr.WatchLen != 1 && pr.WatchLen != 2 && pr.WatchLen != 4 && pr.WatchLen != 8:
		return fmt.Sprintf("watch length %d: must be 1, 2, 4 or 8", pr.WatchLen)
	case pr.Kind == ProbeWatch && pr.WatchLen == 8 && h.Arch == ArchI386:
		return "watch length 8 on i386: a debug register there watches 1, 2 or 4 bytes"
	case pr.Kind == ProbeWatch && pr.WatchMode != WatchWrite && pr.WatchMode != WatchReadWrite:
		return fmt.Sprintf("watch mode %d: must be w (%d) or rw (%d)", pr.WatchMode, WatchWrite, WatchReadWrite)
	case pr.Kind == ProbeWatch && pr.Loc.Kind == LocAbsolute && pr.Loc.Addr%uint64(pr.WatchLen) != 0:
		return fmt.Sprintf("watch address %#x is not a multiple of its length %d", pr.Loc.Addr, pr.WatchLen)
	case pr.MaxActive != 0 && pr.Kind != ProbeRetprobe:
		return fmt.Sprintf("maxactive %d on %s: only a retprobe has one", pr.MaxActive, pr.Kind.Phrase())
	case pr.MaxActive > MaxMaxActive:
		return fmt.Sprintf("maxactive %d outside 1..%d", pr.MaxActive, MaxMaxActive)
	case pr.HasOpcode && pr.Kind != ProbeOffset:
		return fmt.Sprintf("opcode check on %s: only an offset probe has one", pr.Kind.Phrase())
	case pr.Kind == ProbeUSDT && h.ModType != ModUser:
		return "usdt probe in a kernel module: user static probes are in user programs and libraries"
	case pr.Kind == ProbeUSDT:
		if _, msg := CheckTracepoint(pr.Loc.Text); msg != "" {
			return fmt.Sprintf("usdt %q: %s", pr.Loc.Text, USDTWords(msg))
		}
	case pr.LogOnFault && pr.Kind == ProbeTracepoint:
		return "logonfault on a tracepoint probe: no probed instruction runs after its program"
	case pr.LogOnFault && pr.Kind == ProbeWatch:
		return "logonfault on a watch probe: its program runs after the accessing instruction"
	case pr.AutoStack && h.Arch != ArchX86_64:
		return "autostacktrace on " + h.Arch.String() + ": stacks are unwound on x86_64 only"
	case pr.Kind == ProbeTracepoint && h.ModType != ModKernel:
		return "tracepoint probe in a user module"
	case pr.Kind == ProbeTracepoint:
		if _, msg := CheckTracepoint(pr.Loc.Text); msg != "" {
			return fmt.Sprintf("tracepoint %q: %s", pr.Loc.Text, msg)
		}
	}
	return ""
}

// article puts "a" or "an" before a word.
func article(w string) string {
	if w != "" && strings.IndexByte("aeiou", w[0]) >= 0 {
		return "an " + w
	}
	return "a " + w
}

type verifier struct {
	m *Module
	p *Program
	// byte offsets of every push d immediate, for relocation checks
	pushImm map[uint32]bool
}

func (v *verifier) fail(probe int, pc uint32, format string, args ...any) error {
	return &VerifyError{Probe: probe, PC: pc, Msg: fmt.Sprintf(format, args...), m: v.m}
}

func (v *verifier) probe(pi int) error {
	m := v.m
	pr := &m.Probes[pi]
	if pr.Entry >= pr.End || pr.End > uint32(len(m.Code)) {
		return v.fail(pi, pr.Entry, "program range %#x..%#x outside the code (%d bytes)", pr.Entry, pr.End, len(m.Code))
	}
	if msg := checkKind(pr, &m.Header); msg != "" {
		return v.fail(pi, pr.Entry, "%s", msg)
	}
	if len(m.Files) > 0 && int(pr.Pos.File) >= len(m.Files) {
		return v.fail(pi, pr.Entry, "source file index %d out of range", pr.Pos.File)
	}
	p := v.p
	first := uint32(len(p.code))
	p.entry = append(p.entry, first)
	index := map[uint32]uint32{} // byte offset -> instruction index
	var last Opcode
	for pc := pr.Entry; pc < pr.End; {
		op := Opcode(m.Code[pc])
		n := op.Len()
		if n == 0 {
			return v.fail(pi, pc, "unknown opcode %#02x", uint8(op))
		}
		if pc+uint32(n) > pr.End {
			return v.fail(pi, pc, "%s: operands run past the end of the program", op)
		}
		in, err := v.decode(pi, pc, m.Code[pc:pc+uint32(n)])
		if err != nil {
			return err
		}
		index[pc] = uint32(len(p.code))
		p.code = append(p.code, in)
		p.pcs = append(p.pcs, pc)
		last = op
		pc += uint32(n)
	}
	if !last.ends() {
		return v.fail(pi, p.pcs[len(p.pcs)-1], "the program can run off its end: it must end with exit, abort, rem, ret or jmp")
	}
	// jump targets: inside this probe, on an instruction boundary
	for i := first; i < uint32(len(p.code)); i++ {
		in := &p.code[i]
		if !in.op.IsJump() {
			continue
		}
		t, ok := index[in.c]
		if !ok {
			if in.c < pr.Entry || in.c >= pr.End {
				return v.fail(pi, p.pcs[i], "%s target %#x is outside this probe's program (%#x..%#x)", in.op, in.c, pr.Entry, pr.End)
			}
			return v.fail(pi, p.pcs[i], "%s target %#x is in the middle of an instruction", in.op, in.c)
		}
		in.c = t
	}
	p.end = append(p.end, uint32(len(p.code)))
	return v.callDepth(pi, first)
}

// decode checks one instruction's operands and returns its decoded form.
func (v *verifier) decode(pi int, pc uint32, b []byte) (insn, error) {
	h := &v.m.Header
	op := Opcode(b[0])
	in := insn{op: op}
	switch opTable[op].format {
	case fmtTarget:
		in.c = binary.LittleEndian.Uint32(b[1:])
	case fmtU8:
		in.a = b[1]
	case fmtU16:
		in.b = binary.LittleEndian.Uint16(b[1:])
	case fmtU16U16:
		in.b = binary.LittleEndian.Uint16(b[1:])
		in.c = uint32(binary.LittleEndian.Uint16(b[3:]))
	case fmtU64:
		in.imm = binary.LittleEndian.Uint64(b[1:])
		if v.pushImm == nil {
			v.pushImm = map[uint32]bool{}
		}
		v.pushImm[pc+1] = true
	}
	bad := func(format string, args ...any) (insn, error) {
		return insn{}, v.fail(pi, pc, format, args...)
	}
	word := uint8(h.Arch.WordSize())
	switch op {
	case OpExit:
		if in.a > MaxFacility {
			return bad("exit facility %d outside 0..%d", in.a, MaxFacility)
		}
	case OpLogN, OpRos:
		if in.a < 1 || in.a > StackSize {
			return bad("%s count %d outside 1..%d", op, in.a, StackSize)
		}
	case OpLogLV, OpLogGV:
		n := h.Vars
		if op == OpLogGV {
			n = h.GVars
		}
		if in.c < 1 || uint32(in.b)+in.c > uint32(n) {
			return bad("%s,%d,%d reaches past the %d variables", op, in.b, in.c, n)
		}
	case OpPushLVI, OpPopLVI, OpMoveLVI, OpIncLVI, OpDecLVI:
		if in.b >= h.Vars {
			return bad("%s,%d: index outside vars = %d", op, in.b, h.Vars)
		}
	case OpPushGVI, OpPopGVI, OpMoveGVI, OpIncGVI, OpDecGVI:
		if in.b >= h.GVars {
			return bad("%s,%d: index outside gvars = %d", op, in.b, h.GVars)
		}
	case OpPushLV, OpPopLV, OpMoveLV, OpIncLV, OpDecLV:
		if h.Vars == 0 {
			return bad("%s: the module declares no vars", op)
		}
	case OpPushGV, OpPopGV, OpMoveGV, OpIncGV, OpDecGV:
		if h.GVars == 0 {
			return bad("%s: the module declares no gvars", op)
		}
	case OpShlI, OpShrI, OpSarI, OpRolI, OpRorI:
		if in.a >= word*8 {
			return bad("%s count %d: must be below the word width %d", op, in.a, word*8)
		}
	case OpPushR, OpPopR, OpPushU, OpPopU:
		user := op == OpPushU || op == OpPopU
		if user && h.ModType != ModKernel {
			return bad("%s in a user module: use push r", op)
		}
		if msg := CheckReg(Reg(in.b), *h, op == OpPopR || op == OpPopU, user); msg != "" {
			return bad("%s", msg)
		}
	case OpPushD:
		if h.Arch == ArchI386 && in.imm > 0xffffffff {
			return bad("push d %#x does not fit a 32-bit word", in.imm)
		}
	case OpPushMrf, OpPopMrf:
		if msg := CheckSize(in.a, h.Arch, false); msg != "" {
			return bad("%s", msg)
		}
	case OpPushIO, OpPopIO:
		if msg := CheckSize(in.a, h.Arch, true); msg != "" {
			return bad("%s", msg)
		}
	case OpPushTask:
		if h.ModType != ModKernel {
			return bad("push task in a user module")
		}
	case OpPushField:
		if k := v.m.Probes[pi].Kind; k != ProbeTracepoint {
			return bad("push field in %s: only a tracepoint probe has an event to read", k.Phrase())
		}
		if int(in.b) >= len(v.m.Fields) {
			return bad("push field %d: the module has %d field names", in.b, len(v.m.Fields))
		}
	case OpPushArg:
		if k := v.m.Probes[pi].Kind; k != ProbeUSDT {
			return bad("push arg in %s: only a usdt probe has arguments its note describes", k.Phrase())
		}
		if in.a < 1 || in.a > MaxUSDTArgs {
			return bad("push arg,%d: argument outside 1..%d", in.a, MaxUSDTArgs)
		}
	case OpLogUStack, OpLogKStack:
		if in.a < 1 || in.a > MaxStackFrames {
			return bad("%s,%d: frames outside 1..%d", op, in.a, MaxStackFrames)
		}
		if h.Arch != ArchX86_64 {
			return bad("%s: stacks are unwound on x86_64 only", op)
		}
	case OpPushIV, OpPopIV:
		if in.a >= MaxIV {
			return bad("%s,%d: index outside 0..%d", op, in.a, MaxIV-1)
		}
		if k := v.m.Probes[pi].Kind; k == ProbeTracepoint || k == ProbeWatch {
			return bad("%s in %s: only a probe in a call (an offset probe, a retprobe) has instance variables", op, k.Phrase())
		}
	}
	return in, nil
}

// callDepth proves the static call depth of a probe's program is within
// MaxCallDepth when its call graph has no cycle; with recursion the depth
// is checked at run time.
func (v *verifier) callDepth(pi int, first uint32) error {
	p := v.p
	end := uint32(len(p.code))
	// calls made by the routine starting at start (following jumps, not calls)
	calls := func(start uint32) []uint32 {
		seen := map[uint32]bool{}
		var out []uint32
		work := []uint32{start}
		for len(work) > 0 {
			i := work[len(work)-1]
			work = work[:len(work)-1]
			for i < end && !seen[i] {
				seen[i] = true
				in := p.code[i]
				if in.op == OpCall {
					out = append(out, in.c)
				} else if in.op.IsJump() {
					work = append(work, in.c)
					if in.op == OpJmp {
						break
					}
				}
				if in.op.ends() {
					break
				}
				i++
			}
		}
		return out
	}
	const (
		unvisited = iota
		active
		done
	)
	state := map[uint32]int{}
	depth := map[uint32]int{}
	cyclic := false
	// visit computes the depth of the routine at r with an explicit stack,
	// depth first: a chain of calls as long as the program is refused by
	// the depth check, not by a Go stack overflow on the way.
	visit := func(r uint32) int {
		type frame struct {
			r       uint32
			callees []uint32
			next    int
			d       int
		}
		state[r] = active
		stack := []frame{{r: r, callees: calls(r)}}
		for {
			f := &stack[len(stack)-1]
			if f.next < len(f.callees) {
				callee := f.callees[f.next]
				f.next++
				switch state[callee] {
				case active:
					cyclic = true // depth 0 through the cycle
					f.d = max(f.d, 1)
				case done:
					f.d = max(f.d, depth[callee]+1)
				default:
					state[callee] = active
					stack = append(stack, frame{r: callee, callees: calls(callee)})
				}
				continue
			}
			state[f.r], depth[f.r] = done, f.d
			d := f.d
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return d
			}
			parent := &stack[len(stack)-1]
			parent.d = max(parent.d, d+1)
		}
	}
	d := visit(first)
	if !cyclic && d > MaxCallDepth {
		return v.fail(pi, p.pcs[first], "calls nest %d deep: at most %d", d, MaxCallDepth)
	}
	return nil
}

func (v *verifier) relocs() error {
	prev := int64(-1)
	for _, r := range v.m.Relocs {
		if int64(r.Off) <= prev {
			return &VerifyError{Probe: -1, Msg: fmt.Sprintf("relocations not sorted at %#x", r.Off), m: v.m}
		}
		prev = int64(r.Off)
		if !v.pushImm[r.Off] {
			return &VerifyError{Probe: -1, Msg: fmt.Sprintf("relocation at %#x (%s) does not point at a push d immediate", r.Off, escape.String(r.Expr)), m: v.m}
		}
	}
	return nil
}

func (v *verifier) lines() error {
	prev := uint32(0)
	for i, l := range v.m.Lines {
		if (i > 0 && l.PC < prev) || int(l.PC) > len(v.m.Code) {
			return &VerifyError{Probe: -1, Msg: fmt.Sprintf("line table entry %d (pc %#x) out of order or outside the code", i, l.PC), m: v.m}
		}
		if len(v.m.Files) > 0 && int(l.Pos.File) >= len(v.m.Files) {
			return &VerifyError{Probe: -1, Msg: fmt.Sprintf("line table entry %d names file %d of %d", i, l.Pos.File, len(v.m.Files)), m: v.m}
		}
		prev = l.PC
	}
	return nil
}

// Listing returns the disassembly of a probe's program.
func (p *Program) Listing(probe int) string {
	var b strings.Builder
	pr := p.m.Probes[probe]
	disasmRange(&b, p.m, pr.Entry, pr.End, ^uint32(0))
	return b.String()
}

// SwitchConflict finds two probes of one minor that differ in Disabled
// (enabled = no): the first probe of that minor, i, and the first that
// differs from it, j. A switch belongs to a minor of a module (enable
// MINOR, disable MINOR and gprobes enable --minor switch every probe of
// it), so the probes of a minor start in one state; a merge replaces
// the probes of a minor all at once, so a module's probes of one minor
// always come from one file.
func SwitchConflict(probes []Probe) (i, j int, ok bool) {
	first := map[uint16]int{}
	for k := range probes {
		f, seen := first[probes[k].Minor]
		if !seen {
			first[probes[k].Minor] = k
			continue
		}
		if probes[f].Disabled != probes[k].Disabled {
			return f, k, true
		}
	}
	return 0, 0, false
}
