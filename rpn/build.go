package rpn

import (
	"errors"
	"fmt"
)

// What the DPDF compiler (package compiler) needs from the bytecode's side
// and shares with the verifier: the symbols it resolves against, and the
// checks both make. The compiler itself lives above, in package compiler,
// so that rpn (the bytecode, its verifier and VM) does not link the DPDF
// parser.

// Resolver answers the compiler's questions about the probed module:
// symbol addresses, source lines and type layouts. symbols.Set implements
// it. Addresses are link-time addresses of the module.
type Resolver interface {
	Symbol(name string) (uint64, error)
	Sizeof(typ string) (uint64, error)
	Offsetof(typ, field string) (uint64, error)
	LineAddr(file string, line int) (addr uint64, actualLine int, err error)
	BuildID() []byte
}

// ModuleBuildIDer is a Resolver that picks, among the files it was given,
// the build ID of the module a DPDF names (a kernel module's .ko rather
// than the vmlinux given for its types).
type ModuleBuildIDer interface {
	ModuleBuildID(name string, modtype ModType) []byte
}

// ErrAtInsertion is what a Resolver's Symbol wraps when the symbol exists
// but has no address yet (a kernel module's .ko: its symbols are placed
// when it is loaded). The compiler then leaves the location or constant
// symbolic, unresolved, to be resolved when the module is inserted, as
// without a Resolver; any other error is a compile error.
var ErrAtInsertion = errors.New("known only when the module is inserted")

// CompileOptions controls the DPDF compiler (package compiler).
type CompileOptions struct {
	// Symbols resolves locations and symbolic constants at build time.
	// Without it they stay symbolic and are resolved when the module is
	// inserted.
	Symbols Resolver
}

// kindNames says "an offset probe", "a retprobe", "a tracepoint probe", "a
// watch probe" in messages.
var kindNames = [...]string{ProbeOffset: "an offset probe", ProbeRetprobe: "a retprobe", ProbeTracepoint: "a tracepoint probe", ProbeWatch: "a watch probe", ProbeUSDT: "a usdt probe"}

// CheckReg says why a register cannot be used, or "". Shared by the
// compiler (package compiler) and the verifier.
func CheckReg(reg Reg, h Header, write, user bool) string {
	if reg.Canonical() >= NumRegs {
		return fmt.Sprintf("register number %d does not exist", reg.Canonical())
	}
	if reg&^(Reg32|0xff) != 0 || (reg.Is32() && reg.Canonical() > RegRFLAGS) {
		return fmt.Sprintf("register encoding %#x is invalid", uint16(reg))
	}
	if h.Arch == ArchI386 && !reg.Is32() && reg.class() == regGeneral {
		return fmt.Sprintf("register %s does not exist on i386", reg)
	}
	if h.Arch == ArchI386 && (reg.class() == regBase || reg.Canonical() >= RegR8 && reg.Canonical() <= RegR15) {
		return fmt.Sprintf("register %s does not exist on i386", reg)
	}
	switch reg.class() {
	case regControl:
		if h.ModType != ModKernel {
			return fmt.Sprintf("%s can only be read in a kernel probe (this module is modtype = user)", reg)
		}
		if user {
			return fmt.Sprintf("%s is not a user-mode register", reg)
		}
		if write {
			return fmt.Sprintf("%s is read-only", reg)
		}
	case regSegment:
		if write {
			return fmt.Sprintf("%s is read-only", reg)
		}
	case regBase:
		if user && write {
			// a task's user fs_base and gs_base live in its thread
			// state, not in the pt_regs that pop u writes
			return fmt.Sprintf("pop u,%s: the user-mode %s is not among the registers a task saves on entry (pt_regs); pop u writes the general registers, rip and rflags", reg, reg)
		}
	}
	return ""
}

// CheckSize says why a memory or port access size is invalid, or "".
// Shared by the compiler and the verifier.
func CheckSize(s uint8, arch Arch, io bool) string {
	switch {
	case io && (s == 1 || s == 2 || s == 4):
		return ""
	case io:
		return fmt.Sprintf("port IO size must be 1, 2 or 4, not %d", s)
	case s == 1 || s == 2 || s == 4 || s == 8 && arch == ArchX86_64:
		return ""
	case s == 8:
		return "size 8 does not fit a 32-bit i386 stack word: use 1, 2 or 4"
	}
	return fmt.Sprintf("size must be 1, 2, 4 or 8, not %d", s)
}

// Phrase names k in a sentence: "an offset probe", "a retprobe", "a
// tracepoint probe", "a watch probe".
func (k ProbeKind) Phrase() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("a probe of kind %d", k)
}
