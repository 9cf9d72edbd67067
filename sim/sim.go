// Package sim runs probe programs off-line, against registers, memory and
// system values given by the user or read from an ELF core file. It is how
// users test a probe program before they ship it, and how the RPN machine
// is tested: the machine is the same one the engine runs on every hit.
//
// The trap: memory the user did not give faults, as an unmapped address
// would on a real target, so a program that reads through a pointer needs
// that memory supplied (--mem or --core).
package sim

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/gprobes/gprobes/probe"
	"github.com/gprobes/gprobes/rpn"
	"github.com/gprobes/gprobes/unwind"
)

// Env is a simulated target: registers, memory regions, system values and
// an optional IO space. Memory regions are readable and writable; every
// other address faults. Every hit is in one call, whose instance variables
// (push iv, pop iv) start at zero unless SetIV gives them. enable and
// disable are recorded (Switched), and succeed: the simulator runs one
// probe, and what a switch does to it is Run's to apply.
type Env struct {
	regs     [rpn.NumRegs]uint64
	haveReg  [rpn.NumRegs]bool
	mem      []region // sorted by address, non-overlapping
	sys      [5]uint64
	haveSys  [5]bool
	io       map[uint64]uint64
	fields   map[string]uint64 // the tracepoint event's fields, for push field
	iv       [rpn.MaxIV]uint64 // the call's instance variables
	switched []Switch          // enable and disable, in order, since the last TakeSwitched
	files    unwind.Modules    // the files mapped, from a core's NT_FILE note
	unw      *unwind.Unwinder
	stacks   []simStack // the stacks logged in the hit running
}

// simStack is a stack a hit logged, for its record's names.
type simStack struct {
	pcs   []uint64
	exact uint64
}

// Switch is one enable (On) or disable of a minor, as a program ran it.
type Switch struct {
	Minor uint16
	On    bool
}

func (s Switch) String() string {
	if s.On {
		return fmt.Sprintf("enable %d", s.Minor)
	}
	return fmt.Sprintf("disable %d", s.Minor)
}

type region struct {
	addr uint64
	data []byte
}

var (
	_ rpn.Env      = (*Env)(nil)
	_ rpn.FieldEnv = (*Env)(nil)
	_ rpn.Switcher = (*Env)(nil)
	_ rpn.IVEnv    = (*Env)(nil)
	_ rpn.StackEnv = (*Env)(nil)
)

// Stack unwinds the user stack from the registers and memory given, with
// the CFI of the files a core maps (its NT_FILE note), or the
// frame-pointer chain through the memory given where there are none. A
// kernel stack is not simulated: invalid-operand.
func (e *Env) Stack(kernel bool, pcs []uint64) (int, bool) {
	if kernel {
		return 0, false
	}
	if e.unw == nil {
		e.unw = unwind.New()
	}
	var regs unwind.Regs
	for i, r := range []rpn.Reg{rpn.RegRAX, rpn.RegRDX, rpn.RegRCX, rpn.RegRBX, rpn.RegRSI, rpn.RegRDI, rpn.RegRBP, rpn.RegRSP,
		rpn.RegR8, rpn.RegR9, rpn.RegR10, rpn.RegR11, rpn.RegR12, rpn.RegR13, rpn.RegR14, rpn.RegR15, rpn.RegRIP} {
		regs[i] = e.regs[r]
	}
	n, _, exact := e.unw.Unwind(regs, e.ReadMem, e.files, pcs)
	e.stacks = append(e.stacks, simStack{pcs: append([]uint64(nil), pcs[:n]...), exact: exact})
	return n, true
}

// takeStacks names the stacks of the hit that ran and forgets them.
func (e *Env) takeStacks() []probe.Stack {
	var out []probe.Stack
	for _, st := range e.stacks {
		ps := probe.Stack{Kind: "user", Frames: []probe.Frame{}}
		for _, f := range e.unw.Name(st.pcs, st.exact, e.files) {
			ps.Frames = append(ps.Frames, probe.Frame{Address: probe.Hex(f.PC), Function: f.Function, Offset: f.Offset, Module: f.Module})
		}
		out = append(out, ps)
	}
	e.stacks = nil
	return out
}

// NewEnv returns an environment where every register reads 0, no memory
// exists, pid, tid, procid and ts read 0 and the current task is unknown.
func NewEnv() *Env {
	e := &Env{}
	for i := range e.haveReg {
		e.haveReg[i] = true
	}
	for _, v := range []rpn.SysValue{rpn.SysPID, rpn.SysTID, rpn.SysProcID, rpn.SysTS} {
		e.haveSys[v] = true
	}
	return e
}

// SetRegByName sets a register by name; a 32-bit name sets the low half and
// clears the high half, as x86_64 does.
func (e *Env) SetRegByName(arch rpn.Arch, name string, v uint64) error {
	r, ok := rpn.LookupReg(rpn.ArchX86_64, name)
	if !ok {
		r, ok = rpn.LookupReg(arch, name)
	}
	if !ok {
		return fmt.Errorf("unknown register %q", name)
	}
	if r.Is32() {
		v &= 0xffffffff
	}
	e.regs[r.Canonical()] = v
	return nil
}

// SetSys sets a system value (pid, tid, procid, task, ts).
func (e *Env) SetSys(s rpn.SysValue, v uint64) {
	e.sys[s], e.haveSys[s] = v, true
}

// AddMem makes len(data) bytes at addr exist, readable and writable. A
// region overlapping an earlier one replaces the overlapped bytes.
func (e *Env) AddMem(addr uint64, data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("memory at %#x: no bytes", addr)
	}
	if addr+uint64(len(data))-1 < addr {
		return fmt.Errorf("memory at %#x: %d bytes wrap past the end of the address space", addr, len(data))
	}
	// split existing regions around the new one
	var out []region
	end := addr + uint64(len(data))
	for _, r := range e.mem {
		rend := r.addr + uint64(len(r.data))
		if rend <= addr || r.addr >= end {
			out = append(out, r)
			continue
		}
		if r.addr < addr {
			out = append(out, region{r.addr, r.data[:addr-r.addr]})
		}
		if rend > end {
			out = append(out, region{end, r.data[end-r.addr:]})
		}
	}
	out = append(out, region{addr, append([]byte(nil), data...)})
	sort.Slice(out, func(i, j int) bool { return out[i].addr < out[j].addr })
	e.mem = out
	return nil
}

// AddIO makes a port exist with an initial value.
func (e *Env) AddIO(port, v uint64) {
	if e.io == nil {
		e.io = map[uint64]uint64{}
	}
	e.io[port] = v
}

// SetField gives a field of the simulated tracepoint event, for push
// field: an integer field's value, or the address of an array or string
// field (give its bytes with AddMem). A field not given is an
// invalid-operand exception, as an unknown field is on a target.
func (e *Env) SetField(name string, v uint64) {
	if e.fields == nil {
		e.fields = map[string]uint64{}
	}
	e.fields[name] = v
}

// Field answers push field (rpn.FieldEnv).
func (e *Env) Field(name string) (uint64, bool) {
	v, ok := e.fields[name]
	return v, ok
}

// SetIV sets instance variable i of the simulated call.
func (e *Env) SetIV(i int, v uint64) error {
	if i < 0 || i >= rpn.MaxIV {
		return fmt.Errorf("iv %d: instance variables are 0..%d", i, rpn.MaxIV-1)
	}
	e.iv[i] = v
	return nil
}

// IVs returns the instance variables of the simulated call.
func (e *Env) IVs() [rpn.MaxIV]uint64 { return e.iv }

// IV answers push iv and pop iv (rpn.IVEnv): the simulated call's words.
func (e *Env) IV() *[rpn.MaxIV]uint64 { return &e.iv }

// Switch records an enable or disable (rpn.Switcher).
func (e *Env) Switch(minor uint16, on bool) bool {
	e.switched = append(e.switched, Switch{Minor: minor, On: on})
	return true
}

// TakeSwitched returns the switches recorded since the last call, and
// forgets them.
func (e *Env) TakeSwitched() []Switch {
	s := e.switched
	e.switched = nil
	return s
}

// HasIO reports whether any IO port was given.
func (e *Env) HasIO() bool { return e.io != nil }

// find returns the bytes of [addr, addr+n) when one region holds them all
// or consecutive regions do.
func (e *Env) span(addr uint64, n int, f func(r []byte, off int)) bool {
	off := 0
	for off < n {
		a := addr + uint64(off)
		i := sort.Search(len(e.mem), func(i int) bool { return e.mem[i].addr+uint64(len(e.mem[i].data)) > a })
		if i == len(e.mem) || e.mem[i].addr > a {
			return false
		}
		r := e.mem[i]
		chunk := r.data[a-r.addr:]
		if len(chunk) > n-off {
			chunk = chunk[:n-off]
		}
		f(chunk, off)
		off += len(chunk)
	}
	return true
}

func (e *Env) Reg(r rpn.Reg, user bool) (uint64, bool) {
	if r >= rpn.NumRegs || !e.haveReg[r] {
		return 0, false
	}
	return e.regs[r], true
}

func (e *Env) SetReg(r rpn.Reg, user bool, v uint64) bool {
	if r >= rpn.NumRegs {
		return false
	}
	e.regs[r] = v
	return true
}

func (e *Env) ReadMem(addr uint64, p []byte) bool {
	if !e.span(addr, len(p), func(r []byte, off int) {}) {
		return false
	}
	return e.span(addr, len(p), func(r []byte, off int) { copy(p[off:], r) })
}

func (e *Env) WriteMem(addr uint64, p []byte) bool {
	if !e.span(addr, len(p), func(r []byte, off int) {}) {
		return false
	}
	return e.span(addr, len(p), func(r []byte, off int) { copy(r, p[off:]) })
}

func (e *Env) Access(addr uint64, write bool) bool {
	return e.span(addr, 1, func([]byte, int) {})
}

func (e *Env) Sys(v rpn.SysValue) (uint64, bool) {
	if int(v) >= len(e.sys) || !e.haveSys[v] {
		return 0, false
	}
	return e.sys[v], true
}

func (e *Env) IO(port uint64, size uint8, write bool, v uint64) (uint64, bool) {
	if _, ok := e.io[port]; !ok {
		return 0, false
	}
	mask := uint64(1)<<(8*uint(size)) - 1
	if write {
		e.io[port] = v & mask
		return 0, true
	}
	return e.io[port] & mask, true
}

// Hit is the JSON form of one hit's result. Outcome "off" is a hit after
// the probe switched itself off (disable of its own minor): a target would
// not run it, nor count it.
type Hit struct {
	Outcome   string `json:"outcome"`
	Exit      uint8  `json:"exit"`
	Exception string `json:"exception"`
	Major     uint16 `json:"major"`
	Minor     uint16 `json:"minor"`
	Log       string `json:"log"`
	Truncated bool   `json:"truncated"`
	// Switches are the enable and disable the hit ran, in order ("enable
	// 3", "disable 4"); absent when none.
	Switches []string `json:"switches,omitempty"`
	// Stacks are the stacks the hit logged (log ustack), named from the
	// core's files; absent when none.
	Stacks []probe.Stack `json:"stacks,omitempty"`

	result   rpn.Result
	log      []byte
	switched []Switch
}

// Report is the outcome of a simulation: the JSON object printed by
// "gprobes sim --json".
type Report struct {
	Hits     []Hit    `json:"hits"`
	LV       []string `json:"lv"`
	GV       []string `json:"gv"`
	Disabled bool     `json:"disabled"`
	// IV are the call's instance variables after the last hit, when the
	// probe's program uses them or Options.IV gave some; absent otherwise.
	IV []string `json:"iv,omitempty"`

	prog  *rpn.Program
	probe int
	state rpn.ProbeState
	off   *Switch // the switch that turned the probe off, if one did
}

// Options are the inputs of a simulation besides the environment.
type Options struct {
	Probe int               // 0-based index of the probe in file order
	Hits  int               // times to run it, against the same state
	LV    map[uint64]uint64 // initial local variables
	GV    map[uint64]uint64 // initial global variables
	IV    map[uint64]uint64 // initial instance variables of the call
}

// Run runs one probe of p opts.Hits times against env.
func Run(p *rpn.Program, env *Env, opts Options) (*Report, error) {
	m := p.Module()
	if opts.Probe < 0 || opts.Probe >= p.NumProbes() {
		return nil, fmt.Errorf("probe %d does not exist: the module has %d probes (0..%d)", opts.Probe, p.NumProbes(), p.NumProbes()-1)
	}
	for _, r := range m.Relocs {
		if !r.Resolved {
			return nil, fmt.Errorf("push d,%s needs symbols to run: pass --symbols FILE", r.Expr)
		}
	}
	if opts.Hits < 1 {
		opts.Hits = 1
	}
	if !env.HasIO() {
		if pc, ok := usesIO(m, opts.Probe); ok {
			where := ""
			if pos, found := m.LineFor(pc); found {
				where = " at " + m.PosString(pos)
			}
			return nil, fmt.Errorf("the probe uses port IO%s and the simulator has no IO space: give the ports it reads with --io PORT=VALUE", where)
		}
	}
	lv := make([]uint64, m.Vars)
	gv := make([]uint64, m.GVars)
	for i, v := range opts.LV {
		if i >= uint64(len(lv)) {
			return nil, fmt.Errorf("--lv %d: the module has %d local variables (vars = %d)", i, len(lv), m.Vars)
		}
		lv[i] = v
	}
	for i, v := range opts.GV {
		if i >= uint64(len(gv)) {
			return nil, fmt.Errorf("--gv %d: the module uses %d global variables (gvars = %d)", i, len(gv), m.GVars)
		}
		gv[i] = v
	}
	pr := &m.Probes[opts.Probe]
	usesIV := uses(m, opts.Probe, rpn.OpPushIV, rpn.OpPopIV)
	if len(opts.IV) > 0 && (pr.Kind == rpn.ProbeTracepoint || pr.Kind == rpn.ProbeWatch) {
		return nil, fmt.Errorf("--iv: probe %d is a %s probe, which runs in no call of a function and so has no instance variables", opts.Probe, pr.Kind)
	}
	for i, v := range opts.IV {
		if i >= rpn.MaxIV {
			return nil, fmt.Errorf("--iv %d: instance variables are 0..%d", i, rpn.MaxIV-1)
		}
		env.iv[i] = v
	}
	env.TakeSwitched()
	rep := &Report{prog: p, probe: opts.Probe, Hits: []Hit{}}
	var mach rpn.Machine
	for i := 0; i < opts.Hits; i++ {
		if rep.off != nil {
			// switched off by an earlier hit: a target would not
			// run the probe, nor count the hit
			rep.Hits = append(rep.Hits, Hit{Outcome: "off", Minor: pr.Minor, Major: m.Major, result: rpn.Result{Outcome: rpn.OutcomeSkipped}})
			continue
		}
		r := mach.Run(p, opts.Probe, &rep.state, lv, gv, env)
		h := Hit{Outcome: r.Outcome.String(), Exception: r.Exception.String(), Major: r.Major, Minor: r.Minor,
			Truncated: r.Truncated, result: *r}
		if r.Outcome == rpn.OutcomeExit || r.Outcome == rpn.OutcomeRem {
			h.Exit = r.Exit
		}
		if r.Commits() {
			h.log = append([]byte{}, r.Log...)
			h.Log = hex.EncodeToString(h.log)
			h.Stacks = env.takeStacks()
		}
		env.stacks = nil
		if r.Outcome == rpn.OutcomeException && pr.AutoStack && m.ModType == rpn.ModUser {
			// autostacktrace = yes: the exception record's stack, as
			// log ustack takes it (a kernel stack is not simulated:
			// writeHit says so)
			env.Stack(false, make([]uint64, rpn.DefaultStackFrames))
			h.Stacks = env.takeStacks()
		}
		h.switched = env.TakeSwitched()
		for _, s := range h.switched {
			h.Switches = append(h.Switches, s.String())
			if s.Minor == pr.Minor {
				// its own minor: for the later hits
				if s.On {
					rep.off = nil
				} else {
					rep.off = &s
				}
			}
		}
		rep.Hits = append(rep.Hits, h)
	}
	rep.LV = decimal(lv)
	rep.GV = decimal(gv)
	rep.Disabled = rep.state.Disabled
	if usesIV || len(opts.IV) > 0 {
		ivs := env.IVs()
		rep.IV = decimal(ivs[:])
	}
	return rep, nil
}

// uses reports whether a probe's program has any of ops.
func uses(m *rpn.Module, probe int, ops ...rpn.Opcode) bool {
	p := m.Probes[probe]
	for pc := p.Entry; pc < p.End; {
		op := rpn.Opcode(m.Code[pc])
		for _, o := range ops {
			if op == o {
				return true
			}
		}
		n := op.Len()
		if n == 0 {
			break
		}
		pc += uint32(n)
	}
	return false
}

// usesIO finds a port IO instruction in a probe's program.
func usesIO(m *rpn.Module, probe int) (uint32, bool) {
	p := m.Probes[probe]
	for pc := p.Entry; pc < p.End; {
		op := rpn.Opcode(m.Code[pc])
		if op == rpn.OpPushIO || op == rpn.OpPopIO {
			return pc, true
		}
		n := op.Len()
		if n == 0 {
			break
		}
		pc += uint32(n)
	}
	return 0, false
}

func decimal(v []uint64) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = strconv.FormatUint(x, 10)
	}
	return out
}

// WriteJSON prints the report as exactly one JSON object and a newline.
func (r *Report) WriteJSON(w io.Writer) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// WriteText prints the report for a person: each hit, its log as a hex
// dump, the variables and the probe's state.
func (r *Report) WriteText(w io.Writer) {
	m := r.prog.Module()
	pr := m.Probes[r.probe]
	loc := pr.Loc.Text
	if pr.Kind == rpn.ProbeWatch {
		loc += fmt.Sprintf(",%d,%s", pr.WatchLen, pr.WatchMode)
	}
	fmt.Fprintf(w, "probe %d: %s = %s (minor %d", r.probe, pr.Kind, loc, pr.Minor)
	if pr.Disabled {
		fmt.Fprintf(w, "; enabled = no, simulated as switched on")
	}
	fmt.Fprintf(w, ")\n")
	var off string // the switch that turned the probe off
	noted := false
	for i, h := range r.Hits {
		fmt.Fprintf(w, "hit %d: ", i+1)
		if h.Outcome == "off" {
			fmt.Fprintf(w, "not run: the probe switched itself off (%s)\n", off)
			continue
		}
		r.writeHit(w, m, h)
		if len(h.Switches) > 0 {
			fmt.Fprintf(w, "    switched: %s", strings.Join(h.Switches, ", "))
			for _, s := range h.switched {
				if s.Minor == pr.Minor {
					off = fmt.Sprintf("%s in hit %d", s, i+1)
				}
			}
			if off != "" && i+1 < len(r.Hits) && r.Hits[i+1].Outcome == "off" {
				fmt.Fprintf(w, " (this probe's minor: its later hits do not run)")
			}
			if !noted {
				// said once
				fmt.Fprintf(w, "; the simulator runs this probe alone, a target switches every probe of the module with the minor")
				noted = true
			}
			fmt.Fprintln(w)
		}
	}
	if len(r.LV) > 0 {
		fmt.Fprintf(w, "lv: %s\n", strings.Join(r.LV, " "))
	}
	if len(r.GV) > 0 {
		fmt.Fprintf(w, "gv: %s\n", strings.Join(r.GV, " "))
	}
	if len(r.IV) > 0 {
		fmt.Fprintf(w, "iv: %s\n", strings.Join(r.IV, " "))
	}
	st := r.state
	state := "enabled"
	switch {
	case st.Disabled:
		state = "disabled"
	case r.off != nil:
		state = "switched off"
	}
	fmt.Fprintf(w, "probe %s: %d hits, %d skipped, %d runs, %d faults\n", state, st.Hits, st.Skipped, st.Runs, st.Faults)
}

// writeHit prints one hit that ran: its outcome, and the record it
// commits with its log as a hex dump.
func (r *Report) writeHit(w io.Writer, m *rpn.Module, h Hit) {
	res := h.result
	switch res.Outcome {
	case rpn.OutcomeSkipped:
		fmt.Fprintf(w, "skipped (pass count or probe disabled)\n")
		return
	case rpn.OutcomeException:
		fmt.Fprintf(w, "exception %s at pc %#04x", res.Exception, res.PC)
		if pos, ok := m.LineFor(res.PC); ok {
			fmt.Fprintf(w, " (%s)", m.PosString(pos))
		}
		if res.Exception == rpn.ExInvalidAddress {
			fmt.Fprintf(w, ", address %#x", res.Addr)
		}
		fmt.Fprintf(w, ": nothing committed\n")
		if r.probe < len(m.Probes) && m.Probes[r.probe].AutoStack && m.ModType == rpn.ModKernel {
			fmt.Fprintf(w, "    autostacktrace: a kernel stack is not simulated; the exception record of a live kernel would carry one\n")
		}
		writeStacks(w, h.Stacks)
		return
	case rpn.OutcomeAbort:
		fmt.Fprintf(w, "abort: nothing committed\n")
		return
	case rpn.OutcomeRem:
		fmt.Fprintf(w, "rem: probe disabled")
	case rpn.OutcomeExit:
		fmt.Fprintf(w, "exit %d", res.Exit)
		switch res.Exit {
		case rpn.ExitNone:
			fmt.Fprintf(w, ": nothing committed\n")
			return
		case rpn.ExitLog:
			fmt.Fprintf(w, " (log stream)")
		case rpn.ExitTrace:
			fmt.Fprintf(w, " (trace event)")
		case rpn.ExitDump:
			fmt.Fprintf(w, " (dump: a live target would be dumped here)")
		case rpn.ExitDebugger:
			fmt.Fprintf(w, " (debugger: a live target would be left stopped here)")
		}
	}
	fmt.Fprintf(w, ", record major %d minor %d, %d bytes", h.Major, h.Minor, len(h.log))
	if h.Truncated {
		fmt.Fprintf(w, " (truncated at logmax %d)", m.LogMax)
	}
	fmt.Fprintln(w)
	if len(h.log) > 0 {
		d := hex.Dump(h.log)
		for _, l := range strings.Split(strings.TrimRight(d, "\n"), "\n") {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
	writeStacks(w, h.Stacks)
}

// writeStacks prints a hit's stacks, a frame a line.
func writeStacks(w io.Writer, stacks []probe.Stack) {
	for i, st := range stacks {
		fmt.Fprintf(w, "    %s:\n", probe.StackName(stacks, i))
		for _, f := range st.Frames {
			fmt.Fprintf(w, "      %s\n", f)
		}
	}
}
