//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	dpdfc "github.com/gprobes/gprobes/compiler" // bpf has a type compiler
	"github.com/gprobes/gprobes/dpdf"
	"github.com/gprobes/gprobes/rpn"
)

// A verifier's complaint names the RPN instruction whose eBPF it stopped
// at: its pc and DPDF line.
func TestVerifierErrorMapping(t *testing.T) {
	src := "name = vmlinux\nmodtype = kernel\noffset = 0x1000\npush d,1\npush d,2\nadd\nlog 1\nexit 1\n"
	f, err := dpdf.ParseSource("v.dpdf", []byte(src), dpdf.Options{NoPreprocessor: true})
	if err != nil {
		t.Fatal(err)
	}
	p, err := dpdfc.CompileProgram(f, rpn.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := CompileProbe(p, 0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// the first eBPF instruction of the add (the third RPN instruction)
	raw := -1
	for r, i := range c.rpn {
		if i == 2 {
			raw = r
			break
		}
	}
	if raw < 0 {
		t.Fatal("no eBPF for the add")
	}
	log := []string{"0: R1=ctx() R10=fp0", fmt.Sprintf("%d: (79) r1 = *(u64 *)(r6 +8)", raw), "R6 invalid mem access 'scalar'", "processed 20 insns (limit 1000000)"}
	err = c.verifierError(log, errors.New("load program: permission denied"))
	var ve *VerifierError
	if !errors.As(err, &ve) || !ve.HasPC || ve.PC != p.PC(2) || ve.Where != "v.dpdf:6:1" || ve.Msg != "R6 invalid mem access 'scalar'" || ve.Insn != raw {
		t.Fatalf("%#v", err)
	}
	if !strings.Contains(err.Error(), "v.dpdf:6:1: R6 invalid mem access") {
		t.Fatal(err)
	}
	// in the glue (the prologue): no pc
	err = c.verifierError([]string{"1: (bf) r9 = r1", "something", "processed 2 insns"}, errors.New("x"))
	if !errors.As(err, &ve) || ve.HasPC || ve.Msg != "something" {
		t.Fatalf("%#v", err)
	}
	t.Log(err)
}
