package x86

import (
	"encoding/hex"
	"errors"
	"testing"

	"golang.org/x/arch/x86/x86asm"

	"github.com/gprobes/gprobes/rpn"
)

// flakyMem succeeds or fails by address parity, and records nothing: the
// fuzz target only checks that nothing panics and that a false return
// changes nothing.
type flakyMem struct{ fail bool }

func (m flakyMem) Read(a uint64, p []byte) bool {
	for i := range p {
		p[i] = 0 // a loaded jump target stays canonical
	}
	return !m.fail
}

func (m flakyMem) Write(a uint64, p []byte) bool { return !m.fail }

// FuzzDecodeClassify: any bytes decode or fail without panicking; every
// class's operations run without panicking; Emulate-class instructions
// emulate whenever memory works, and change nothing when it does not.
func FuzzDecodeClassify(f *testing.F) {
	for _, c := range decodeTable {
		b, _ := hex.DecodeString(c.hex)
		f.Add(b, c.mode == 32, uint64(0x401000))
	}
	f.Add([]byte{0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0}, false, uint64(0x7ffffffff000))
	f.Add([]byte{0x62, 0xf1, 0xfd, 0x48, 0x6f, 0x05, 0, 0, 0, 0}, false, uint64(1<<47-4))
	f.Fuzz(func(t *testing.T, code []byte, m32 bool, addr uint64) {
		mode := 64
		if m32 {
			mode = 32
			addr &= 0xffffffff
		}
		in, err := Decode(code, addr, mode)
		_ = in.String()
		if err != nil {
			if in.Class != Refuse {
				t.Fatalf("% x: error %v but class %v", code, err, in.Class)
			}
			return
		}
		if in.Len < 1 || in.Len > 15 || in.Len > len(code) {
			t.Fatalf("% x: length %d", code, in.Len)
		}
		_ = CheckBoundary(code, addr, addr+uint64(in.Len)/2, mode)

		var regs Regs
		for i := range regs {
			regs[i] = uint64(i) * 0x01010101 // canonical: register jump targets stay emulatable
		}
		regs[rpn.RegRSP] = 0x7ffc0000
		regs[rpn.RegRIP] = addr
		before := regs
		switch in.Class {
		case Emulate:
			// It must emulate when memory works, except a control transfer
			// to a non-canonical address (the CPU raises #GP on it).
			ok := EmulateInsn(&in, &regs, flakyMem{})
			if !ok && regs != before {
				t.Fatalf("`%s`: failed emulation changed registers", in.String())
			}
			if !ok && in.Inst.Op != x86asm.RET && in.Inst.Op != x86asm.CALL && in.Inst.Op != x86asm.JMP {
				t.Fatalf("`%s` (% x): Emulate class but emulation fails with working memory", in.String(), code)
			}
			regs = before
			if !EmulateInsn(&in, &regs, flakyMem{fail: true}) && regs != before {
				t.Fatalf("`%s`: failed emulation changed registers", in.String())
			}
		case Branch:
			if !EmulateBranch(&in, &regs, flakyMem{fail: true}) && regs != before {
				t.Fatalf("`%s`: failed branch changed registers", in.String())
			}
			regs = before
			// with working memory only a non-canonical target can fail
			if !EmulateBranch(&in, &regs, flakyMem{}) && in.canonical(in.Target()) {
				t.Fatalf("`%s`: branch to %#x not emulated", in.String(), in.Target())
			}
		}
		if in.Class != Branch && in.Class != Refuse {
			slot := addr + 0x10000
			b, err := PrepareXOL(&in, slot, in.Class == Boost)
			if err == nil {
				if len(b) != SlotSize {
					t.Fatalf("slot of %d bytes", len(b))
				}
				again, err := Decode(b, slot, mode)
				if err != nil || again.Len != in.Len {
					t.Fatalf("`%s`: slot bytes % x re-decode as %d bytes, %v", in.String(), b, again.Len, err)
				}
			}
			regs = before
			regs[rpn.RegRIP] = slot + uint64(in.Len)
			if err := FixupAfterStep(&in, slot, &regs, flakyMem{}); err != nil && !errors.Is(err, ErrStepAgain) {
				_ = err // indirect calls check the stack word: fine to fail here
			}
			_, _ = SlotPC(&in, slot, slot+3)
		}
	})
}
