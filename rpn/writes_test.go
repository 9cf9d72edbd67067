package rpn_test

import (
	"testing"

	"github.com/gprobes/gprobes/rpn"
)

// TestWrites: the instructions that write the target are found with their
// probe and line, and a module that only reads has none.
func TestWrites(t *testing.T) {
	m := compile(t, `name = ./a.out
modtype = user
offset = main
push r,rdi
log 1
exit 1
offset = exit
push d,1
pop r,rax
push d,0x1000
push d,7
pop mrf,8
push d,2
pop r,rbx
exit 1
`).Module()
	w := rpn.Writes(m)
	if len(w) != 3 || w[0].Probe != 1 || w[0].Op != rpn.OpPopR || w[1].What != "memory" || w[2].Op != rpn.OpPopR {
		t.Fatalf("%+v", w)
	}
	if got := rpn.WritesSummary(w); got != "registers (pop r at bench.dpdf:9:1), memory (pop mrf at bench.dpdf:12:1)" {
		t.Errorf("summary %q", got)
	}
	if got := rpn.WriteKinds(w); got != "registers, memory" {
		t.Errorf("kinds %q", got)
	}
	if w := rpn.ProbeWrites(m, 0); len(w) != 0 {
		t.Errorf("probe 0 reads only: %+v", w)
	}
}
