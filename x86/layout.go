package x86

// This file is the structural decoder: it finds an instruction's length and
// where its parts are (prefixes, opcode, ModRM, SIB, displacement,
// immediate) without knowing what the instruction does. It is the authority
// for Insn.Len and Insn.RIPDispOff; x86asm supplies the meaning. The two
// are kept separate because x86asm v0.32.0 gets lengths wrong for a few
// instructions compilers emit (vzeroupper is read as 4 bytes instead of 3;
// endbr64 as a 1-byte "rep"; rdpkru is rejected), and a wrong length is
// the one mistake a breakpoint engine cannot survive: the jump back from an
// out-of-line slot would land inside an instruction.
//
// The tables follow the Intel SDM volume 2 appendix A opcode maps (and the
// AMD APM for XOP and 3DNow!). They describe operand *encoding* only: which
// opcodes take a ModRM byte and how many immediate bytes follow.

import "fmt"

// Immediate kinds, in the low bits of an opcode's table entry.
const (
	immNone  = iota
	immB     // 1 byte
	immW     // 2 bytes
	immZ     // 2 with operand-size 16, else 4
	immV     // 2, 4 or 8 (mov reg, imm with REX.W)
	immRel   // near branch displacement: 4 in 64-bit mode, 2 or 4 in 32-bit mode
	immPtr   // far pointer: 4 or 6 (32-bit mode only)
	immMoffs // address-sized offset (mov al, moffs)
	immEnter // enter: 2 + 1
	immGrp3  // F6/F7: /0 and /1 (test) take an immediate of the operand size

	immMask = 0x0f
)

// Opcode table flags.
const (
	fModRM  = 1 << (4 + iota) // a ModRM byte follows the opcode
	fInv64                    // invalid in 64-bit mode
	fInv                      // invalid in every mode
	fPrefix                   // a legacy prefix (never reaches the table lookup)
)

var (
	oneByte [256]uint8 // legacy map 0
	twoByte [256]uint8 // legacy map 1 (0F xx)
)

func init() {
	set := func(t *[256]uint8, lo, hi int, v uint8) {
		for i := lo; i <= hi; i++ {
			t[i] = v
		}
	}
	t := &oneByte
	// 00-3F: the eight ALU rows, each Eb,Gb Ev,Gv Gb,Eb Gv,Ev AL,Ib eAX,Iz.
	for row := 0; row < 8; row++ {
		b := row * 8
		set(t, b, b+3, fModRM)
		t[b+4] = immB
		t[b+5] = immZ
	}
	for _, op := range []int{0x06, 0x07, 0x0e, 0x16, 0x17, 0x1e, 0x1f, 0x27, 0x2f, 0x37, 0x3f} {
		t[op] = fInv64 // push/pop es cs ss ds, daa das aaa aas
	}
	t[0x26], t[0x2e], t[0x36], t[0x3e] = fPrefix, fPrefix, fPrefix, fPrefix
	// 40-5F: inc/dec (REX in 64-bit mode, handled before the lookup), push/pop.
	t[0x60], t[0x61] = fInv64, fInv64 // pusha popa
	t[0x62] = fModRM | fInv64         // bound (EVEX in 64-bit mode)
	t[0x63] = fModRM                  // arpl / movsxd
	set(t, 0x64, 0x67, fPrefix)
	t[0x68] = immZ
	t[0x69] = fModRM | immZ
	t[0x6a] = immB
	t[0x6b] = fModRM | immB
	set(t, 0x70, 0x7f, immB) // jcc rel8
	t[0x80] = fModRM | immB
	t[0x81] = fModRM | immZ
	t[0x82] = fModRM | immB | fInv64
	t[0x83] = fModRM | immB
	set(t, 0x84, 0x8f, fModRM)
	t[0x9a] = immPtr | fInv64 // call far
	set(t, 0xa0, 0xa3, immMoffs)
	t[0xa8] = immB
	t[0xa9] = immZ
	set(t, 0xb0, 0xb7, immB)
	set(t, 0xb8, 0xbf, immV)
	t[0xc0], t[0xc1] = fModRM|immB, fModRM|immB
	t[0xc2] = immW
	t[0xc4], t[0xc5] = fModRM|fInv64, fModRM|fInv64 // les lds (VEX when they are not)
	t[0xc6] = fModRM | immB
	t[0xc7] = fModRM | immZ
	t[0xc8] = immEnter
	t[0xca] = immW
	t[0xcd] = immB
	t[0xce] = fInv64 // into
	set(t, 0xd0, 0xd3, fModRM)
	t[0xd4], t[0xd5] = immB|fInv64, immB|fInv64 // aam aad
	t[0xd6] = fInv                              // salc: undefined
	set(t, 0xd8, 0xdf, fModRM)                  // x87
	set(t, 0xe0, 0xe7, immB)                    // loop*, jcxz, in/out imm8
	t[0xe8], t[0xe9] = immRel, immRel
	t[0xea] = immPtr | fInv64
	t[0xeb] = immB
	t[0xf0], t[0xf2], t[0xf3] = fPrefix, fPrefix, fPrefix
	t[0xf6], t[0xf7] = fModRM|immGrp3, fModRM|immGrp3
	t[0xfe], t[0xff] = fModRM, fModRM

	t = &twoByte
	set(t, 0x00, 0x03, fModRM)
	t[0x04], t[0x0a], t[0x0c] = fInv, fInv, fInv
	t[0x0d] = fModRM        // prefetch
	t[0x0f] = fModRM | immB // 3DNow!: the opcode is the trailing byte
	set(t, 0x10, 0x1f, fModRM)
	set(t, 0x20, 0x23, fModRM) // mov cr, dr
	set(t, 0x24, 0x27, fInv)   // mov tr (386 only)
	set(t, 0x28, 0x2f, fModRM)
	t[0x36] = fInv
	t[0x39] = fInv
	set(t, 0x3b, 0x3f, fInv)
	set(t, 0x40, 0x6f, fModRM)
	set(t, 0x70, 0x73, fModRM|immB)
	set(t, 0x74, 0x76, fModRM)
	set(t, 0x78, 0x79, fModRM) // vmread vmwrite; extrq insertq (see parseLayout)
	t[0x7a], t[0x7b] = fInv, fInv
	set(t, 0x7c, 0x7f, fModRM)
	set(t, 0x80, 0x8f, immRel) // jcc rel32
	set(t, 0x90, 0x9f, fModRM) // setcc
	t[0xa3] = fModRM
	t[0xa4] = fModRM | immB
	t[0xa5] = fModRM
	t[0xa6], t[0xa7] = fModRM, fModRM // VIA PadLock (xsha*, xcrypt*, xstore)
	t[0xab] = fModRM
	t[0xac] = fModRM | immB
	set(t, 0xad, 0xaf, fModRM)
	set(t, 0xb0, 0xbf, fModRM)
	t[0xba] = fModRM | immB
	set(t, 0xc0, 0xc1, fModRM)
	t[0xc2] = fModRM | immB
	t[0xc3] = fModRM
	set(t, 0xc4, 0xc6, fModRM|immB)
	t[0xc7] = fModRM
	set(t, 0xd0, 0xff, fModRM)
	// 0F 38 and 0F 3A are escapes handled in parseLayout; the rest (05-09,
	// 0B, 0E, 30-37, 77, A0-A2, A8-AA, C8-CF) have no operand bytes.
}

// Escape kinds of the opcode: legacy maps, then VEX, EVEX and XOP.
const (
	escNone = iota
	escVEX
	escEVEX
	escXOP
)

// layout is where the parts of one instruction are.
type layout struct {
	mode int
	len  int

	p66, p67, lock, rep, repne bool
	seg                        byte // last segment-override prefix, 0 if none
	rex                        byte // REX prefix in effect (immediately before the opcode), 0 if none

	esc   int  // escNone, escVEX, escEVEX, escXOP
	omap  int  // opcode map: 0 one-byte, 1 0F, 2 0F38, 3 0F3A; VEX/EVEX/XOP map number
	op    byte // the opcode byte within its map
	opOff int

	modrmOff int // -1 when the instruction has no ModRM byte
	modrm    byte
	sibOff   int // -1 when none
	dispOff  int // -1 when none
	dispLen  int
	immOff   int // -1 when none
	immLen   int
	ripRel   bool // [rip+disp32] (or [eip+disp32] with 0x67) in 64-bit mode
}

func (l *layout) hasModRM() bool { return l.modrmOff >= 0 }
func (l *layout) mod() byte      { return l.modrm >> 6 }
func (l *layout) reg() byte      { return l.modrm >> 3 & 7 }
func (l *layout) rm() byte       { return l.modrm & 7 }
func (l *layout) memOperand() bool {
	return l.hasModRM() && l.mod() != 3
}
func (l *layout) rexW() bool { return l.rex&8 != 0 }

// operand-size in bytes for immZ-sized operands.
func (l *layout) opsizeZ() int {
	if l.p66 && !l.rexW() {
		return 2
	}
	return 4
}

// addrSize is the address size in bits.
func (l *layout) addrSize() int {
	switch {
	case l.mode == 64 && l.p67:
		return 32
	case l.mode == 64:
		return 64
	case l.p67:
		return 16
	}
	return 32
}

// layoutError says why bytes are not one instruction.
type layoutError struct {
	truncated bool
	msg       string
}

func (e *layoutError) Error() string { return e.msg }

var errTruncated = &layoutError{truncated: true, msg: "truncated instruction"}

func invalid(format string, args ...any) error {
	return &layoutError{msg: fmt.Sprintf(format, args...)}
}

const maxInsnLen = 15

// parseLayout finds the structure of the instruction at the start of code.
// mode is 64 or 32.
func parseLayout(code []byte, mode int) (layout, error) {
	l := layout{mode: mode, modrmOff: -1, sibOff: -1, dispOff: -1, immOff: -1}
	if mode != 64 && mode != 32 {
		return l, invalid("mode %d is not 64 or 32", mode)
	}
	at := func(i int) (byte, error) {
		if i >= len(code) {
			return 0, errTruncated
		}
		if i >= maxInsnLen {
			return 0, invalid("longer than %d bytes", maxInsnLen)
		}
		return code[i], nil
	}

	// Legacy prefixes and REX. A REX prefix counts only when it is the last
	// prefix before the opcode; a legacy prefix after it cancels it.
	pos := 0
	var b byte
	var err error
prefixes:
	for {
		if b, err = at(pos); err != nil {
			return l, err
		}
		switch b {
		case 0x66:
			l.p66 = true
		case 0x67:
			l.p67 = true
		case 0xf0:
			l.lock = true
		case 0xf2:
			l.repne, l.rep = true, false
		case 0xf3:
			l.rep, l.repne = true, false
		case 0x26, 0x2e, 0x36, 0x3e, 0x64, 0x65:
			l.seg = b
		default:
			if mode == 64 && b&0xf0 == 0x40 {
				l.rex = b
				pos++
				continue
			}
			break prefixes
		}
		l.rex = 0
		pos++
	}

	// VEX, EVEX and XOP. In 32-bit mode C4, C5 and 62 are les, lds and bound
	// unless the next byte has both top bits set (an invalid ModRM for those).
	escLen := 0
	switch b {
	case 0xc4, 0xc5, 0x62:
		n, err := at(pos + 1)
		if err != nil {
			return l, err
		}
		if mode == 64 || n&0xc0 == 0xc0 {
			switch b {
			case 0xc5:
				l.esc, l.omap, escLen = escVEX, 1, 2
			case 0xc4:
				l.esc, l.omap, escLen = escVEX, int(n&0x1f), 3
			case 0x62:
				l.esc, l.omap, escLen = escEVEX, int(n&7), 4
			}
		}
	case 0x8f:
		n, err := at(pos + 1)
		if err != nil {
			return l, err
		}
		if n&0x1f >= 8 { // pop r/m has reg=0, so mmmmm >= 8 cannot be a pop
			l.esc, l.omap, escLen = escXOP, int(n&0x1f), 3
		}
	}
	if l.esc != escNone {
		if l.rex != 0 || l.p66 || l.rep || l.repne || l.lock {
			return l, invalid("a VEX/EVEX/XOP prefix after a REX, 66, F2, F3 or lock prefix is #UD")
		}
		for i := 1; i < escLen; i++ {
			if _, err := at(pos + i); err != nil {
				return l, err
			}
		}
		pos += escLen
		if l.op, err = at(pos); err != nil {
			return l, err
		}
		l.opOff = pos
		pos++
		immLen := 0
		hasModRM := true
		switch l.esc {
		case escVEX:
			switch l.omap {
			case 1:
				switch l.op {
				case 0x77: // vzeroupper, vzeroall
					hasModRM = false
				case 0x70, 0x71, 0x72, 0x73, 0xc2, 0xc4, 0xc5, 0xc6:
					immLen = 1
				}
			case 2:
			case 3:
				immLen = 1
			default:
				return l, invalid("VEX opcode map %d is not defined", l.omap)
			}
		case escEVEX:
			switch l.omap {
			case 1:
				switch l.op {
				case 0x70, 0x71, 0x72, 0x73, 0xc2, 0xc4, 0xc5, 0xc6:
					immLen = 1
				}
			case 2, 5, 6:
			case 3:
				immLen = 1
			default:
				return l, invalid("EVEX opcode map %d is not supported", l.omap)
			}
		case escXOP:
			switch l.omap {
			case 8:
				immLen = 1
			case 9:
			case 10:
				immLen = 4
			default:
				return l, invalid("XOP opcode map %d is not defined", l.omap)
			}
		}
		if hasModRM {
			if pos, err = l.parseModRM(code, pos, at); err != nil {
				return l, err
			}
		}
		return l.finish(code, pos, immLen, at)
	}

	// Legacy opcode maps.
	l.opOff = pos
	entry := oneByte[b]
	if b == 0x0f {
		pos++
		if b, err = at(pos); err != nil {
			return l, err
		}
		switch b {
		case 0x38, 0x3a:
			pos++
			op, err := at(pos)
			if err != nil {
				return l, err
			}
			if b == 0x38 {
				l.omap, entry = 2, fModRM
			} else {
				l.omap, entry = 3, fModRM|immB
			}
			b = op
		default:
			l.omap, entry = 1, twoByte[b]
		}
	}
	l.op = b
	pos++
	if entry&fInv != 0 || mode == 64 && entry&fInv64 != 0 {
		return l, invalid("opcode %s is invalid in %d-bit mode", l.opName(), mode)
	}
	if entry&fModRM != 0 {
		if pos, err = l.parseModRM(code, pos, at); err != nil {
			return l, err
		}
	}
	immLen := 0
	switch entry & immMask {
	case immB:
		immLen = 1
	case immW:
		immLen = 2
	case immZ:
		immLen = l.opsizeZ()
	case immV:
		switch {
		case l.rexW():
			immLen = 8
		case l.p66:
			immLen = 2
		default:
			immLen = 4
		}
	case immRel:
		if mode == 64 && l.p66 {
			// Intel ignores 66 on near branches in 64-bit mode (rel32), AMD
			// honours it (rel16, and ip truncated): the length depends on
			// the vendor.
			return l, invalid("operand-size prefix on a near branch in 64-bit mode: its length differs between Intel and AMD")
		}
		if !l.p66 {
			immLen = 4
		} else {
			immLen = 2
		}
	case immPtr:
		if l.p66 {
			immLen = 4
		} else {
			immLen = 6
		}
	case immMoffs:
		immLen = l.addrSize() / 8
	case immEnter:
		immLen = 3
	case immGrp3:
		if l.reg() <= 1 { // test r/m, imm
			if l.op == 0xf6 {
				immLen = 1
			} else {
				immLen = l.opsizeZ()
			}
		}
	}
	if l.omap == 1 && l.op == 0x78 && (l.p66 || l.repne) {
		immLen = 2 // AMD SSE4a extrq/insertq with two imm8
	}
	return l.finish(code, pos, immLen, at)
}

func (l *layout) finish(code []byte, pos, immLen int, at func(int) (byte, error)) (layout, error) {
	if immLen > 0 {
		l.immOff, l.immLen = pos, immLen
		if _, err := at(pos + immLen - 1); err != nil {
			return *l, err
		}
		pos += immLen
	}
	l.len = pos
	return *l, nil
}

// parseModRM reads ModRM, SIB and displacement starting at pos.
func (l *layout) parseModRM(code []byte, pos int, at func(int) (byte, error)) (int, error) {
	m, err := at(pos)
	if err != nil {
		return pos, err
	}
	l.modrmOff, l.modrm = pos, m
	pos++
	mod, rm := m>>6, m&7
	if l.esc == escNone && l.omap == 1 && l.op >= 0x20 && l.op <= 0x23 {
		return pos, nil // mov to/from cr and dr ignore mod: always registers
	}
	if mod == 3 {
		return pos, nil
	}
	disp := 0
	if l.addrSize() == 16 {
		switch {
		case mod == 0 && rm == 6, mod == 2:
			disp = 2
		case mod == 1:
			disp = 1
		}
	} else {
		if rm == 4 {
			sib, err := at(pos)
			if err != nil {
				return pos, err
			}
			l.sibOff = pos
			pos++
			if mod == 0 && sib&7 == 5 {
				disp = 4
			}
		}
		switch {
		case mod == 0 && rm == 5:
			disp = 4
			l.ripRel = l.mode == 64
		case mod == 1:
			disp = 1
		case mod == 2:
			disp = 4
		}
	}
	if disp > 0 {
		l.dispOff, l.dispLen = pos, disp
		if _, err := at(pos + disp - 1); err != nil {
			return pos, err
		}
		pos += disp
	}
	return pos, nil
}

// opName names the opcode bytes for error messages: "0f 0b", "c4 map2 f7".
func (l *layout) opName() string {
	switch {
	case l.esc == escVEX:
		return fmt.Sprintf("VEX map%d %02x", l.omap, l.op)
	case l.esc == escEVEX:
		return fmt.Sprintf("EVEX map%d %02x", l.omap, l.op)
	case l.esc == escXOP:
		return fmt.Sprintf("XOP map%d %02x", l.omap, l.op)
	case l.omap == 1:
		return fmt.Sprintf("0f %02x", l.op)
	case l.omap == 2:
		return fmt.Sprintf("0f 38 %02x", l.op)
	case l.omap == 3:
		return fmt.Sprintf("0f 3a %02x", l.op)
	}
	return fmt.Sprintf("%02x", l.op)
}
