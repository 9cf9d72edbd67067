package ppdf

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/rpn"
)

// TestDeepExpressionsInAPPDF: what the daemon does with a PPDF on insert
// (decode, verify, then parse its symbolic locations and relocation
// expressions to resolve them against the live target) never recurses
// once per parenthesis: the deepest expression a PPDF string can hold
// (32,767 parentheses in 64 KiB) is refused by dpdf.ParseExpr with a
// clear error, under a stack limit a recursive parse would overflow.
func TestDeepExpressionsInAPPDF(t *testing.T) {
	defer debug.SetMaxStack(debug.SetMaxStack(8 << 20))
	const n = (MaxString - 1) / 2
	deep := strings.Repeat("(", n) + "x" + strings.Repeat(")", n)
	m := tinyModule()
	m.Probes[0].Loc = rpn.Location{Text: deep, Kind: rpn.LocExpr}
	m.Code = append([]byte{byte(rpn.OpPushD), 0, 0, 0, 0, 0, 0, 0, 0}, m.Code...)
	m.Probes[0].End += 9
	for i := range m.Lines {
		m.Lines[i].PC += 9
	}
	m.Relocs = []rpn.Reloc{{Off: 1, Expr: deep}}
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
	for _, text := range []string{got.Probes[0].Loc.Text, got.Relocs[0].Expr} {
		if _, err := dpdf.ParseExpr(text); err == nil || !strings.Contains(err.Error(), "expr:1:257: expression nested too deeply") {
			t.Errorf("ParseExpr: %v", err)
		}
	}
}
