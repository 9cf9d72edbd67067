package rpn

import (
	"encoding/binary"
	"math/bits"
	"sync/atomic"
)

// Env is the machine's only window on the world: the target's registers,
// memory, system values and IO space at the moment of a hit. The engine
// implements it for each target; sim implements it over values given on
// the command line or an ELF core. Methods report false when the thing
// asked for cannot be had (an unmapped address, a register or value the
// target does not provide); the machine turns that into an exception.
//
// Registers are always canonical (RegRAX ... RegCR4); user selects the
// user-mode registers of the current task (push u) in a kernel probe.
type Env interface {
	Reg(r Reg, user bool) (uint64, bool)
	SetReg(r Reg, user bool, v uint64) bool
	ReadMem(addr uint64, p []byte) bool
	WriteMem(addr uint64, p []byte) bool
	// Access reports whether one byte at addr can be read (and, with
	// write, written) without changing it.
	Access(addr uint64, write bool) bool
	Sys(v SysValue) (uint64, bool)
	// IO reads (write false) or writes a port of the given size.
	IO(port uint64, size uint8, write bool, v uint64) (uint64, bool)
}

// FieldEnv is an Env that can answer push field: the value of a field of
// the tracepoint event being handled (an integer by value, an array or a
// string by its address). The machine asks for it by type assertion on the
// Env; an Env without it, or a false answer (no such field, no event), is
// an invalid-operand exception, as for a system value the target lacks.
type FieldEnv interface {
	Field(name string) (uint64, bool)
}

// ArgEnv is an Env that can run push arg,N: Arg is argument n (from 1) of
// the usdt probe hit, as its note describes it; false when it cannot be
// read (an invalid-operand exception). Without it push arg is an
// invalid-operand exception.
type ArgEnv interface {
	Arg(n int) (uint64, bool)
}

// Switcher is an Env that can run enable MINOR and disable MINOR: Switch
// switches on (on true) or off every probe of the running probe's module
// with that minor, the running probe included, for every later hit on
// every thread and vCPU; the hit running now goes on to its end. A minor
// no probe of the module has (a merge may have replaced it) switches
// nothing and is not a failure. The switch is made when the instruction
// runs, as a variable's store is: an abort or exception later in the hit
// does not undo it. It is apart from ProbeState.Disabled (max hits, rem):
// enable does not revive a probe those ended.
//
// Switch reports false when the target cannot switch probes; the machine
// raises invalid-operand then, and for an Env without Switcher: a target
// that runs programs with enable or disable must implement it, and one
// that does not gets an exception record at the instruction rather than
// a switch silently not made.
type Switcher interface {
	Switch(minor uint16, on bool) bool
}

// IVEnv is an Env that gives the instance variables of the call a hit
// belongs to (push iv,I and pop iv,I): the MaxIV words that an offset
// probe at a function's entry and the retprobe of the same call share
// (docs/language.md, "Instance variables"). IV returns that call's words, which the machine reads and
// writes in place during the hit, or nil when the hit belongs to no call.
// The machine asks once per hit, at the first push iv or pop iv. Without
// IVEnv, or for nil, the hit gets MaxIV zero words of its own, dropped
// when it ends: a probe with no call instance reads zeros and its writes
// are lost.
type IVEnv interface {
	IV() *[MaxIV]uint64
}

// StackEnv is an Env that can unwind the stack at a hit (log ustack,N and
// log kstack,N): Stack writes the addresses of the user (kernel false)
// or kernel stack's frames into pcs, innermost first (the hit's address,
// then the return addresses), at most len(pcs), and returns how many.
// ok false (no such stack on this target: a kernel stack in a process, a
// user stack in a kernel thread) raises invalid-operand, as does an Env
// without StackEnv; a stack that cannot be unwound past some frame is
// not a failure, it has fewer frames.
type StackEnv interface {
	Stack(kernel bool, pcs []uint64) (n int, ok bool)
}

// Outcome is how a hit ended.
type Outcome uint8

const (
	OutcomeExit      Outcome = iota // exit N
	OutcomeAbort                    // abort: log discarded
	OutcomeRem                      // rem: log committed, probe disabled
	OutcomeException                // the program faulted: log discarded, exception record instead
	OutcomeSkipped                  // pass count not reached, or probe disabled: nothing ran
)

var outcomeNames = [...]string{"exit", "abort", "rem", "exception", "skipped"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "(invalid)"
}

// Exception is why a program faulted.
type Exception uint8

const (
	ExNone Exception = iota
	ExInvalidAddress
	ExMaxJumps
	ExCallDepth
	ExDivideByZero
	ExInvalidOperand
)

var exceptionNames = [...]string{"", "invalid-address", "max-jumps", "call-depth", "divide-by-zero", "invalid-operand"}

func (e Exception) String() string {
	if int(e) < len(exceptionNames) {
		return exceptionNames[e]
	}
	return "(invalid)"
}

// ProbeState is the run-time state of one probe: its counters and whether
// it is disabled. The machine updates it on every hit; the caller guards
// it (and the variable arrays) against concurrent hits.
type ProbeState struct {
	Hits     uint64 // breakpoint hits, including skipped ones
	Skipped  uint64 // hits that ran nothing: pass count, or probe disabled
	Runs     uint64 // program executions, counted against max hits
	Faults   uint64 // executions that ended in an exception
	Disabled bool   // max hits reached, or rem executed
}

// Result is what one hit produced.
type Result struct {
	Outcome   Outcome
	Exit      uint8 // exit facility; 1 for rem
	Exception Exception
	PC        uint32 // byte offset in Module.Code of the instruction that faulted
	Addr      uint64 // the address that faulted, for invalid-address
	Major     uint16
	Minor     uint16
	// Log holds the bytes to commit: nil when nothing is committed (exit 0,
	// abort, exception, skipped). It aliases the machine's buffer and is
	// valid until the machine runs again.
	Log       []byte
	Truncated bool // the program tried to log more than logmax bytes
}

// Commits reports whether the hit produced a record to commit once the
// probed instruction has executed.
func (r *Result) Commits() bool { return r.Log != nil }

// Machine is the per-CPU (per-thread) state of the RPN machine: the stack,
// the call stack and the temporary log buffer. A Machine runs one hit at a
// time; use one per thread of execution. Its zero value is ready to use.
type Machine struct {
	stack [StackSize]uint64
	calls [MaxCallDepth]uint32
	log   []byte
	chunk [64]byte
	res   Result
	iv    [MaxIV]uint64 // a hit's own instance variables, when its Env has none (IVEnv)
	pcs   [MaxStackFrames]uint64
}

// Run executes probe pi of p for one hit: it applies the probe's pass count
// and max hits from st, runs the program against env with the module's
// local variables lv (len >= Vars) and the global variables gv
// (len >= GVars), and returns the outcome. The Result belongs to the
// machine and is valid until it runs again. Run never panics and never
// allocates once the log buffer has reached the module's logmax.
func (m *Machine) Run(p *Program, pi int, st *ProbeState, lv, gv []uint64, env Env) *Result {
	pr := &p.m.Probes[pi]
	r := &m.res
	st.Hits++
	if st.Disabled || st.Hits <= pr.PassCount {
		st.Skipped++
		*r = Result{Outcome: OutcomeSkipped, Major: p.m.Major, Minor: pr.Minor}
		return r
	}
	st.Runs++
	if pr.MaxHits > 0 && st.Runs >= pr.MaxHits {
		st.Disabled = true
	}
	m.exec(p, pi, lv, gv, env)
	switch r.Outcome {
	case OutcomeRem:
		st.Disabled = true
	case OutcomeException:
		st.Faults++
	}
	return r
}

// exec is the interpreter loop. Its shape, and what BenchmarkVM measured on
// the reference machine (2-core AMD EPYC VM, one CPU pinned; BENCHMARKS.md):
//   - instructions are pre-decoded 16-byte insns, so the loop indexes an
//     array and never decodes operands; the dense switch compiles to a
//     jump table; dispatch is about 1.8 ns per instruction in a loop;
//   - the stack is a fixed array indexed with &31: the circular wrap is the
//     mask, with no branch;
//   - the result is written in place (m.res): returning the 72-byte Result
//     by value through Run cost 8 ns of a 32 ns hit;
//   - clearing the stack at each hit (the specification wants it zeroed)
//     was about 3 ns of the 24 ns the fork/kill probe costs per hit; only
//     the slots the lowering says a hit may read before writing them are
//     cleared now (none in most programs).
func (m *Machine) exec(p *Program, pi int, lv, gv []uint64, env Env) {
	mod := p.m
	pr := &mod.Probes[pi]
	if len(lv) < int(mod.Vars) || len(gv) < int(mod.GVars) {
		m.res = Result{Outcome: OutcomeException, Exception: ExInvalidOperand, PC: pr.Entry, Major: mod.Major, Minor: pr.Minor}
		return
	}
	logmax := int(mod.LogMax)
	if cap(m.log) < logmax {
		m.log = make([]byte, logmax)
	}
	buf := m.log[:logmax]
	s := &m.stack
	// the stack starts zeroed: the slots the hit may read before writing
	// them (the lowering's NeedZero; all of them when the depth of an
	// instruction depends on the path) are cleared, the others are
	// written before any read
	if z := p.lower[pi].Stack.NeedZero; z == ^uint32(0) {
		*s = [StackSize]uint64{}
	} else {
		for ; z != 0; z &= z - 1 {
			s[bits.TrailingZeros32(z)] = 0
		}
	}
	var (
		code      = p.code
		pc        = p.entry[pi]
		tos       uint32 // index of the TOS; entries are all zero, so where it starts does not matter
		mask      = p.mask
		sh        = p.sh
		w         = p.w
		jumps     uint32
		jmpmax    = mod.JmpMax
		depth     uint32
		logn      int
		truncated bool
		major     = mod.Major
		minor     = pr.Minor
		ex        Exception
		faultAddr uint64
		ivs       *[MaxIV]uint64 // the call's instance variables, asked for at the first use
	)
	const sm = StackSize - 1
	// append copies src into the log, truncating at logmax.
	appendLog := func(src []byte) {
		n := copy(buf[logn:], src)
		logn += n
		if n < len(src) {
			truncated = true
		}
	}
	for {
		in := &code[pc]
		pc++
		switch in.op {
		case OpNop:

		case OpJmp:
			if jumps >= jmpmax {
				ex = ExMaxJumps
				goto fault
			}
			jumps++
			pc = in.c
		case OpJz, OpJnz, OpJlt, OpJle, OpJgt, OpJge:
			x := int64(s[tos]<<sh) >> sh
			var taken bool
			switch in.op {
			case OpJz:
				taken = x == 0
			case OpJnz:
				taken = x != 0
			case OpJlt:
				taken = x < 0
			case OpJle:
				taken = x <= 0
			case OpJgt:
				taken = x > 0
			default:
				taken = x >= 0
			}
			if taken {
				if jumps >= jmpmax {
					ex = ExMaxJumps
					goto fault
				}
				jumps++
				pc = in.c
			}
		case OpLoop:
			s[tos] = (s[tos] - 1) & mask
			if s[tos] != 0 {
				if jumps >= jmpmax {
					ex = ExMaxJumps
					goto fault
				}
				jumps++
				pc = in.c
			}
		case OpCall:
			if depth >= MaxCallDepth {
				ex = ExCallDepth
				goto fault
			}
			if jumps >= jmpmax {
				ex = ExMaxJumps
				goto fault
			}
			jumps++
			m.calls[depth] = pc
			depth++
			pc = in.c
		case OpRet:
			if depth == 0 {
				ex = ExCallDepth
				goto fault
			}
			depth--
			pc = m.calls[depth]

		case OpExit:
			m.res = Result{Outcome: OutcomeExit, Exit: in.a, Major: major, Minor: minor, Truncated: truncated}
			if in.a != ExitNone {
				m.res.Log = buf[:logn]
			}
			return
		case OpAbort:
			m.res = Result{Outcome: OutcomeAbort, Major: major, Minor: minor}
			return
		case OpRem:
			m.res = Result{Outcome: OutcomeRem, Exit: ExitLog, Major: major, Minor: minor, Log: buf[:logn], Truncated: truncated}
			return

		case OpLogN:
			n := uint32(in.a)
			var word [8]byte
			for i := n; i > 0; i-- {
				binary.LittleEndian.PutUint64(word[:], s[(tos-i+1)&sm])
				appendLog(word[:w])
			}
			tos = (tos - n) & sm
		case OpLogStr:
			addr := s[tos]
			limit := s[(tos-1)&sm]
			tos = (tos - 2) & sm
			for limit > 0 && logn < logmax {
				n := uint64(len(m.chunk))
				if toPage := 4096 - addr&4095; toPage < n {
					n = toPage
				}
				if limit < n {
					n = limit
				}
				if room := uint64(logmax - logn); room < n {
					n = room
				}
				chunk := m.chunk[:n]
				if !env.ReadMem(addr, chunk) {
					// Some of the chunk is unreadable; the string may still
					// end before that. Read it byte by byte to find out.
					if i, ok := readUntilFault(env, addr, chunk); !ok {
						ex, faultAddr = ExInvalidAddress, addr+uint64(i)
						goto fault
					} else {
						chunk = chunk[:i]
					}
				}
				if i := indexZero(chunk); i >= 0 {
					appendLog(chunk[:i])
					limit = 0
					break
				}
				appendLog(chunk)
				addr += n
				limit -= n
			}
			if limit > 0 {
				// the log filled up: the string was cut unless its NUL is next
				var b [1]byte
				if !env.ReadMem(addr, b[:]) || b[0] != 0 {
					truncated = true
				}
			}
		case OpLogMrf:
			addr := s[tos]
			n := s[(tos-1)&sm]
			tos = (tos - 2) & sm
			room := uint64(logmax - logn)
			if n > room {
				n = room
				truncated = true
			}
			if n > 0 {
				if !env.ReadMem(addr, buf[logn:logn+int(n)]) {
					ex, faultAddr = ExInvalidAddress, addr
					goto fault
				}
				logn += int(n)
			}
		case OpLogUStack, OpLogKStack:
			// the verifier keeps in.a in 1..MaxStackFrames
			se, ok := env.(StackEnv)
			pcs := m.pcs[:in.a]
			n := 0
			if ok {
				n, ok = se.Stack(in.op == OpLogKStack, pcs)
			}
			if !ok {
				ex = ExInvalidOperand
				goto fault
			}
			var word [8]byte
			for i := range pcs {
				v := uint64(0)
				if i < n {
					v = pcs[i]
				}
				binary.LittleEndian.PutUint64(word[:], v)
				appendLog(word[:])
			}
		case OpLogLV, OpLogGV:
			vars := lv
			if in.op == OpLogGV {
				vars = gv
			}
			var word [8]byte
			for i := uint32(0); i < in.c; i++ {
				binary.LittleEndian.PutUint64(word[:], vars[uint32(in.b)+i])
				appendLog(word[:w])
			}
		case OpSetMajI:
			major = in.b
		case OpSetMinI:
			minor = in.b
		case OpSetMaj, OpSetMin:
			x := s[tos]
			tos = (tos - 1) & sm
			if x > 0xffff {
				ex = ExInvalidOperand
				goto fault
			}
			if in.op == OpSetMaj {
				major = uint16(x)
			} else {
				minor = uint16(x)
			}
		case OpPushLP:
			tos = (tos + 1) & sm
			s[tos] = uint64(logn)
		case OpPopLP:
			x := s[tos]
			tos = (tos - 1) & sm
			if x > uint64(logn) {
				ex = ExInvalidOperand
				goto fault
			}
			logn = int(x)

		case OpPushLVI:
			tos = (tos + 1) & sm
			s[tos] = lv[in.b]
		case OpPopLVI:
			lv[in.b] = s[tos]
			tos = (tos - 1) & sm
		case OpMoveLVI:
			lv[in.b] = s[tos]
		case OpIncLVI:
			addVar(&lv[in.b], 1, mask)
		case OpDecLVI:
			addVar(&lv[in.b], ^uint64(0), mask)
		case OpPushGVI:
			tos = (tos + 1) & sm
			s[tos] = gv[in.b]
		case OpPopGVI:
			gv[in.b] = s[tos]
			tos = (tos - 1) & sm
		case OpMoveGVI:
			gv[in.b] = s[tos]
		case OpIncGVI:
			addVar(&gv[in.b], 1, mask)
		case OpDecGVI:
			addVar(&gv[in.b], ^uint64(0), mask)
		case OpPushLV, OpPopLV, OpMoveLV, OpIncLV, OpDecLV,
			OpPushGV, OpPopGV, OpMoveGV, OpIncGV, OpDecGV:
			vars, op := lv[:mod.Vars], in.op
			if op >= OpPushGV {
				vars, op = gv[:mod.GVars], op-(OpPushGV-OpPushLV)
			}
			var idx uint64
			switch op {
			case OpPopLV: // i x POP LV
				idx = s[(tos-1)&sm]
			default:
				idx = s[tos]
			}
			if idx >= uint64(len(vars)) {
				ex = ExInvalidOperand
				goto fault
			}
			switch op {
			case OpPushLV:
				s[tos] = vars[idx]
			case OpPopLV:
				vars[idx] = s[tos]
				tos = (tos - 2) & sm
			case OpMoveLV:
				tos = (tos - 1) & sm
				vars[idx] = s[tos]
			case OpIncLV:
				tos = (tos - 1) & sm
				addVar(&vars[idx], 1, mask)
			case OpDecLV:
				tos = (tos - 1) & sm
				addVar(&vars[idx], ^uint64(0), mask)
			}

		case OpAdd:
			x := s[tos]
			tos = (tos - 1) & sm
			s[tos] = (s[tos] + x) & mask
		case OpSub:
			x := s[tos]
			tos = (tos - 1) & sm
			s[tos] = (s[tos] - x) & mask
		case OpMul:
			x := s[tos]
			tos = (tos - 1) & sm
			s[tos] = (s[tos] * x) & mask
		case OpDiv:
			x, y := s[tos], s[(tos-1)&sm]
			if x == 0 {
				ex = ExDivideByZero
				goto fault
			}
			s[(tos-1)&sm] = y % x
			s[tos] = y / x
		case OpIDiv:
			x := int64(s[tos]<<sh) >> sh
			y := int64(s[(tos-1)&sm]<<sh) >> sh
			if x == 0 {
				ex = ExDivideByZero
				goto fault
			}
			// Go defines MinInt64 / -1 as MinInt64 (no trap), as we want
			s[(tos-1)&sm] = uint64(y%x) & mask
			s[tos] = uint64(y/x) & mask
		case OpAnd:
			x := s[tos]
			tos = (tos - 1) & sm
			s[tos] &= x
		case OpOr:
			x := s[tos]
			tos = (tos - 1) & sm
			s[tos] |= x
		case OpXor:
			x := s[tos]
			tos = (tos - 1) & sm
			s[tos] ^= x
		case OpNot:
			s[tos] = ^s[tos] & mask
		case OpNeg:
			s[tos] = -s[tos] & mask
		case OpShlI, OpShrI, OpSarI, OpRolI, OpRorI:
			s[tos] = shift(in.op-OpShlI, s[tos], uint64(in.a), mask, sh)
		case OpShl, OpShr, OpSar, OpRol, OpRor:
			n := s[tos]
			tos = (tos - 1) & sm
			s[tos] = shift(in.op-OpShl, s[tos], n, mask, sh)

		case OpVfyR, OpVfyRW:
			if env.Access(s[tos], in.op == OpVfyRW) {
				s[tos] = 0
			} else {
				s[tos] = 1
			}

		case OpPop:
			tos = (tos - 1) & sm
		case OpDup:
			x := s[tos]
			tos = (tos + 1) & sm
			s[tos] = x
		case OpXchg:
			y := (tos - 1) & sm
			s[tos], s[y] = s[y], s[tos]
		case OpRos:
			tos = (tos - uint32(in.a)) & sm

		case OpPushR, OpPushU:
			r := Reg(in.b)
			v, ok := env.Reg(r.Canonical(), in.op == OpPushU)
			if !ok {
				ex = ExInvalidOperand
				goto fault
			}
			if r.Is32() {
				v &= 0xffffffff
			}
			tos = (tos + 1) & sm
			s[tos] = v & mask
		case OpPopR, OpPopU:
			r := Reg(in.b)
			v := s[tos]
			tos = (tos - 1) & sm
			if r.Is32() {
				v &= 0xffffffff
			}
			if !env.SetReg(r.Canonical(), in.op == OpPopU, v) {
				ex = ExInvalidOperand
				goto fault
			}

		case OpPushD:
			tos = (tos + 1) & sm
			s[tos] = in.imm
		case OpPushMrf:
			addr := s[tos]
			chunk := m.chunk[:in.a]
			if !env.ReadMem(addr, chunk) {
				ex, faultAddr = ExInvalidAddress, addr
				goto fault
			}
			s[tos] = readLE(chunk)
		case OpPopMrf:
			v := s[tos]
			addr := s[(tos-1)&sm]
			tos = (tos - 2) & sm
			chunk := m.chunk[:in.a]
			binary.LittleEndian.PutUint64(m.chunk[:8], v)
			if !env.WriteMem(addr, chunk) {
				ex, faultAddr = ExInvalidAddress, addr
				goto fault
			}

		case OpPushPID, OpPushTID, OpPushProcID, OpPushTask, OpPushTS:
			v, ok := env.Sys(SysValue(in.op - OpPushPID))
			if !ok {
				ex = ExInvalidOperand
				goto fault
			}
			tos = (tos + 1) & sm
			s[tos] = v & mask

		case OpPushField:
			// the verifier allows it only in tracepoint probes, with
			// in.b inside mod.Fields
			fe, ok := env.(FieldEnv)
			var v uint64
			if ok {
				v, ok = fe.Field(mod.Fields[in.b])
			}
			if !ok {
				ex = ExInvalidOperand
				goto fault
			}
			tos = (tos + 1) & sm
			s[tos] = v & mask

		case OpPushArg:
			// the verifier allows it only in usdt probes
			ae, ok := env.(ArgEnv)
			var v uint64
			if ok {
				v, ok = ae.Arg(int(in.a))
			}
			if !ok {
				ex = ExInvalidOperand
				goto fault
			}
			tos = (tos + 1) & sm
			s[tos] = v & mask

		case OpEnable, OpDisable:
			sw, ok := env.(Switcher)
			if ok {
				ok = sw.Switch(in.b, in.op == OpEnable)
			}
			if !ok {
				ex = ExInvalidOperand
				goto fault
			}
		case OpPushIV:
			// the verifier keeps in.a below MaxIV
			if ivs == nil {
				ivs = m.instanceVars(env)
			}
			tos = (tos + 1) & sm
			s[tos] = ivs[in.a] & mask
		case OpPopIV:
			if ivs == nil {
				ivs = m.instanceVars(env)
			}
			ivs[in.a] = s[tos]
			tos = (tos - 1) & sm

		case OpPushIO:
			v, ok := env.IO(s[tos], in.a, false, 0)
			if !ok {
				ex = ExInvalidOperand
				goto fault
			}
			s[tos] = v & mask
		case OpPopIO:
			v := s[tos]
			port := s[(tos-1)&sm]
			tos = (tos - 2) & sm
			if _, ok := env.IO(port, in.a, true, v); !ok {
				ex = ExInvalidOperand
				goto fault
			}

		default:
			// unreachable for verified code; refuse rather than panic
			ex = ExInvalidOperand
			goto fault
		}
	}
fault:
	m.res = Result{Outcome: OutcomeException, Exception: ex, PC: p.pcs[pc-1], Addr: faultAddr, Major: major, Minor: minor}
}

// instanceVars returns the instance variables of the call env's hit
// belongs to, or the machine's own zeroed words when there is none
// (IVEnv).
func (m *Machine) instanceVars(env Env) *[MaxIV]uint64 {
	if e, ok := env.(IVEnv); ok {
		if p := e.IV(); p != nil {
			return p
		}
	}
	m.iv = [MaxIV]uint64{}
	return &m.iv
}

// addVar adds d to a variable atomically: jump pads in the processes
// probed (package jit) change the same words with lock-prefixed
// instructions while the machine runs, and a plain read-modify-write here
// lost their increments (TestJumpSharedGV).
func addVar(p *uint64, d, mask uint64) {
	if mask == ^uint64(0) {
		atomic.AddUint64(p, d)
		return
	}
	for {
		old := atomic.LoadUint64(p)
		if atomic.CompareAndSwapUint64(p, old, (old+d)&mask) {
			return
		}
	}
}

// shift applies shl, shr, sar, rol or ror (kind 0..4) to x at the word
// width given by mask and sh. Counts at or beyond the width give 0 for
// shl and shr and the sign for sar; rotations count modulo the width.
func shift(kind Opcode, x, n, mask uint64, sh uint) uint64 {
	width := 64 - uint64(sh)
	switch kind {
	case 0: // shl
		if n >= width {
			return 0
		}
		return (x << n) & mask
	case 1: // shr
		if n >= width {
			return 0
		}
		return x >> n
	case 2: // sar
		if n >= width {
			n = width - 1
		}
		return uint64((int64(x<<sh)>>sh)>>n) & mask
	case 3, 4: // rol, ror
		r := int(n % width)
		if kind == 4 {
			r = -r
		}
		if width == 32 {
			return uint64(bits.RotateLeft32(uint32(x), r))
		}
		return bits.RotateLeft64(x, r)
	}
	return x
}

func readLE(b []byte) uint64 {
	switch len(b) {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	case 8:
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// readUntilFault reads p one byte at a time from addr until a NUL or an
// unreadable byte. It returns how many bytes it read, and false if it
// stopped at an unreadable byte before finding a NUL.
func readUntilFault(env Env, addr uint64, p []byte) (int, bool) {
	for i := range p {
		if !env.ReadMem(addr+uint64(i), p[i:i+1]) {
			return i, false
		}
		if p[i] == 0 {
			return i + 1, true
		}
	}
	return len(p), true
}

func indexZero(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}
