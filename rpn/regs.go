package rpn

import "strings"

// Reg names a register in an instruction operand. The low byte is the
// canonical 64-bit register (RegRAX ... RegCR4); Reg32 marks the 32-bit
// view (eax, eip, eflags ...): reads take the low 32 bits, writes
// zero-extend, as x86_64 does. Targets only ever see canonical registers.
type Reg uint16

// Canonical registers. Their numbering is part of the PPDF format.
const (
	RegRAX Reg = iota
	RegRBX
	RegRCX
	RegRDX
	RegRSI
	RegRDI
	RegRBP
	RegRSP
	RegR8
	RegR9
	RegR10
	RegR11
	RegR12
	RegR13
	RegR14
	RegR15
	RegRIP
	RegRFLAGS
	RegCS
	RegSS
	RegDS
	RegES
	RegFS
	RegGS
	RegFSBase
	RegGSBase
	RegCR0
	RegCR2
	RegCR3
	RegCR4
	NumRegs // number of canonical registers

	Reg32 Reg = 0x100 // view flag: low 32 bits
)

// Canonical returns the 64-bit register r is a view of.
func (r Reg) Canonical() Reg { return r & 0xff }

// Is32 reports whether r is a 32-bit view.
func (r Reg) Is32() bool { return r&Reg32 != 0 }

var regNames64 = [NumRegs]string{
	"rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp",
	"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
	"rip", "rflags", "cs", "ss", "ds", "es", "fs", "gs", "fs_base", "gs_base",
	"cr0", "cr2", "cr3", "cr4",
}

var regNames32 = [NumRegs]string{
	"eax", "ebx", "ecx", "edx", "esi", "edi", "ebp", "esp",
	"r8d", "r9d", "r10d", "r11d", "r12d", "r13d", "r14d", "r15d",
	"eip", "eflags",
}

// String returns the register's name as the x86_64 assembler spells it.
func (r Reg) String() string {
	c := r.Canonical()
	if c >= NumRegs {
		return "(invalid)"
	}
	if r.Is32() {
		if n := regNames32[c]; n != "" {
			return n
		}
	}
	return regNames64[c]
}

// regClass says where a register may be used.
type regClass uint8

const (
	regGeneral regClass = iota // general purpose, rip, rflags: read and write
	regSegment                 // cs ... gs: read only
	regBase                    // fs_base, gs_base: read and write
	regControl                 // cr0 ... cr4: kernel probes only, read only
)

func (r Reg) class() regClass {
	switch c := r.Canonical(); {
	case c <= RegRFLAGS:
		return regGeneral
	case c <= RegGS:
		return regSegment
	case c <= RegGSBase:
		return regBase
	default:
		return regControl
	}
}

// LookupReg finds a register by name (case-insensitive) for an
// architecture. It reports false for names the architecture lacks: the
// 64-bit names and r8-r15 do not exist on i386.
func LookupReg(arch Arch, name string) (Reg, bool) {
	name = strings.ToLower(name)
	for i, n := range regNames64 {
		if n != name {
			continue
		}
		r := Reg(i)
		if arch == ArchI386 {
			switch {
			case r <= RegR15 || r == RegRIP:
				return 0, false
			case r == RegRFLAGS:
				return 0, false
			case r == RegFSBase || r == RegGSBase:
				return 0, false
			}
		}
		return r, true
	}
	for i, n := range regNames32 {
		if n == "" || n != name {
			continue
		}
		if arch == ArchI386 && Reg(i) >= RegR8 && Reg(i) <= RegR15 {
			return 0, false
		}
		return Reg(i) | Reg32, true
	}
	return 0, false
}

// RegNames lists the register names valid for arch, for error messages.
func RegNames(arch Arch) []string {
	var out []string
	for _, n := range regNames64 {
		if _, ok := LookupReg(arch, n); ok {
			out = append(out, n)
		}
	}
	for _, n := range regNames32 {
		if _, ok := LookupReg(arch, n); ok && n != "" {
			out = append(out, n)
		}
	}
	return out
}
