package unwind

import (
	"bytes"
	"errors"
	"io"

	"github.com/go-delve/delve/pkg/dwarf/leb128"
)

// errExpr is a DWARF expression the evaluator does not take.
var errExpr = errors.New("DWARF expression not evaluated")

// eval runs a DWARF location expression of CFI (DW_CFA_def_cfa_expression,
// DW_CFA_expression, DW_CFA_val_expression) on the registers, with the
// values of push (the CFA, for the last two) on the stack first, and
// returns the value on top. It takes the operations CFI uses: a signal
// frame's (breg, deref: the saved registers in the ucontext), a PLT
// entry's (breg of rip, lit, and, ge, shl, plus), constants and
// arithmetic; anything else (a piece, a call, a register by name) is
// errExpr.
func eval(expr []byte, regs *Regs, valid *[NumRegs]bool, mem Memory, push ...uint64) (uint64, error) {
	st := append(make([]uint64, 0, 8), push...)
	pop := func() (uint64, bool) {
		if len(st) == 0 {
			return 0, false
		}
		v := st[len(st)-1]
		st = st[:len(st)-1]
		return v, true
	}
	r := bytes.NewReader(expr)
	for r.Len() > 0 {
		op, _ := r.ReadByte()
		switch {
		case op >= 0x30 && op <= 0x4f: // DW_OP_lit0..31
			st = append(st, uint64(op-0x30))
			continue
		case op >= 0x70 && op <= 0x8f: // DW_OP_breg0..31
			reg := op - 0x70
			off, _ := leb128.DecodeSigned(r)
			if int(reg) >= NumRegs || !valid[reg] {
				return 0, errExpr
			}
			st = append(st, regs[reg]+uint64(off))
			continue
		}
		switch op {
		case 0x08, 0x09: // const1u, const1s
			b, err := r.ReadByte()
			if err != nil {
				return 0, errExpr
			}
			v := uint64(b)
			if op == 0x09 {
				v = uint64(int64(int8(b)))
			}
			st = append(st, v)
		case 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f: // const2u ... const8s
			n := map[byte]int{0x0a: 2, 0x0b: 2, 0x0c: 4, 0x0d: 4, 0x0e: 8, 0x0f: 8}[op]
			b := make([]byte, n)
			if _, err := io.ReadFull(r, b); err != nil {
				return 0, errExpr
			}
			var v uint64
			for i := n - 1; i >= 0; i-- {
				v = v<<8 | uint64(b[i])
			}
			if op&1 == 1 && n < 8 { // signed: extend
				shift := uint(64 - 8*n)
				v = uint64(int64(v<<shift) >> shift)
			}
			st = append(st, v)
		case 0x10: // constu
			v, _ := leb128.DecodeUnsigned(r)
			st = append(st, v)
		case 0x11: // consts
			v, _ := leb128.DecodeSigned(r)
			st = append(st, uint64(v))
		case 0x12: // dup
			if len(st) == 0 {
				return 0, errExpr
			}
			st = append(st, st[len(st)-1])
		case 0x13: // drop
			if _, ok := pop(); !ok {
				return 0, errExpr
			}
		case 0x16: // swap
			if len(st) < 2 {
				return 0, errExpr
			}
			st[len(st)-1], st[len(st)-2] = st[len(st)-2], st[len(st)-1]
		case 0x06: // deref
			a, ok := pop()
			if !ok {
				return 0, errExpr
			}
			v, ok := read64(mem, a)
			if !ok {
				return 0, errStop
			}
			st = append(st, v)
		case 0x23: // plus_uconst
			a, ok := pop()
			if !ok {
				return 0, errExpr
			}
			v, _ := leb128.DecodeUnsigned(r)
			st = append(st, a+v)
		case 0x96: // nop
		case 0x1a, 0x1c, 0x1e, 0x21, 0x22, 0x24, 0x25, 0x26, 0x27, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e:
			b, ok1 := pop()
			a, ok2 := pop()
			if !ok1 || !ok2 {
				return 0, errExpr
			}
			var v uint64
			bool1 := func(c bool) uint64 {
				if c {
					return 1
				}
				return 0
			}
			switch op {
			case 0x1a:
				v = a & b
			case 0x1c:
				v = a - b
			case 0x1e:
				v = a * b
			case 0x21:
				v = a | b
			case 0x22:
				v = a + b
			case 0x24:
				v = a << b
			case 0x25:
				v = a >> b
			case 0x26:
				v = uint64(int64(a) >> b)
			case 0x27:
				v = a ^ b
			case 0x29:
				v = bool1(a == b)
			case 0x2a:
				v = bool1(int64(a) >= int64(b))
			case 0x2b:
				v = bool1(int64(a) > int64(b))
			case 0x2c:
				v = bool1(int64(a) <= int64(b))
			case 0x2d:
				v = bool1(int64(a) < int64(b))
			case 0x2e:
				v = bool1(a != b)
			}
			st = append(st, v)
		default:
			return 0, errExpr
		}
	}
	v, ok := pop()
	if !ok {
		return 0, errExpr
	}
	return v, nil
}
