//go:build linux

package bpf_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gprobes/gprobes/bpf"
)

// Many conditional branches: the verifier walks the paths it cannot
// prune, a million instructions at most. 60 diamonds of conditional
// logging load straight; 400 are too many for it straight and load in
// loop mode (Compiled.Load falls back by itself).
func TestManyBranches(t *testing.T) {
	needBPF(t)
	ns := []int{60, 400}
	if testing.Short() {
		ns = ns[:1]
	}
	for _, n := range ns {
		var b strings.Builder
		b.WriteString("logmax = 4000\n")
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "push u,rdi\nshr %d\npush d,1\nand\njz l%d\npush d,%d\nlog 1\nl%d: nop\n", i%64, i, i, i)
		}
		b.WriteString("exit 1\n")
		p := compileSrc(t, b.String())
		prog, _, c := load(t, p, bpf.Options{})
		info, err := prog.Info()
		if err != nil {
			t.Fatal(err)
		}
		vi, _ := info.VerifiedInstructions()
		t.Logf("%d diamonds: %d eBPF instructions, loop mode %v, the verifier walked %d", n, len(c.Spec.Instructions), c.Loop, vi)
		if n == 400 && !c.Loop {
			t.Errorf("400 diamonds loaded straight: the fallback to loop mode is not tested")
		}
	}
}
