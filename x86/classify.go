package x86

import (
	"fmt"
	"strings"

	"golang.org/x/arch/x86/x86asm"
)

// Class says how the engine executes the instruction a probe displaced.
type Class uint8

const (
	// Emulate: the engine computes the instruction's effect on the
	// registers (and on memory through Mem) with EmulateInsn; no step, no
	// XOL. When EmulateInsn returns false (a memory access faults) the engine steps it instead.
	Emulate Class = iota
	// Boost: the instruction cannot fault (no memory operand, not control
	// flow, not privileged): it runs in the XOL slot followed by a jump
	// back, without trapping; the log may be committed before resuming.
	Boost
	// Step: run it in the XOL slot under single-step, then FixupAfterStep.
	// Memory operands may fault; the engine commits only after the step.
	Step
	// Branch: a relative jmp, jcc, call, loop or jrcxz. Never run out of
	// line (its displacement would be wrong from the slot); EmulateBranch
	// computes it.
	Branch
	// Refuse: the instruction cannot be probed; Why says why.
	Refuse
)

var classNames = [...]string{"emulate", "boost", "step", "branch", "refuse"}

func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// Classify sets in.Class and in.Why. Decode calls it; call it again after
// changing in.Kernel.
func Classify(in *Insn) {
	in.Class, in.Why = classify(in)
}

func classify(in *Insn) (Class, string) {
	if in.Len == 0 {
		if in.Why == "" {
			return Refuse, "not decoded"
		}
		return Refuse, in.Why
	}
	if c, why, ok := classifyOpcode(in); ok {
		return c, why
	}
	l := &in.lay
	if l.ripRel && l.p67 {
		if in.asmOK && (in.Inst.Op == x86asm.LEA || in.Inst.Op == x86asm.NOP) && emulate(in, new(Regs), anyMem{}) {
			return Emulate, "lea/nop with an eip-relative operand: computed by the engine"
		}
		return Refuse, "eip-relative operand (address-size prefix): it cannot be relocated to an out-of-line slot"
	}
	if in.isEndbr() {
		return Emulate, "endbr: a no-op marker for indirect-branch tracking; emulated"
	}
	if !in.asmOK {
		switch {
		case l.esc == escVEX && l.omap == 1 && l.op == 0x77:
			return Boost, "vzeroupper/vzeroall: registers only"
		case l.esc == escNone && l.omap == 1 && (l.op >= 0x19 && l.op <= 0x1f && l.op != 0x1a && l.op != 0x1b || l.op == 0x18 && l.mod() == 3):
			return Boost, "hint NOP (reserved NOP space): never faults, never touches memory"
		case l.esc != escNone:
			return Step, fmt.Sprintf("%s is not decoded in detail; vector instructions never branch: stepped out of line", l.opName())
		case l.esc == escNone && l.omap == 1 && l.op == 0x01 && (l.modrm == 0xee || l.modrm == 0xef):
			return Step, "rdpkru/wrpkru: stepped out of line"
		}
		return Refuse, fmt.Sprintf("opcode %s is not decoded (invalid, or too new for the decoder)", l.opName())
	}
	if emulate(in, new(Regs), anyMem{}) {
		return Emulate, emulateWhy(in)
	}
	if why, ok := boostable(in); ok {
		return Boost, why
	}
	return Step, stepWhy(in)
}

// anyMem is the memory Classify emulates against: every access succeeds.
type anyMem struct{}

func (anyMem) Read(addr uint64, p []byte) bool  { return true }
func (anyMem) Write(addr uint64, p []byte) bool { return true }

func hasMem(in *Insn) bool {
	for _, a := range in.Inst.Args {
		if a == nil {
			break
		}
		if _, ok := a.(x86asm.Mem); ok {
			return true
		}
	}
	return false
}

func emulateWhy(in *Insn) string {
	switch {
	case in.Inst.Op == x86asm.RET || in.Inst.Op == x86asm.CALL || in.Inst.Op == x86asm.JMP:
		return "indirect control transfer: target read by the engine (stepped if the read faults)"
	case in.Inst.Op == x86asm.PUSH || in.Inst.Op == x86asm.PUSHF || in.Inst.Op == x86asm.PUSHFQ || in.Inst.Op == x86asm.PUSHFD:
		return "push: the engine writes the stack (stepped if the write faults)"
	case in.Inst.Op == x86asm.LEA:
		return "lea: address arithmetic, no memory access"
	case in.Inst.Op == x86asm.NOP || in.Inst.Op == x86asm.PAUSE || strings.HasPrefix(in.Inst.Op.String(), "PREFETCH"):
		return "no-op: nothing to execute"
	case hasMem(in) || in.Inst.Op == x86asm.POP || in.Inst.Op == x86asm.LEAVE:
		return "register operation with a memory read: the engine reads the target's memory (stepped if the read faults)"
	}
	return "register operation: computed by the engine"
}

func stepWhy(in *Insn) string {
	switch {
	case in.lay.lock:
		return "locked read-modify-write: atomic only when the CPU executes it; stepped out of line"
	case in.lay.seg == 0x64 || in.lay.seg == 0x65:
		return "fs/gs-relative memory operand: stepped out of line"
	case in.isString() && (in.lay.rep || in.lay.repne):
		return "rep string instruction: stepped out of line, once per iteration (ErrStepAgain)"
	case in.isString():
		return "string instruction (implicit memory operands): stepped out of line"
	case hasMem(in):
		return "memory operand that may fault: stepped out of line"
	}
	return "may fault or has effects the engine does not compute: stepped out of line"
}

// Opcode-level decisions that do not need x86asm: control flow, traps,
// privileged and address-dependent instructions.
func classifyOpcode(in *Insn) (Class, string, bool) {
	l := &in.lay
	if l.esc != escNone {
		if l.esc == escXOP {
			return Refuse, "XOP instructions exist only on AMD family 15h CPUs", true
		}
		return 0, "", false
	}
	priv := func(what string) (Class, string, bool) {
		if in.Kernel {
			return Step, what + ": privileged, stepped out of line", true
		}
		return Refuse, what + ": privileged, it cannot run in user mode (the program would fault here itself)", true
	}
	nearBranch := func() (Class, string, bool) {
		if l.p66 {
			return Refuse, "near branch with an operand-size prefix: 16-bit targets (and Intel/AMD disagree in 64-bit mode)", true
		}
		return Branch, "relative branch: computed by the engine (its displacement is wrong out of line)", true
	}
	indirect := func() (Class, string, bool) {
		if l.p66 {
			return Refuse, "near control transfer with an operand-size prefix: 16-bit targets (and Intel/AMD disagree in 64-bit mode)", true
		}
		return 0, "", false
	}
	switch l.omap {
	case 0:
		switch op := l.op; {
		case op == 0xcc:
			return Refuse, "int3 is already here: decode the original bytes (restore the byte a probe or a debugger planted)", true
		case op == 0xcd:
			if imm := in.Bytes[l.immOff]; imm == 0x80 && !in.Kernel {
				return Step, "int $0x80 (system call): stepped out of line", true
			}
			return Refuse, "int n raises a software interrupt", true
		case op == 0xce:
			return Refuse, "into raises a software interrupt", true
		case op == 0xf1:
			return Refuse, "int1 (icebp) raises a debug trap", true
		case op == 0xcf:
			return Refuse, "iret changes privilege, stack and flags at once", true
		case op == 0xf4:
			if in.Kernel {
				return Refuse, "hlt stops the CPU until an interrupt: it cannot complete a single-step", true
			}
			return priv("hlt")
		case op == 0x9a || op == 0xea || op == 0xca || op == 0xcb:
			return Refuse, "far control transfer: changes the code segment", true
		case op == 0xff && (l.reg() == 3 || l.reg() == 5):
			return Refuse, "far control transfer: changes the code segment", true
		case op == 0xff && (l.reg() == 2 || l.reg() == 4), op == 0xc2 || op == 0xc3:
			return indirect()
		case op >= 0xe4 && op <= 0xe7, op >= 0xec && op <= 0xef, op >= 0x6c && op <= 0x6f:
			return priv("port I/O")
		case op == 0xfa:
			return priv("cli")
		case op == 0xfb:
			return priv("sti")
		case op == 0x8e && l.reg() == 2, op == 0x17:
			return Refuse, "loading ss inhibits traps for one instruction: a single-step would run past the slot", true
		case op >= 0x70 && op <= 0x7f, op == 0xeb, op == 0xe9, op == 0xe8, op >= 0xe0 && op <= 0xe3:
			return nearBranch()
		case op == 0xc7 && l.modrm == 0xf8:
			return Refuse, "xbegin: a transaction aborts on any trap, and its fallback address is relative", true
		case op == 0xc6 && l.modrm == 0xf8:
			return Refuse, "xabort: transactional memory", true
		}
	case 1:
		switch op := l.op; {
		case op == 0x0b || op == 0xb9 || op == 0xff:
			return Refuse, "undefined instruction (ud0/ud1/ud2): it raises #UD on purpose", true
		case op == 0x05:
			if in.Kernel {
				return Refuse, "syscall in kernel mode", true
			}
			return Step, "syscall: stepped out of line (the return address in rcx is fixed up)", true
		case op == 0x34:
			if in.Kernel {
				return Refuse, "sysenter in kernel mode", true
			}
			return Step, "sysenter: stepped out of line", true
		case op == 0x07 || op == 0x35:
			return Refuse, "sysret/sysexit change privilege level", true
		case op == 0xaa:
			return Refuse, "rsm leaves system-management mode", true
		case op == 0x37:
			return Refuse, "getsec: safer-mode extensions", true
		case op == 0x0f:
			return Refuse, "3DNow! instructions do not exist on current CPUs", true
		case op >= 0x80 && op <= 0x8f:
			return nearBranch()
		case op == 0x06 || op == 0x08 || op == 0x09 || op == 0x30 || op == 0x32:
			return priv(l.opName())
		case op >= 0x20 && op <= 0x23:
			return priv("mov to or from a control or debug register")
		case op == 0x00 && (l.reg() == 2 || l.reg() == 3):
			return priv("lldt/ltr")
		case op == 0x01:
			return classify0F01(in, priv)
		case op == 0xc7 && l.mod() != 3 && (l.reg() == 3 || l.reg() == 5 || l.reg() >= 6):
			return priv("xrstors/xsaves/vmptrld/vmptrst")
		case (op == 0x78 || op == 0x79) && !l.p66 && !l.repne:
			return priv("vmread/vmwrite")
		}
	case 2:
		switch l.op {
		case 0x80, 0x81, 0x82:
			if l.p66 {
				return priv("invept/invvpid/invpcid")
			}
		}
	}
	return 0, "", false
}

// classify0F01 sorts the 0F 01 group: descriptor tables, VMX, SVM,
// monitor/mwait, swapgs and friends.
func classify0F01(in *Insn, priv func(string) (Class, string, bool)) (Class, string, bool) {
	l := &in.lay
	if l.mod() != 3 {
		switch l.reg() {
		case 2, 3, 6, 7:
			return priv("lgdt/lidt/lmsw/invlpg")
		}
		return 0, "", false // sgdt, sidt, smsw: ordinary (or #GP under UMIP)
	}
	switch m := l.modrm; {
	case m == 0xf8:
		return Refuse, "swapgs switches the gs base under the handler's feet", true
	case m >= 0xc1 && m <= 0xc4, m >= 0xd8 && m <= 0xdf, m == 0xd4:
		return Refuse, "virtualization instruction (VMX/SVM): leaves or enters a guest", true
	case m == 0xcf || m == 0xd7 || m == 0xc0:
		return Refuse, "SGX enclave instruction", true
	case m == 0xd5:
		return Refuse, "xend: transactional memory", true
	case m == 0xc9 || m == 0xfb:
		return Refuse, "mwait stops the CPU until a store or interrupt: it cannot complete a single-step", true
	case m == 0xd0 || m == 0xd6 || m == 0xe8 || m == 0xee || m == 0xef || m == 0xf9 || m == 0xfa || m == 0xfc || m == 0xfd:
		return 0, "", false // xgetbv xtest serialize rdpkru wrpkru rdtscp monitorx clzero rdpru
	}
	return priv("system instruction (0f 01 group)")
}

// boostable reports whether an instruction with no memory operand and no
// implicit memory access can run in the slot without trapping. The list is
// positive: anything not on it is stepped.
func boostable(in *Insn) (string, bool) {
	if hasMem(in) {
		return "", false
	}
	op := in.Inst.Op
	if boostOps[op] {
		return "register-only instruction: runs in the slot and jumps back", true
	}
	if isSIMD(in) {
		name := strings.TrimPrefix(op.String(), "V")
		switch {
		case strings.Contains(name, "MASKMOV"):
			return "", false // stores through rdi
		case strings.HasPrefix(name, "P"):
			return "packed-integer register operation: cannot fault", true
		}
		for _, s := range fpArith {
			if strings.Contains(name, s) {
				return "", false // may raise a SIMD floating-point exception if unmasked
			}
		}
		return "vector register move, logic or shuffle: cannot fault", true
	}
	return "", false
}

// isSIMD reports whether any operand is an MMX, XMM, YMM, ZMM or mask register.
func isSIMD(in *Insn) bool {
	if !in.asmOK {
		return false
	}
	for _, a := range in.Inst.Args {
		if a == nil {
			break
		}
		if r, ok := a.(x86asm.Reg); ok && r >= x86asm.M0 && r <= x86asm.K7 {
			return true
		}
	}
	return false
}

// fpArith are name fragments of SIMD floating-point operations that can
// raise #XM when the program unmasks exceptions in MXCSR.
var fpArith = []string{
	"ADD", "SUB", "MUL", "DIV", "SQRT", "MIN", "MAX", "CMP", "COMI", "CVT", "ROUND", "DP",
	"FM", "FNM", "HADD", "HSUB", "RANGE", "GETEXP", "GETMANT", "SCALEF", "REDUCE", "FIXUP",
	"RCP", "RSQRT", "FPCLASS", "EMMS", "RND", "EXP2",
}

// boostOps are general-purpose instructions that only read and write
// registers and flags, and cannot fault.
var boostOps = map[x86asm.Op]bool{}

func init() {
	for _, op := range []x86asm.Op{
		x86asm.SHL, x86asm.SHR, x86asm.SAR, x86asm.ROL, x86asm.ROR, x86asm.RCL, x86asm.RCR,
		x86asm.SHLD, x86asm.SHRD, x86asm.IMUL, x86asm.MUL, x86asm.BT, x86asm.BTS, x86asm.BTR,
		x86asm.BTC, x86asm.BSF, x86asm.BSR, x86asm.BSWAP, x86asm.POPCNT, x86asm.LZCNT, x86asm.TZCNT,
		x86asm.ADC, x86asm.SBB, x86asm.NEG, x86asm.NOT, x86asm.XCHG, x86asm.XADD, x86asm.CMPXCHG,
		x86asm.MOVSXD, x86asm.MOVZX, x86asm.MOVSX, x86asm.LAHF, x86asm.SAHF, x86asm.CLC, x86asm.STC,
		x86asm.CMC, x86asm.CLD, x86asm.STD, x86asm.PAUSE, x86asm.LFENCE, x86asm.MFENCE, x86asm.SFENCE,
		x86asm.CBW, x86asm.CWDE, x86asm.CDQE, x86asm.CWD, x86asm.CDQ, x86asm.CQO, x86asm.CRC32,
		x86asm.ANDN, x86asm.BEXTR, x86asm.BLSI, x86asm.BLSMSK, x86asm.BLSR, x86asm.BZHI, x86asm.MULX,
		x86asm.PDEP, x86asm.PEXT, x86asm.RORX, x86asm.SARX, x86asm.SHLX, x86asm.SHRX,
		x86asm.VZEROUPPER, x86asm.VZEROALL,
	} {
		boostOps[op] = true
	}
	for op := x86asm.CMOVA; op <= x86asm.CMOVS; op++ {
		boostOps[op] = true
	}
	for op := x86asm.SETA; op <= x86asm.SETS; op++ {
		boostOps[op] = true
	}
}
