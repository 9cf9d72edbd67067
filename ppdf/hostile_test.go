package ppdf

import (
	"strings"
	"testing"

	"github.com/gprobes/gprobes/rpn"
)

// TestDeepExpressionsInAPPDF: what the daemon does with a PPDF on insert
// (decode, verify, evaluate the Sums of its locations and relocations)
// never looks at their text, so the deepest expression a PPDF string can
// hold (32,767 parentheses in 64 KiB) is only carried along for people:
// the file decodes and loads, and what is evaluated is the flat Sum.
func TestDeepExpressionsInAPPDF(t *testing.T) {
	const n = (MaxString - 1) / 2
	deep := strings.Repeat("(", n) + "x" + strings.Repeat(")", n)
	m := tinyModule()
	m.Probes[0].Loc = rpn.Location{Text: deep, Kind: rpn.LocExpr, Sum: sym("x")}
	m.Code = append([]byte{byte(rpn.OpPushD), 0, 0, 0, 0, 0, 0, 0, 0}, m.Code...)
	m.Probes[0].End += 9
	for i := range m.Lines {
		m.Lines[i].PC += 9
	}
	m.Relocs = []rpn.Reloc{{Off: 1, Expr: deep, Sum: sym("x")}}
	data, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rpn.Load(got); err != nil {
		t.Fatal(err)
	}
	env := fakeEnv{"x": 0x1234}
	for _, s := range []rpn.Sum{got.Probes[0].Loc.Sum, got.Relocs[0].Sum} {
		if v, err := s.Eval(env); err != nil || v != 0x1234 {
			t.Errorf("Eval = %#x, %v", v, err)
		}
	}
}
