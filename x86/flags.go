package x86

import "math/bits"

// RFLAGS bits.
const (
	FlagCF = 1 << 0
	FlagPF = 1 << 2
	FlagAF = 1 << 4
	FlagZF = 1 << 6
	FlagSF = 1 << 7
	FlagTF = 1 << 8
	FlagIF = 1 << 9
	FlagDF = 1 << 10
	FlagOF = 1 << 11
	FlagRF = 1 << 16
	FlagVM = 1 << 17

	// ArithFlags are the flags arithmetic instructions define.
	ArithFlags = FlagCF | FlagPF | FlagAF | FlagZF | FlagSF | FlagOF
)

// sizeMask returns the mask of an operand of size bytes (1, 2, 4 or 8).
func sizeMask(size int) uint64 {
	if size >= 8 {
		return ^uint64(0)
	}
	return 1<<(8*uint(size)) - 1
}

func signBit(size int) uint64 { return 1 << (8*uint(size) - 1) }

// szp returns SF, ZF and PF for a result r of size bytes.
func szp(r uint64, size int) uint64 {
	r &= sizeMask(size)
	var f uint64
	if r == 0 {
		f |= FlagZF
	}
	if r&signBit(size) != 0 {
		f |= FlagSF
	}
	if bits.OnesCount8(uint8(r))&1 == 0 {
		f |= FlagPF
	}
	return f
}

// add computes a + b + carry (carry 0 or 1) at size bytes and the six
// arithmetic flags, as add and adc set them.
func add(a, b, carry uint64, size int) (uint64, uint64) {
	m := sizeMask(size)
	a, b = a&m, b&m
	var r, cout uint64
	if size == 8 {
		r, cout = bits.Add64(a, b, carry)
	} else {
		s := a + b + carry
		r, cout = s&m, s>>(8*uint(size))&1
	}
	f := szp(r, size)
	if cout != 0 {
		f |= FlagCF
	}
	if (a^b^r)&0x10 != 0 {
		f |= FlagAF
	}
	if (a^r)&(b^r)&signBit(size) != 0 {
		f |= FlagOF
	}
	return r, f
}

// sub computes a - b - borrow (borrow 0 or 1) at size bytes and the six
// arithmetic flags, as sub, sbb, cmp and neg set them.
func sub(a, b, borrow uint64, size int) (uint64, uint64) {
	m := sizeMask(size)
	a, b = a&m, b&m
	var r, bout uint64
	if size == 8 {
		r, bout = bits.Sub64(a, b, borrow)
	} else {
		r = (a - b - borrow) & m
		if a < b+borrow {
			bout = 1
		}
	}
	f := szp(r, size)
	if bout != 0 {
		f |= FlagCF
	}
	if (a^b^r)&0x10 != 0 {
		f |= FlagAF
	}
	if (a^b)&(a^r)&signBit(size) != 0 {
		f |= FlagOF
	}
	return r, f
}

// logic returns the flags of and, or, xor and test: CF and OF clear, SF ZF
// PF from the result. AF is architecturally undefined; Intel and AMD CPUs
// clear it, and the differential test checks that this one does.
func logic(r uint64, size int) uint64 { return szp(r, size) }

// cond evaluates condition code cc (the low nibble of jcc, setcc and
// cmovcc opcodes) against rflags.
func cond(cc byte, f uint64) bool {
	cf, zf, sf, of, pf := f&FlagCF != 0, f&FlagZF != 0, f&FlagSF != 0, f&FlagOF != 0, f&FlagPF != 0
	var t bool
	switch cc >> 1 {
	case 0: // o
		t = of
	case 1: // b, c
		t = cf
	case 2: // e, z
		t = zf
	case 3: // be
		t = cf || zf
	case 4: // s
		t = sf
	case 5: // p
		t = pf
	case 6: // l
		t = sf != of
	case 7: // le
		t = zf || sf != of
	}
	if cc&1 != 0 {
		return !t
	}
	return t
}
