package x86

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/arch/x86/x86asm"

	"github.com/gprobes/gprobes/rpn"
)

// Regs is the canonical register set, indexed by rpn.Reg. 32-bit code uses
// the low halves.
type Regs = [rpn.NumRegs]uint64

// Insn is one decoded instruction.
type Insn struct {
	Addr  uint64
	Len   int
	Bytes []byte      // the instruction's bytes (a copy)
	Inst  x86asm.Inst // the decoded form; Op is 0 when x86asm cannot decode it (see Known)
	Mode  int         // 64 or 32

	// Kernel says the instruction runs in kernel mode: privileged
	// instructions are then stepped instead of refused. Decode sets it
	// false; DecodeKernel sets it true.
	Kernel bool

	// What Classify decided, and why (for query output and errors).
	Class Class
	Why   string

	// RIPDispOff is the offset in Bytes of the disp32 of a RIP-relative
	// memory operand, or -1.
	RIPDispOff int

	lay   layout
	asmOK bool   // Inst is x86asm's decoding and agrees with the length
	name  string // mnemonic for instructions x86asm does not know (endbr64)
}

// Known reports whether Inst holds x86asm's decoding of the instruction.
// When it does not (x86asm rejects endbr64, rdpkru, some hint NOPs) the
// instruction's length and operand positions are still exact.
func (in *Insn) Known() bool { return in.asmOK }

// String returns the instruction in AT&T syntax, as objdump prints it.
func (in *Insn) String() string {
	if in.asmOK {
		return x86asm.GNUSyntax(in.Inst, in.Addr, nil)
	}
	if in.name != "" {
		return in.name
	}
	var b strings.Builder
	b.WriteString(".byte ")
	for i, c := range in.Bytes {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "0x%02x", c)
	}
	return b.String()
}

// DecodeError says why bytes at an address are not an instruction.
type DecodeError struct {
	Addr      uint64
	Bytes     []byte // up to 15 bytes from Addr
	Truncated bool   // the bytes ran out inside the instruction
	Reason    string
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("cannot decode instruction at %#x (% x): %s", e.Addr, e.Bytes, e.Reason)
}

// Decode decodes the instruction at the start of code, which is at addr,
// in 64- or 32-bit mode, and classifies it for user mode. code must hold
// the ORIGINAL bytes: an int3 the engine planted must be replaced by the
// saved byte first. On error the returned Insn has Class Refuse.
func Decode(code []byte, addr uint64, mode int) (Insn, error) {
	return decode(code, addr, mode, false)
}

// DecodeKernel is Decode for code that runs in kernel mode.
func DecodeKernel(code []byte, addr uint64, mode int) (Insn, error) {
	return decode(code, addr, mode, true)
}

func decode(code []byte, addr uint64, mode int, kernel bool) (Insn, error) {
	in := Insn{Addr: addr, Mode: mode, Kernel: kernel, RIPDispOff: -1, Class: Refuse}
	l, err := parseLayout(code, mode)
	if err != nil {
		n := min(len(code), maxInsnLen)
		de := &DecodeError{Addr: addr, Bytes: append([]byte(nil), code[:n]...), Reason: err.Error()}
		var le *layoutError
		if errors.As(err, &le) {
			de.Truncated = le.truncated
		}
		in.Why = de.Error()
		return in, de
	}
	in.lay = l
	in.Len = l.len
	in.Bytes = append([]byte(nil), code[:l.len]...)
	if l.ripRel {
		in.RIPDispOff = l.dispOff
	}
	inst, err := x86asm.Decode(in.Bytes, mode)
	if err == nil && inst.Op != 0 && inst.Len == l.len {
		in.Inst, in.asmOK = inst, true
		for _, p := range inst.Prefix {
			if p == 0 {
				break
			}
			if p&x86asm.PrefixInvalid != 0 {
				in.asmOK = false // e.g. lock on an instruction that does not take it
			}
		}
	}
	if in.asmOK && l.dispLen == 4 {
		// x86asm zero-extends disp32; the CPU sign-extends it.
		for i, a := range in.Inst.Args {
			if m, ok := a.(x86asm.Mem); ok {
				m.Disp = int64(int32(m.Disp))
				in.Inst.Args[i] = m
			}
		}
	}
	if !in.asmOK {
		in.Inst = x86asm.Inst{Mode: mode, Len: l.len}
		if inst.Op != 0 && inst.Len != l.len {
			in.name = strings.ToLower(inst.Op.String()) // x86asm knows the name, not the length (vzeroupper)
		}
		if n := knownName(&l); n != "" {
			in.name = n
		}
	}
	Classify(&in)
	return in, nil
}

// knownName names instructions x86asm v0.32.0 does not decode.
func knownName(l *layout) string {
	if l.esc != escNone {
		return ""
	}
	switch {
	case l.omap == 1 && l.op == 0x1e && l.rep && l.modrm == 0xfa:
		return "endbr64"
	case l.omap == 1 && l.op == 0x1e && l.rep && l.modrm == 0xfb:
		return "endbr32"
	case l.omap == 1 && l.op == 0x1e && l.rep && l.mod() == 3 && l.reg() == 1:
		if l.rexW() {
			return "rdsspq"
		}
		return "rdsspd"
	case l.omap == 1 && l.op == 0x01 && l.modrm == 0xee:
		return "rdpkru"
	case l.omap == 1 && l.op == 0x01 && l.modrm == 0xef:
		return "wrpkru"
	case l.omap == 1 && (l.op >= 0x19 && l.op <= 0x1f || l.op == 0x18 && l.mod() == 3):
		return "nop (hint)"
	}
	return ""
}

// isEndbr reports whether the instruction is endbr64 or endbr32.
func (in *Insn) isEndbr() bool {
	l := &in.lay
	return l.esc == escNone && l.omap == 1 && l.op == 0x1e && l.rep && (l.modrm == 0xfa || l.modrm == 0xfb)
}

// BoundaryError says that an address is not the start of an instruction.
type BoundaryError struct {
	Addr uint64
	// Insn is the instruction that contains Addr, when decoding reached it.
	Insn *Insn
	// Err is set when decoding failed before reaching Addr, or Addr is
	// outside the function.
	Err error
}

func (e *BoundaryError) Error() string {
	if e.Insn != nil {
		return fmt.Sprintf("%#x is inside `%s` at %#x (%d bytes): probe %#x instead",
			e.Addr, e.Insn.String(), e.Insn.Addr, e.Insn.Len, e.Insn.Addr)
	}
	return fmt.Sprintf("cannot check that %#x is an instruction boundary: %v", e.Addr, e.Err)
}

func (e *BoundaryError) Unwrap() error { return e.Err }

// CheckBoundary decodes fn (the bytes of the enclosing function, which
// starts at fnStart) linearly and reports whether addr is the start of an
// instruction. A function whose code holds data (jump tables inline, as
// some hand-written assembly does) can make the linear decode fail; the
// error then says where decoding stopped.
func CheckBoundary(fn []byte, fnStart, addr uint64, mode int) error {
	if addr < fnStart || addr-fnStart >= uint64(len(fn)) {
		return &BoundaryError{Addr: addr, Err: fmt.Errorf("it is outside the function [%#x, %#x)", fnStart, fnStart+uint64(len(fn)))}
	}
	want := int(addr - fnStart)
	pc := 0
	for pc < want {
		l, err := parseLayout(fn[pc:], mode)
		if err != nil {
			n := min(len(fn)-pc, maxInsnLen)
			return &BoundaryError{Addr: addr, Err: fmt.Errorf("decoding failed at %#x (% x), before reaching it: %v", fnStart+uint64(pc), fn[pc:pc+n], err)}
		}
		if pc+l.len > want {
			in, _ := Decode(fn[pc:], fnStart+uint64(pc), mode)
			return &BoundaryError{Addr: addr, Insn: &in}
		}
		pc += l.len
	}
	return nil
}
