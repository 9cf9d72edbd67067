package x86

import (
	"errors"
	"fmt"
)

// ExitKind says how control may leave a function at an instruction.
type ExitKind uint8

const (
	// ExitRet is a near return: ret, ret imm16, with any prefixes (rep
	// ret, bnd ret).
	ExitRet ExitKind = iota + 1
	// ExitJump is a jmp or jcc whose target is outside the function: a
	// tail call, a jump to a return thunk (jmp __x86_return_thunk), or
	// into a part of the function placed elsewhere (f.cold).
	ExitJump
	// ExitIndirect is a jmp through a register or memory: a switch's
	// jump table, or a tail call through a pointer. Where it goes is
	// known only when it runs.
	ExitIndirect
	// ExitCall is a call rel32 (Target says where): the engine looks for
	// calls of the Go runtime's runtime.morestack among them.
	ExitCall
)

func (k ExitKind) String() string {
	switch k {
	case ExitRet:
		return "ret"
	case ExitJump:
		return "jump out"
	case ExitIndirect:
		return "indirect jump"
	case ExitCall:
		return "call"
	}
	return fmt.Sprintf("ExitKind(%d)", uint8(k))
}

// Exit is one instruction of a function by which control may leave it
// (or, ExitCall, a direct call).
type Exit struct {
	Addr   uint64
	Len    int
	Kind   ExitKind
	Target uint64 // ExitJump, ExitCall: the destination
}

// FunctionExits decodes fn, the bytes of a function that starts at start,
// linearly from its first byte to its last, and returns its returns, its
// jumps out of [start, start+len(fn)), its indirect jumps and its direct
// calls, in address order. It fails where the linear decode fails (data
// in the code, bytes the decoder does not know): a return probe that
// missed a return would miss calls, so the caller refuses the function
// rather than guess. Bytes at the end too few for the instruction they
// start (padding before the next symbol) end the decode.
func FunctionExits(fn []byte, start uint64, mode int) ([]Exit, error) {
	var out []Exit
	end := start + uint64(len(fn))
	for pc := 0; pc < len(fn); {
		l, err := parseLayout(fn[pc:], mode)
		if err != nil {
			var le *layoutError
			if errors.As(err, &le) && le.truncated {
				// the last bytes (padding up to the next symbol) do
				// not make an instruction: the function ended before
				break
			}
			n := min(len(fn)-pc, maxInsnLen)
			return nil, fmt.Errorf("decoding failed at %#x (% x): %v", start+uint64(pc), fn[pc:pc+n], err)
		}
		addr := start + uint64(pc)
		x := Exit{Addr: addr, Len: l.len}
		if l.esc == escNone {
			switch {
			case l.omap == 0 && (l.op == 0xc3 || l.op == 0xc2):
				x.Kind = ExitRet
			case l.omap == 0 && (l.op == 0xe9 || l.op == 0xeb), l.omap == 0 && l.op >= 0x70 && l.op <= 0x7f, l.omap == 1 && l.op >= 0x80 && l.op <= 0x8f:
				in := Insn{Addr: addr, Len: l.len, Bytes: fn[pc : pc+l.len], Mode: mode, lay: l}
				if t := in.Target(); t < start || t >= end {
					x.Kind, x.Target = ExitJump, t
				}
			case l.omap == 0 && l.op == 0xff && (l.reg() == 4):
				x.Kind = ExitIndirect // jmp r/m (FF /5 is a far jump: not taken by compilers)
			case l.omap == 0 && l.op == 0xe8:
				in := Insn{Addr: addr, Len: l.len, Bytes: fn[pc : pc+l.len], Mode: mode, lay: l}
				x.Kind, x.Target = ExitCall, in.Target()
			}
		}
		if x.Kind != 0 {
			out = append(out, x)
		}
		pc += l.len
	}
	return out, nil
}

// IsRet reports whether code starts with a near return (ret, ret imm16,
// with any prefixes).
func IsRet(code []byte) bool {
	l, err := parseLayout(code, 64)
	return err == nil && l.esc == escNone && l.omap == 0 && (l.op == 0xc3 || l.op == 0xc2)
}
