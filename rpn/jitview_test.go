package rpn

import "testing"

// The view gives back what the verifier decoded: instruction indices,
// jump targets as indices, byte offsets, word geometry.
func TestJITView(t *testing.T) {
	code := []byte{
		byte(OpPushD), 7, 0, 0, 0, 0, 0, 0, 0, // 0
		byte(OpJz), 15, 0, 0, 0, // 9: jz 15
		byte(OpNop),     // 14
		byte(OpExit), 1, // 15
		byte(OpAbort), // 17: second probe
	}
	m := &Module{
		Header: Header{Name: "t", JmpMax: 10, LogMax: 16, Arch: ArchI386},
		Probes: []Probe{
			{Loc: Location{Text: "0", Kind: LocAbsolute}, Entry: 0, End: 17},
			{Loc: Location{Text: "1", Kind: LocAbsolute}, Entry: 17, End: 18},
		},
		Code: code,
	}
	p, err := Load(m)
	if err != nil {
		t.Fatal(err)
	}
	if p.NumInsns() != 5 || p.Entry(0) != 0 || p.End(0) != 4 || p.Entry(1) != 4 || p.End(1) != 5 {
		t.Fatalf("n %d, ranges %d..%d %d..%d", p.NumInsns(), p.Entry(0), p.End(0), p.Entry(1), p.End(1))
	}
	if in := p.Insn(0); in.Op != OpPushD || in.Imm != 7 {
		t.Errorf("insn 0 = %+v", in)
	}
	if in := p.Insn(1); in.Op != OpJz || in.C != 3 {
		t.Errorf("insn 1 = %+v, want jz to instruction 3", in)
	}
	if in := p.Insn(3); in.Op != OpExit || in.A != 1 {
		t.Errorf("insn 3 = %+v", in)
	}
	for i, want := range []uint32{0, 9, 14, 15, 17} {
		if p.PC(i) != want {
			t.Errorf("PC(%d) = %d, want %d", i, p.PC(i), want)
		}
	}
	if p.WordMask() != 0xffffffff || p.WordShift() != 32 || p.WordSize() != 4 {
		t.Errorf("word %#x %d %d", p.WordMask(), p.WordShift(), p.WordSize())
	}
}
